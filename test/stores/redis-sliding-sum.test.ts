/**
 * A sliding-window log's stored sum (its first element) against its entries: the scripts use
 * the sum and never add the entries up, so a sum that cannot be theirs (below the oldest live
 * entry's cost, above the limit per live entry, left over once every entry has left) is
 * refused with VALVE_CORRUPT_STATE naming the key, before anything is written. Honest logs,
 * those of a rule set changed back and forth within an interval included, are read as before.
 * Real Redis, on the store's test clock.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { recordOf } from '../../src/rulesets.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

type IORedis = import('ioredis').Redis;

const sliding = normalizeRule({ limit: 20, interval: '1m', algorithm: 'sliding-window' }, 'rules[0]');
const gcra = normalizeRule({ limit: 10, interval: '1s', burst: 2 }, 'rules[1]');

describe('a sliding-window sum that cannot be its entries’: refused, naming the key', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });
  const redis = () => c.client as IORedis;

  function setup() {
    const clock = new FakeClock(1_700_000_000_000);
    const prefix = uniquePrefix('slsum');
    const store = redisStore({ client: c.client, prefix, unsafeTestClock: clock });
    const key = (suffix: string) => `${prefix}:{s}:${suffix}`;
    const nowUs = Math.round(clock.now() * 1000);
    return { clock, store, key, nowUs };
  }
  const corrupt = (key: string) =>
    new RegExp(`VALVE_CORRUPT_STATE ${key.replace(/[{}[\]().*+?^$|\\]/g, '\\$&')} holds`);

  const cases: [string, (nowUs: number) => string[]][] = [
    // The audit's log: 20 units a millisecond ago, a sum of 0; a job was granted (21 in the window).
    ['a sum of 0 below its live entry of 20 (the limit)', (now) => ['0', String(now - 1000), '20']],
    [
      'a sum far above the limit per live entry',
      (now) => ['1000000', String(now - 1e6), '1', String(now - 5e5), '1'],
    ],
    ['a sum left over once every entry has left', (now) => ['5', String(now - 120e6), '3']],
    ['a sum with no entry at all', () => ['5']],
    ['a sum that is no number, with no entry', () => ['x']],
  ];
  for (const [name, log] of cases) {
    it(name, async () => {
      const { store, key, nowUs } = setup();
      const k = key(`r:${sliding.digest}`);
      const entries = log(nowUs);
      await redis().rpush(k, ...entries);
      await redis().pexpire(k, 60_000);
      // Both script paths (equal costs, mixed costs), with a lease: nothing spent.
      const lease = { limit: 2, ttl: 5000 };
      await expect(
        store.acquire({ id: 's', rules: [gcra, sliding], costs: [1], count: 1, lease }),
      ).rejects.toThrow(corrupt(k));
      await expect(
        store.acquire({ id: 's', rules: [gcra, sliding], costs: [1, 2], count: 2 }),
      ).rejects.toThrow(corrupt(k));
      expect(await redis().lrange(k, 0, -1)).toEqual(entries);
      expect(await redis().exists(key(`r:${gcra.digest}`), key('leases'))).toBe(0);
    });
  }

  it('honest logs: many entries (chunked reads), some expired, are read and extended as before', async () => {
    const { clock, store, key } = setup();
    const wide = normalizeRule({ limit: 100, interval: '1m', algorithm: 'sliding-window' }, 'rules[0]');
    const k = key(`r:${wide.digest}`);
    // One unit a second for 90 s: 60 live entries (more than the first read holds), the
    // older ones dropped as they leave.
    for (let i = 0; i < 90; i++) {
      const r = await store.acquire({ id: 's', rules: [wide], costs: [1], count: 1 });
      expect(r.granted, `call ${i}`).toBe(1);
      clock.advance(1000);
    }
    const log = await redis().lrange(k, 0, -1);
    expect(Number(log[0])).toBeGreaterThanOrEqual(60);
    // At 90 s, 59 live (31 s to 89 s): 41 at once fit, one more waits for the oldest to leave.
    const r = await store.acquire({ id: 's', rules: [wide], costs: [41, 1], count: 2 });
    expect(r.granted).toBe(1);
    expect(r.retryAfter).toBe(1000);
  });

  it('a rule set changed back within an interval: a live sum above the limit is valve’s own, not refused', async () => {
    const { clock, store, key } = setup();
    const A = [normalizeRule({ limit: 5, interval: '10s', algorithm: 'sliding-window' }, 'rules[0]')];
    const B = [normalizeRule({ limit: 6, interval: '10s', algorithm: 'sliding-window' }, 'rules[0]')];
    const acquire = (rules: typeof A, previous?: typeof A) =>
      store.acquire({
        id: 's',
        rules,
        costs: [1],
        count: 1,
        record: recordOf(rules),
        ...(previous ? { previous, convert: true } : {}),
      });
    for (let i = 0; i < 5; i++) expect((await acquire(A)).granted).toBe(1);
    clock.advance(100);
    // B gets A's 5 units (A, still in its transition, refuses the job).
    expect((await acquire(B, A)).granted).toBe(0);
    clock.advance(100);
    // Back to A: its own 5 units and B's 5: a live sum of 10, twice A's limit.
    const back = await acquire(A, B);
    expect(back.granted).toBe(0);
    expect(Number((await redis().lrange(key(`r:${A[0]!.digest}`), 0, 0))[0])).toBe(10);
    clock.advance(100);
    const again = await acquire(A);
    expect(again.granted).toBe(0);
    expect(again.retryAfter).toBeGreaterThan(9000);
  });
});
