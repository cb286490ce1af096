/**
 * The `valve` command's audit fixes (CHANGELOG "Fixed (unreleased)"): keys valve refuses are
 * reported by status and never stop pause/resume; the line of turns and the fleet window are
 * read; status checks values as strictly as the store's scripts; connection failures keep
 * their reason; a database that cannot be selected fails; the SCAN has its own deadline; a
 * closed stdout ends watch quietly; doctor reads every master; options that do not apply are
 * bad usage. Most run the command's main() in this process, as cli.test.ts does.
 */
import { spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/cli/connect.js';
import type { Check } from '../../src/cli/doctor.js';
import { type IdStatus, readStatus } from '../../src/cli/state.js';
import { createValve } from '../../src/index.js';
import { normalizeRule } from '../../src/rules/rule.js';
import { recordOf } from '../../src/rulesets.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { type RedisCluster, type RedisServer, startCluster, startRedis } from '../helpers/servers.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { type Ran, valve } from './run-cli.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

let client: Redis;
let auth: RedisServer;
beforeAll(async () => {
  client = new Redis(sharedRedis().url);
  auth = await startRedis({ aclUser: { name: 'u', password: 'p' }, defaultUserOff: true });
}, 60_000);
afterAll(async () => {
  client.disconnect();
  await auth?.stop();
});

const gcra = normalizeRule({ limit: 10, interval: '1h', burst: 10 }, 'r');
const fixed = normalizeRule({ limit: 100, interval: '1h', algorithm: 'fixed-window' }, 'r');
const sliding = normalizeRule({ limit: 10, interval: '1h', algorithm: 'sliding-window' }, 'r');

async function status(prefix: string, id: string): Promise<Ran & { s: IdStatus }> {
  const r = await valve(['status', id, '--json', '--prefix', prefix, '--redis', sharedRedis().url]);
  let s = {} as IdStatus;
  try {
    s = JSON.parse(r.stdout);
  } catch {}
  return { ...r, s };
}

const serverUs = async () => {
  const [sec, usec] = await client.time();
  return Number(sec) * 1e6 + Number(usec);
};
const YEARS_10_US = 10 * 365 * 86_400_000_000;

describe.concurrent('status reports every key the store refuses', () => {
  it('a rules record of another type: status answers and names it; pause and resume still work', async () => {
    const prefix = uniquePrefix('cli');
    await client.hset(`${prefix}:{a}:rules`, 'x', '1');
    const s = await status(prefix, 'a');
    expect(s.code, s.stderr).toBe(0);
    expect(s.s.problems.join('\n')).toMatch(/:\{a\}:rules holds a value of another type, not a rule set/);
    const p = await valve(['pause', 'a', '10m', '--prefix', prefix, '--redis', sharedRedis().url]);
    expect(p.code, p.stderr).toBe(0);
    expect(Number(await client.get(`${prefix}:{a}:pause`))).toBeGreaterThan(Date.now());
    const r = await valve(['resume', 'a', '--prefix', prefix, '--redis', sharedRedis().url]);
    expect(r.code, r.stderr).toBe(0);
    const w = await valve(['watch', 'a', '--count', '1', '--prefix', prefix, '--redis', sharedRedis().url]);
    expect(w.code, w.stderr).toBe(0);
  });

  it('a malformed or far-ahead rules record: a problem, not an unknown id', async () => {
    const prefix = uniquePrefix('cli');
    await client.set(`${prefix}:{a2}:rules`, 'garbage');
    await client.set(`${prefix}:{a3}:rules`, `${(await serverUs()) + YEARS_10_US}:${gcra.digest}`);
    for (const id of ['a2', 'a3']) {
      const s = await status(prefix, id);
      expect(s.code, s.stderr).toBe(0);
      expect(s.s.unknown).toBe(false);
      expect(s.s.problems.join('\n')).toMatch(new RegExp(`:\\{${id}\\}:rules holds "`));
    }
  });

  it('a line of turns and a fleet window that are corrupt: named', async () => {
    const prefix = uniquePrefix('cli');
    await redisStore({ client, prefix }).acquire({
      id: 'b',
      rules: [gcra],
      costs: [1],
      count: 1,
      record: recordOf([gcra]),
    });
    await client.hset(`${prefix}:{b}:line:${gcra.digest}`, 'x', '1');
    await client.set(`${prefix}:{b}:window`, '1,2,3');
    const b = await status(prefix, 'b');
    expect(b.code, b.stderr).toBe(0);
    expect(b.s.problems).toEqual([
      expect.stringMatching(/:\{b\}:window holds "1,2,3", not nine integers/),
      expect.stringMatching(/:\{b\}:line:g\S+ holds a value of another type, not a line/),
    ]);
    // An id holding nothing but a malformed fleet window is not unknown.
    await client.set(`${prefix}:{c}:window`, 'garbage');
    const c = await status(prefix, 'c');
    expect(c.code, c.stderr).toBe(0);
    expect(c.s.unknown).toBe(false);
    expect(c.s.problems.join('\n')).toMatch(/:\{c\}:window holds "garbage"/);
  });

  it('values beyond what the scripts accept: problems, not ten-year waits', async () => {
    const prefix = uniquePrefix('cli');
    const store = redisStore({ client, prefix });
    const rules = [gcra, fixed, sliding];
    await store.acquire({ id: 'd', rules, costs: [1, 1, 1], count: 1, record: recordOf(rules) });
    const now = await serverUs();
    await client.set(`${prefix}:{d}:r:${gcra.digest}`, String(now + YEARS_10_US));
    const raw = await client.get(`${prefix}:{d}:r:${fixed.digest}`);
    await client.set(`${prefix}:{d}:r:${fixed.digest}`, raw!.replace(/:\d+$/, ':5000'));
    await client.rpush(`${prefix}:{d}:r:${sliding.digest}`, String(now + YEARS_10_US), '1');
    await client.zadd(`${prefix}:{d}:leases`, String((now + YEARS_10_US) / 1000), 'tok.1');
    await client.set(`${prefix}:{d}:fence`, '99999999999999999999');
    const s = await status(prefix, 'd');
    expect(s.code, s.stderr).toBe(0);
    expect(s.s.rules.map((r) => [r.digest, r.left, r.problem]).sort()).toEqual(
      rules.map((r) => [r.digest, null, expect.stringMatching(/^unreadable state/)]).sort(),
    );
    expect(s.s.problems).toEqual([
      expect.stringMatching(/:\{d\}:fence holds "9+", not a fencing number/),
      expect.stringMatching(/:\{d\}:leases holds "tok\.1 [\d.]+", not lease expiries/),
    ]);
    expect(s.s.leases).toEqual([]);
    expect(s.s.fence).toBeNull();
  });
});

describe('status shows the fleet window and the line of turns', () => {
  it('an id holding only a fleet window whose budget is in flight: shown, not unknown', async () => {
    const prefix = uniquePrefix('cli');
    const store = redisStore({ client, prefix });
    const probe = await store.windowSend!('fw', 5000);
    await store.windowReport!('fw', probe.seq, 2, 50_000);
    await store.windowSend!('fw', 5000);
    await store.windowSend!('fw', 5000);
    expect((await store.windowSend!('fw', 5000)).seq).toBe(0);
    const s = await status(prefix, 'fw');
    expect(s.code, s.stderr).toBe(0);
    expect(s.s.unknown).toBe(false);
    expect(s.s.window).toMatchObject({ left: 0, inFlight: 2, probeIn: null, waiting: true });
    expect(s.s.window!.resetIn).toBeGreaterThan(40_000);
    const text = await valve(['status', 'fw', '--prefix', prefix, '--redis', sharedRedis().url]);
    expect(text.stdout).toMatch(
      /window {4}fleet window \(wrapFetch\): 0 left until the reset in .*, 2 in flight; new requests wait/,
    );
  });

  it('a live line: its waiting callers and next turn', async () => {
    const prefix = uniquePrefix('cli');
    const store = redisStore({ client, prefix });
    const valves = [0, 1, 2, 3].map(() =>
      createValve({ id: 'ln', rules: { limit: 2, interval: '6s', burst: 2 }, store }),
    );
    await valves[0]!.run(() => {});
    await valves[0]!.run(() => {});
    const waiting = valves.slice(1).map((v) => v.run(() => {}, { maxWait: '30s' }).catch(() => {}));
    await new Promise((r) => setTimeout(r, 500));
    const s = await status(prefix, 'ln');
    const text = await valve(['status', 'ln', '--prefix', prefix, '--redis', sharedRedis().url]);
    for (const v of valves) await v.close({ drain: false } as never).catch(() => {});
    await Promise.all(waiting);
    expect(s.code, s.stderr).toBe(0);
    expect(s.s.lines).toEqual([
      { digest: 'g2.6000000.2', waiting: 3, nextTurnIn: expect.any(Number), step: 3000 },
    ]);
    expect(text.stdout).toMatch(/line {6}3 caller\(s\) waiting for their turn, next turn in/);
  });
});

describe('connecting', () => {
  it('node-redis: a wrong password says so, not "The client is closed"', async () => {
    const r = await valve([
      'status',
      'x',
      '--client',
      'redis',
      '--redis',
      `redis://u:wrong@${auth.host}:${auth.port}`,
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^valve: cannot use .*authentication failed: WRONGPASS/);
    expect(r.stderr).not.toMatch(/client is closed/i);
  });

  it.each(['ioredis', 'iovalkey'])(
    '%s: a database that cannot be selected fails; nothing lands in db 0',
    async (name) => {
      const id = uniquePrefix(`db-${name}`);
      const r = await valve([
        'pause',
        id,
        '10m',
        '--client',
        name,
        '--redis',
        `redis://u:p@${auth.host}:${auth.port}/99`,
      ]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/^valve: cannot use .*SELECT 99 failed: ERR DB index is out of range\n$/);
      const db0 = new Redis({ host: auth.host, port: auth.port, username: 'u', password: 'p' });
      try {
        expect(await db0.exists(`valve:{${id}}:pause`)).toBe(0);
        // And a database that exists works.
        const ok = await valve([
          'pause',
          id,
          '10m',
          '--client',
          name,
          '--redis',
          `redis://u:p@${auth.host}:${auth.port}/3`,
        ]);
        expect(ok.code, ok.stderr).toBe(0);
        await db0.select(3);
        expect(await db0.exists(`valve:{${id}}:pause`)).toBe(1);
      } finally {
        db0.disconnect();
      }
    },
  );
});

it('the SCAN for unrecorded rules stops at its own deadline; the rest is still read', async () => {
  const prefix = uniquePrefix('cli');
  await redisStore({ client, prefix }).pause('big', 600_000);
  const conn = await connect({
    urls: [sharedRedis().url],
    cluster: false,
    client: 'ioredis',
    ca: undefined,
    timeout: 5000,
    reconnect: false,
  });
  try {
    // A node whose every SCAN round takes 100 ms (a big keyspace over a network).
    const node = await conn.nodeFor(`${prefix}:{big}:`);
    const slow = {
      name: node.name,
      call: async (args: readonly string[]) => {
        await new Promise((r) => setTimeout(r, 100));
        const reply = (await node.call(args)) as [string, string[]];
        return args[0] === 'SCAN' ? ['1', reply[1]] : reply; // never finishes by itself
      },
    };
    const t0 = Date.now();
    const s = await readStatus({ ...conn, nodeFor: async () => slow }, prefix, 'big', { scanMs: 350 });
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(s.pause).not.toBeNull();
    expect(s.mismatch).toMatchObject({
      checked: false,
      note: expect.stringMatching(/SCAN stopped after about \d+ keys/),
    });
  } finally {
    await conn.close();
  }
});

it('watch | head -1: ends quietly with exit 0 when the reader goes away', async () => {
  const prefix = uniquePrefix('cli');
  await redisStore({ client, prefix }).pause('pipe', 600_000);
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', 'src/cli/bin.ts', 'watch', 'pipe', '--prefix', prefix, '--redis', sharedRedis().url],
    { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  child.stdout.once('data', () => child.stdout.destroy());
  const code = await new Promise<number | null>((done) => child.on('exit', (c) => done(c)));
  expect(stderr).not.toMatch(/EPIPE|\n\s+at /);
  expect(code).toBe(0);
}, 30_000);

describe('doctor on a cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  }, 120_000);
  afterAll(() => cluster?.stop());

  it('reads every master: a master that may evict is named', async () => {
    const seeds = cluster.nodes.flatMap((n) => ['--redis', `redis://${n.host}:${n.port}`]);
    const [, second, third] = cluster.servers;
    for (const s of [second!, third!]) await s.command(['CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru']);
    const r = await valve(['doctor', '--json', ...seeds]);
    const checks = JSON.parse(r.stdout).checks as Check[];
    const memory = checks.find((c) => c.name === 'memory')!;
    expect(memory.level).toBe('warn');
    for (const s of [second!, third!]) expect(memory.detail).toContain(`${s.host}:${s.port} allkeys-lru`);
    expect(checks.find((c) => c.name === 'server')!.detail).toMatch(/cluster of 3 masters/);
  }, 60_000);
});

it('options that do not apply to the command are bad usage', async () => {
  for (const args of [
    ['watch', 'x', '--json'],
    ['status', 'x', '--count', '3'],
    ['status', 'x', '--plain'],
    ['pause', 'x', '1m', '--plain'],
    ['doctor', '--count', '1'],
  ]) {
    const r = await valve([...args, '--redis', sharedRedis().url]);
    expect(r.code, args.join(' ')).toBe(2);
    expect(r.stderr).toMatch(/^valve: --(json|count|plain) does not apply to \w+ \(only to /);
  }
});
