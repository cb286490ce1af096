/**
 * The `valve` command while the server holds writes: CLIENT PAUSE WRITE, which Redis and Valkey
 * also use during FAILOVER, on a server whose script cache is empty (a restart, a promoted
 * replica, SCRIPT FLUSH). Reads answer then, and so must `status` and `watch` (one read-only
 * script: EVALSHA_RO, then EVAL of its no-writes source): a plain EVALSHA of a script the server
 * does not have is held until the pause ends. `doctor` does not wait for the pause: it says that
 * writes are held. Private servers and a private cluster: pausing the shared ones would hold
 * other files' tests.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Check } from '../../src/cli/doctor.js';
import type { IdStatus } from '../../src/cli/state.js';
import { createValve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import {
  type RedisCluster,
  type RedisServer,
  type ServerKind,
  startCluster,
  startRedis,
} from '../helpers/servers.js';
import { type Ran, valve } from './run-cli.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const ID = 'ops:app-1';
const CLIENTS = ['ioredis', 'iovalkey', 'redis'] as const;
// A sliding window: an aligned fixed window would start again at the top of the hour, between
// the seed and a status read (4 left, then 5).
const RULE = 's5.3600000000';

/** The command's ACL rule of docs/operating.md (default prefix). */
const docsRule = (): string[] =>
  /^ACL SETUSER valve-ops on >change-me (.+)$/m
    .exec(readFileSync(join(root, 'docs/operating.md'), 'utf8'))![1]!
    .split(' ');

let redis: RedisServer;
let valkey: RedisServer;
let cluster: RedisCluster;

/** One job of the id through a valve with a global lease: a recorded rule, 4 of 5 left, a fence. */
async function seed(client: Redis | Cluster): Promise<void> {
  const v = createValve({
    id: ID,
    rules: [{ limit: 5, interval: '1h', algorithm: 'sliding-window' }],
    store: redisStore({ client }),
    concurrency: { limit: 2, scope: 'global', leaseTtl: 60_000 },
  });
  await v.run(() => 1);
  await v.close();
  client.disconnect();
}

beforeAll(async () => {
  const rule = docsRule();
  const users = [
    { name: 'ops', password: 'pw', rules: rule },
    // The rule as documented before EVALSHA_RO was in it.
    { name: 'old', password: 'pw', rules: rule.filter((r) => r !== '+evalsha_ro') },
  ];
  [redis, valkey, cluster] = await Promise.all([
    startRedis({ kind: 'redis', aclUser: users }),
    startRedis({ kind: 'valkey' }),
    startCluster({ kind: 'redis' }),
  ]);
  await seed(new Redis(redis.port, redis.host));
  await seed(new Redis(valkey.port, valkey.host));
  await seed(new Cluster(cluster.nodes, { retryDelayOnFailover: 0 }));
}, 120_000);

afterAll(async () => {
  await Promise.all([redis?.stop(), valkey?.stop(), cluster?.stop()]);
});

/**
 * Runs `fn` while every server holds writes (CLIENT PAUSE WRITE) with an empty script cache,
 * then checks that a write sent at the start was still held when `fn` ended.
 */
async function whilePaused<T>(servers: readonly RedisServer[], fn: () => Promise<T>): Promise<T> {
  for (const s of servers) await s.command(['SCRIPT', 'FLUSH']);
  for (const s of servers) await s.command(['CLIENT', 'PAUSE', '20000', 'WRITE']);
  let answered = false;
  // PUBLISH: held as a write, and no key (a cluster node would answer MOVED at once).
  const write = servers[0]!.command(['PUBLISH', 'valve-test:probe', '1']).then(() => {
    answered = true;
  });
  try {
    const result = await fn();
    expect(answered, 'the write pause was over before the command ended').toBe(false);
    return result;
  } finally {
    for (const s of servers) await s.command(['CLIENT', 'UNPAUSE']);
    await write;
  }
}

const json = <T>(r: Ran): T => {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
};

/** The seeded id's state as status reads it. */
function expectSeeded(s: IdStatus): void {
  expect(s.recorded?.digests).toEqual([RULE]);
  expect(s.rules.map((r) => [r.digest, r.left])).toEqual([[RULE, 4]]);
  expect(s.fence).not.toBeNull();
  expect(s.unknown).toBe(false);
}

const targets = () => [
  { name: 'Redis', servers: [redis], urls: [redis.url] },
  { name: 'Valkey', servers: [valkey], urls: [valkey.url] },
  {
    name: 'Redis Cluster',
    servers: cluster.servers,
    urls: cluster.nodes.map((n) => `redis://${n.host}:${n.port}`),
  },
];

describe.each(CLIENTS)('while writes are paused, with an empty script cache (--client %s)', (client) => {
  it('status answers on Redis, Valkey and a Redis Cluster; watch reads on', async () => {
    for (const t of targets()) {
      const args = [...t.urls.flatMap((u) => ['--redis', u]), '--client', client, '--timeout', '1s'];
      await whilePaused(t.servers, async () => {
        expectSeeded(json<IdStatus>(await valve(['status', ID, '--json', ...args])));
        // Again: the script is cached now (EVALSHA_RO answers).
        expectSeeded(json<IdStatus>(await valve(['status', ID, '--json', ...args])));
      });
      await whilePaused(t.servers, async () => {
        const w = await valve(['watch', ID, '--plain', '--count', '2', ...args]);
        expect(w.code, `${t.name}: ${w.stderr}`).toBe(0);
        const lines = w.stdout.trimEnd().split('\n');
        expect(lines, t.name).toHaveLength(2);
        for (const line of lines) expect(line, t.name).toMatch(/ ops:app-1: 5 per 3600000ms .*1\/5 in use/);
      });
    }
  }, 60_000);

  it('pause fails after --timeout with one line, its prefix printed once (Redis)', async () => {
    const r = await whilePaused([redis], () =>
      valve(['pause', ID, '10s', '--redis', redis.url, '--client', client, '--timeout', '1s']),
    );
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/^valve: Redis pause for id "[^"]+" did not answer within 1000 ms/);
    expect(r.stderr).not.toMatch(/valve: valve:/);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  });

  it('doctor ends within its timeouts and says writes are held', async () => {
    for (const t of targets().slice(0, client === 'ioredis' ? 3 : 1)) {
      const args = [...t.urls.flatMap((u) => ['--redis', u]), '--client', client, '--timeout', '1s'];
      const r = await whilePaused(t.servers, () => valve(['doctor', '--json', ...args]));
      expect(r.code, `${t.name}: ${r.stdout}${r.stderr}`).toBe(1);
      const by = Object.fromEntries((JSON.parse(r.stdout).checks as Check[]).map((c) => [c.name, c]));
      expect(by.server?.level).toBe('ok');
      expect(by.scripts?.level).toBe('fail');
      // The status script answered; the first write (acquire) was held.
      expect(by.scripts?.detail).toMatch(
        /^acquire failed on valve:\{valve-doctor:[0-9a-f]+\}: .*did not answer within 1000 ms.*; the read-only status script answered and this write did not: the server is holding writes \(a FAILOVER or CLIENT PAUSE WRITE/,
      );
      expect(by['wake-ups']?.detail).toMatch(/publishing is held with the writes\)$/);
    }
  }, 60_000);
});

describe('as an ACL user, while writes are paused (Redis)', () => {
  it.each([
    ['the rule of docs/operating.md', 'ops'],
    ['the rule without +evalsha_ro (EVAL instead)', 'old'],
  ])('%s: status answers', async (_, user) => {
    const url = `redis://${user}:pw@${redis.host}:${redis.port}`;
    await whilePaused([redis], async () => {
      for (let i = 0; i < 2; i++)
        expectSeeded(
          json<IdStatus>(await valve(['status', ID, '--json', '--redis', url, '--timeout', '1s'])),
        );
    });
  });
});

describe.each(['redis', 'valkey'] as ServerKind[])('during a FAILOVER (%s)', (kind) => {
  let primary: RedisServer;
  let replica: RedisServer;
  beforeAll(async () => {
    primary = await startRedis({ kind });
    replica = await startRedis({ kind, args: ['--replicaof', primary.host, String(primary.port)] });
    await seed(new Redis(primary.port, primary.host));
    for (;;) {
      const info = String(await primary.command(['INFO', 'replication']));
      if (/^slave0:.*state=online/m.test(info)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
  }, 60_000);
  afterAll(async () => {
    replica?.kill('SIGCONT');
    await Promise.all([primary?.stop(), replica?.stop()]);
  });

  it('status answers; doctor says a FAILOVER is in progress', async () => {
    // A replica that does not catch up: the primary holds writes until FAILOVER's timeout.
    replica.kill('SIGSTOP');
    try {
      await primary.command(['SCRIPT', 'FLUSH']);
      await primary.command(['SET', 'valve-test:behind', '1']);
      await primary.command(['FAILOVER', 'TIMEOUT', '20000']);
      const url = ['--redis', primary.url, '--timeout', '1s'];
      for (const client of CLIENTS)
        expectSeeded(json<IdStatus>(await valve(['status', ID, '--json', '--client', client, ...url])));
      const r = await valve(['doctor', ...url]);
      expect(r.code, r.stdout + r.stderr).toBe(1);
      expect(r.stdout).toMatch(
        /^fail +scripts +acquire failed on .*; a FAILOVER is in progress \(master_failover_state 127\.0\.0\.1:\d+ (waiting-for-sync|failover-in-progress)\), which holds writes until it ends/m,
      );
      expect(String(await primary.command(['INFO', 'replication']))).not.toMatch(
        /^master_failover_state:no-failover/m,
      );
    } finally {
      await primary.command(['FAILOVER', 'ABORT']).catch(() => {});
      replica.kill('SIGCONT');
    }
  }, 60_000);
});
