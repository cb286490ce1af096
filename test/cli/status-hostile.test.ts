/**
 * `valve status` and `valve watch` on state valve never writes: status reports every key the
 * store's scripts refuse (a lease expiring at +inf, a key holding an empty string, a
 * sliding-window sum that is not its entries'), and shows what the store will do with the
 * rest; human output shows what anyone could write to a key (a pause's source, a lease token)
 * as text, never as control characters. Real Redis; main() in this process, as cli.test.ts.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdStatus } from '../../src/cli/state.js';
import { normalizeRule } from '../../src/rules/rule.js';
import { recordOf } from '../../src/rulesets.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { type Ran, valve } from './run-cli.js';

/** The command against the shared Redis server. */
const valveOn = (args: string[]): Promise<Ran> => valve([...args, '--redis', sharedRedis().url]);

async function status(prefix: string, id: string): Promise<Ran & { s: IdStatus }> {
  const r = await valveOn(['status', id, '--json', '--prefix', prefix]);
  let s = {} as IdStatus;
  try {
    s = JSON.parse(r.stdout);
  } catch {}
  return { ...r, s };
}

let client: Redis;
beforeAll(() => {
  client = new Redis(sharedRedis().url);
});
afterAll(() => {
  client.disconnect();
});

const gcra = normalizeRule({ limit: 10, interval: '1h', burst: 10 }, 'r');
const fixed = normalizeRule({ limit: 100, interval: '1h', algorithm: 'fixed-window' }, 'r');
const sliding = normalizeRule({ limit: 20, interval: '1h', algorithm: 'sliding-window' }, 'r');

const serverUs = async () => {
  const [sec, usec] = await client.time();
  return Number(sec) * 1e6 + Number(usec);
};

/** What the store answers a call with all three rules and a lease: the error, or 'ok'. */
async function storeAnswer(prefix: string, id: string): Promise<string> {
  const store = redisStore({ client, prefix });
  const rules = [gcra, fixed, sliding];
  try {
    await store.acquire({
      id,
      rules,
      costs: [1],
      count: 1,
      lease: { limit: 2, ttl: 5000 },
      record: recordOf(rules),
    });
    return 'ok';
  } catch (err) {
    return (err as Error).message;
  }
}

const escaped = (key: string) => key.replace(/[{}[\]().*+?^$|\\]/g, '\\$&');

describe.concurrent('status reports what the scripts refuse', () => {
  it('a lease expiring at +inf (Redis answers "inf"): reported, as the store refuses it', async () => {
    const prefix = uniquePrefix('clih');
    const k = `${prefix}:{a}:leases`;
    await client.zadd(k, 'inf', 'tok.1');
    await client.pexpire(k, 60_000);
    expect(await storeAnswer(prefix, 'a')).toMatch(new RegExp(`VALVE_CORRUPT_STATE ${escaped(k)} holds`));
    const s = await status(prefix, 'a');
    expect(s.code, s.stderr).toBe(0);
    expect(s.s.problems.join('\n')).toMatch(
      new RegExp(`${escaped(k)} holds "tok\\.1 inf", not lease expiries`),
    );
    expect(s.s.leases).toEqual([]);
  });

  for (const [name, suffix, expected] of [
    ['pause', 'pause', /not a pause end/],
    ['fence', 'fence', /not a fencing number/],
    ['rules record', 'rules', /not a rule set/],
    ['fleet window', 'window', /not nine integers/],
    ['line of turns', `line:${gcra.digest}`, /not a line/],
  ] as const) {
    it(`a ${name} key holding an empty string: reported (was: missing, "unknown id")`, async () => {
      const prefix = uniquePrefix('clih');
      const k = `${prefix}:{b}:${suffix}`;
      await client.set(k, '', 'PX', 60_000);
      const s = await status(prefix, 'b');
      expect(s.code, s.stderr).toBe(0);
      expect(s.s.unknown).toBe(false);
      expect(s.s.problems.join('\n')).toMatch(new RegExp(`${escaped(k)} holds an empty string, `));
      expect(s.s.problems.join('\n')).toMatch(expected);
      if (suffix !== 'window' && !suffix.startsWith('line')) {
        // The store refuses it too (the fleet window and the line: other calls read them).
        expect(await storeAnswer(prefix, 'b')).toMatch(new RegExp(`VALVE_CORRUPT_STATE ${escaped(k)} holds`));
      }
    });
  }

  for (const rule of [gcra, fixed]) {
    it(`a ${rule.algorithm} rule key holding an empty string: its rule is reported`, async () => {
      const prefix = uniquePrefix('clih');
      const k = `${prefix}:{c}:r:${rule.digest}`;
      await client.set(k, '', 'PX', 60_000);
      expect(await storeAnswer(prefix, 'c')).toMatch(new RegExp(`VALVE_CORRUPT_STATE ${escaped(k)} holds`));
      const s = await status(prefix, 'c');
      expect(s.code, s.stderr).toBe(0);
      const r = s.s.rules.find((x) => x.digest === rule.digest);
      expect(r?.problem).toMatch(/unreadable state \(an empty string\)/);
      expect(r?.left).toBeNull();
    });
  }
});

describe.concurrent('a sliding-window log: status uses the stored sum, as the scripts do', () => {
  const key = (prefix: string) => `${prefix}:{s}:r:${sliding.digest}`;
  async function seed(prefix: string, log: (now: number) => string[]) {
    const k = key(prefix);
    await client.rpush(k, ...log(await serverUs()));
    await client.pexpire(k, 60_000);
    return k;
  }

  for (const [name, log] of [
    [
      'a stored sum of 1e6 (status said 18 of 20 left)',
      (n: number) => ['1000000', `${n - 2e6}`, '1', `${n - 1e6}`, '1'],
    ],
    [
      'a stored sum of 0 with 20 live units (status said 0 left, the store granted)',
      (n: number) => ['0', `${n - 1000}`, '20'],
    ],
    ['a sum of 0 with expired entries', (n: number) => ['0', `${n - 7200e6}`, '1', `${n - 7100e6}`, '1']],
  ] as const) {
    it(`${name}: reported, and refused by the store`, async () => {
      const prefix = uniquePrefix('clih');
      const k = await seed(prefix, log);
      expect(await storeAnswer(prefix, 's')).toMatch(new RegExp(`VALVE_CORRUPT_STATE ${escaped(k)} holds`));
      const s = await status(prefix, 's');
      expect(s.code, s.stderr).toBe(0);
      const r = s.s.rules.find((x) => x.digest === sliding.digest);
      expect(r?.problem).toMatch(/not the sum of its entries' costs/);
      expect(r?.left).toBeNull();
    });
  }

  it('an honest log with entries that left: units left from the stored sum, and the store agrees', async () => {
    const prefix = uniquePrefix('clih');
    // 3 units 2 h ago (left the 1 h window), 5 a second ago: 15 of 20 left.
    await seed(prefix, (n) => ['8', `${n - 7200e6}`, '3', `${n - 1e6}`, '5']);
    const s = await status(prefix, 's');
    expect(s.code, s.stderr).toBe(0);
    const r = s.s.rules.find((x) => x.digest === sliding.digest);
    expect(r?.problem).toBeUndefined();
    expect(r?.left).toBe(15);
    const store = redisStore({ client, prefix });
    const got = await store.acquire({ id: 's', rules: [sliding], costs: [15, 1], count: 2 });
    expect(got.granted).toBe(1);
  });
});

describe.concurrent('human output shows what anyone could write as text', () => {
  const hostile = 'evil\n\u001b[2J\u001b[31mRED\r\u202eabc';
  // Any control character but the newline that ends each line, or the right-to-left override.
  const raw = (text: string) =>
    [...text].some((ch) => (ch < ' ' && ch !== '\n') || ch === '\u007f' || ch === '\u202e');

  it('a pause source with newlines and escape codes: status and watch --plain show it escaped; --json keeps it', async () => {
    const prefix = uniquePrefix('clih');
    const base = `${prefix}:{p}`;
    await client.set(`${base}:pause`, String(Date.now() + 60_000), 'PX', 60_000);
    await client.set(`${base}:pause-by`, hostile, 'PX', 60_000);
    await client.zadd(`${base}:leases`, String(Date.now() + 60_000), 'tok\u001b[2J.7');
    await client.pexpire(`${base}:leases`, 60_000);

    const human = await valveOn(['status', 'p', '--prefix', prefix]);
    expect(human.code, human.stderr).toBe(0);
    expect(raw(human.stdout)).toBe(false);
    const pauseLine = human.stdout.split('\n').find((l) => l.startsWith('pause'));
    expect(pauseLine).toContain('by evil\\n\\x1b[2J\\x1b[31mRED\\r\\u202eabc;');
    expect(human.stdout).toContain('tok\\x1b[2J.7  fence 7');

    const w = await valveOn(['watch', 'p', '--count', '1', '--plain', '--prefix', prefix]);
    expect(w.code, w.stderr).toBe(0);
    expect(w.stdout.split('\n')).toHaveLength(2); // one line, then the end of it
    expect(raw(w.stdout)).toBe(false);
    expect(w.stdout).toContain('by evil\\n\\x1b[2J\\x1b[31mRED\\r\\u202eabc)');

    const s = await status(prefix, 'p');
    expect(s.s.pause?.by).toBe(hostile);
    expect(s.s.leases.map((l) => l.token)).toEqual(['tok\u001b[2J.7']);
  });
});

it('a record naming the same rules many times: each shown once', async () => {
  const prefix = uniquePrefix('clih');
  const digests = Array.from({ length: 50 }, (_, i) => `g${i + 1}.1000000.1`);
  const nowUs = await serverUs();
  const record = `${Math.round(nowUs + 3_600e6)}:${[...digests, ...digests, ...digests].join(',')}`;
  await client.set(`${prefix}:{d}:rules`, record, 'PX', 60_000);
  const s = await status(prefix, 'd');
  expect(s.code, s.stderr).toBe(0);
  expect(s.s.rules.map((r) => r.digest)).toEqual(digests);
});
