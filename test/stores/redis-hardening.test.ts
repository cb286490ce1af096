/**
 * redisStore against hostile state and a hostile server: keys holding what valve never writes
 * (every key type), rules at the validation bounds, an out-of-memory server. Real servers.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { createValve } from '../../src/index.js';
import { normalizeRule, type Rule } from '../../src/rules/rule.js';
import { MAX_BATCH } from '../../src/stores/checks.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { CLIENT_FAMILIES, type Connected, connectClient } from '../helpers/redis-clients.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

type IORedis = import('ioredis').Redis;

const gcra = normalizeRule({ limit: 10, interval: '1s', burst: 2 }, 'rules[0]');
const window = normalizeRule({ limit: 10, interval: '1h', algorithm: 'fixed-window' }, 'rules[1]');

describe('keys holding what valve never writes: an error naming the key, never a silent answer', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });
  const redis = () => c.client as IORedis;

  async function setup() {
    const prefix = uniquePrefix('corrupt');
    const store = redisStore({ client: c.client, prefix });
    const id = 'bad';
    const key = (suffix: string) => `${prefix}:{${id}}:${suffix}`;
    return { store, id, key };
  }
  const corrupt = (key: string) =>
    new RegExp(`VALVE_CORRUPT_STATE ${key.replace(/[{}[\]().*+?^$|\\]/g, '\\$&')} holds`);

  for (const value of ['inf', '1e999', 'nan', '-5', 'abc', '', '12.5', '99999999999999999999']) {
    it(`a GCRA rule key holding ${JSON.stringify(value)}`, async () => {
      const { store, id, key } = await setup();
      const k = key(`r:${gcra.digest}`);
      await redis().set(k, value, 'PX', 60_000);
      // Both script paths: equal costs, and mixed costs.
      await expect(store.acquire({ id, rules: [gcra], costs: [1], count: 1 })).rejects.toThrow(corrupt(k));
      await expect(store.acquire({ id, rules: [gcra], costs: [1, 2], count: 2 })).rejects.toThrow(corrupt(k));
      expect(await redis().get(k)).toBe(value);
    });
  }

  it('a GCRA state far beyond its burst tolerance (more than the longest interval, 365 days)', async () => {
    const { store, id, key } = await setup();
    // 10 per hour, burst 2: a tolerance of 720 s, so that the honest state below still refuses
    // however slowly a loaded machine gets to the call (a job waits until 340 s after nowUs).
    const hourly = normalizeRule({ limit: 10, interval: '1h', burst: 2 }, 'rules[0]');
    const k = key(`r:${hourly.digest}`);
    const nowUs = Date.now() * 1000;
    await redis().set(k, String(nowUs + 720_000_000 + 366 * 86_400_000_000), 'PX', 60_000);
    await expect(store.acquire({ id, rules: [hourly], costs: [1], count: 1 })).rejects.toThrow(corrupt(k));
    // Up to an interval beyond it is valve's (a rule change converts a cut of a rule of up to
    // 365 days so): refused on rate, not as corrupt, even 30 days ahead.
    await redis().set(k, String(nowUs + 720_000_000 + 30 * 86_400_000_000), 'PX', 60_000);
    expect((await store.acquire({ id, rules: [hourly], costs: [1], count: 1 })).blocked).toBe('rate');
    expect((await store.acquire({ id, rules: [hourly], costs: [1, 2], count: 2 })).blocked).toBe('rate');
    // Within the tolerance (an honest state) it answers with a wait.
    await redis().set(k, String(nowUs + 700_000_000), 'PX', 60_000);
    const r = await store.acquire({ id, rules: [hourly], costs: [1], count: 1 });
    expect(r.blocked).toBe('rate');
  });

  for (const count of ['-5', 'inf', '11', 'x', '1e3']) {
    it(`a fixed-window key holding a count of ${JSON.stringify(count)} (limit 10)`, async () => {
      const { store, id, key } = await setup();
      const k = key(`r:${window.digest}`);
      const index = Math.floor((Date.now() * 1000) / window.intervalUs);
      await redis().set(k, `${index}:${count}`, 'PX', 60_000);
      await expect(store.acquire({ id, rules: [window], costs: [1], count: 1 })).rejects.toThrow(corrupt(k));
      await expect(store.acquire({ id, rules: [window], costs: [1, 2], count: 2 })).rejects.toThrow(
        corrupt(k),
      );
    });
  }

  it('a rule key of another type', async () => {
    const { store, id, key } = await setup();
    const k = key(`r:${gcra.digest}`);
    await redis().zadd(k, 1, 'x');
    await redis().pexpire(k, 60_000);
    await expect(store.acquire({ id, rules: [gcra], costs: [1], count: 1 })).rejects.toThrow(corrupt(k));
  });

  for (const value of ['1e999', 'inf', 'abc', '-1', String(Date.now() + 400 * 86_400_000)]) {
    it(`a pause key holding ${JSON.stringify(value)}`, async () => {
      const { store, id, key } = await setup();
      const k = key('pause');
      await redis().set(k, value, 'PX', 60_000);
      await expect(store.acquire({ id, rules: [gcra], costs: [1], count: 1 })).rejects.toThrow(corrupt(k));
      await expect(store.pause(id, 1000)).rejects.toThrow(corrupt(k));
      // resume deletes whatever is there: the way out.
      await store.resume(id);
      expect((await store.acquire({ id, rules: [gcra], costs: [1], count: 1 })).granted).toBe(1);
    });
  }

  // The last three: a head turn now, but 1e11 tickets of 2 s each (a wait and a TTL of 6,000
  // years); 11 tickets of 1e13 µs, the last 10 gaps (1e14 µs) after the head's turn, more than
  // the 3 × 366 days (9.48672e13 µs) valve lets a line span; tickets past 2^53.
  const headUs = Date.now() * 1000 + 500_000;
  const farLine = `1:99999999999:${headUs}:2000000`;
  for (const value of [
    'abc',
    '5:3:1700000000000000:500',
    '1:2:1700000000000000:0',
    '1:2:-5:500',
    '1:2:3',
    farLine,
    `1:12:${headUs}:10000000000000`,
    `9007199254740993:9007199254740995:${headUs}:500`,
  ]) {
    it(`a line key holding ${JSON.stringify(value)}: refused before anything is spent`, async () => {
      const { store, id, key } = await setup();
      const k = key(`line:${gcra.digest}`);
      await redis().set(k, value, 'PX', 60_000);
      // A caller holding a ticket reads the line first; one without reads it when the rules refuse it.
      await expect(store.acquire({ id, rules: [gcra], costs: [1], count: 1, turn: 7 })).rejects.toThrow(
        corrupt(k),
      );
      expect(await redis().exists(key(`r:${gcra.digest}`))).toBe(0);
      await expect(store.acquire({ id, rules: [gcra], costs: [1, 1, 1], count: 3, turn: 0 })).rejects.toThrow(
        corrupt(k),
      );
      expect(await redis().exists(key(`r:${gcra.digest}`))).toBe(0);
      expect(await redis().get(k)).toBe(value);
    });
  }

  // A sliding-window log: the sum, then entry times (µs) and costs. A time beyond any valve
  // writes, at the head (read first) or the newest (extended by the write), before any write.
  const sliding = normalizeRule({ limit: 5, interval: '1s', algorithm: 'sliding-window' }, 'rules[0]');
  for (const [name, log] of [
    ['only entry', () => ['1', '1e300', '1']],
    ['newest entry', () => ['2', String(Date.now() * 1000), '1', '1e300', '1']],
  ] as const) {
    it(`a sliding-window log whose ${name} lies centuries ahead: refused before anything is written`, async () => {
      const { store, id, key } = await setup();
      const k = key(`r:${sliding.digest}`);
      const entries = log();
      await redis().rpush(k, ...entries);
      await redis().pexpire(k, 60_000);
      const lease = { limit: 2, ttl: 5000 };
      await expect(
        store.acquire({ id, rules: [gcra, sliding], costs: [1], count: 1, lease }),
      ).rejects.toThrow(corrupt(k));
      expect(await redis().lrange(k, 0, -1)).toEqual(entries);
      expect(await redis().exists(key(`r:${gcra.digest}`), key('leases'))).toBe(0);
    });
  }

  it("a line as long as valve writes it (the last turn 3 × 365 days after the head's, a year ahead): read, not refused", async () => {
    const { store, id, key } = await setup();
    const k = key(`line:${gcra.digest}`);
    // Tickets 1..4 of a yearly rule, the head's turn a year ahead: the last turn 4 years ahead
    // (the scripts refused a line whose last turn was more than 3 × 366 days ahead, although
    // each waiting caller adds a step and a step can be a year: every call then failed).
    const year = 31_536_000_000_000;
    const value = `1:5:${Date.now() * 1000 + year}:${year}`;
    await redis().set(k, value, 'PX', 60_000);
    // Ticket 7 is none of the line's: the rules are read, and grant.
    expect((await store.acquire({ id, rules: [gcra], costs: [1], count: 1, turn: 7 })).granted).toBe(1);
    // The last ticket: refused until its turn, four years away.
    const behind = await store.acquire({ id, rules: [gcra], costs: [1], count: 1, turn: 4 });
    expect(behind.granted).toBe(0);
    expect(behind.turn).toBe(4);
    expect(behind.retryAfter).toBeGreaterThan((4 * year) / 1000 - 60_000);
    expect(await redis().get(k)).toBe(value);
  });

  it('a line key of another type', async () => {
    const { store, id, key } = await setup();
    const k = key(`line:${gcra.digest}`);
    await redis().rpush(k, '1');
    await expect(store.acquire({ id, rules: [gcra], costs: [1], count: 1, turn: 7 })).rejects.toThrow(
      corrupt(k),
    );
  });

  for (const value of ['abc', '1e999', '-1', '12.5']) {
    it(`a fence key holding ${JSON.stringify(value)}: refused before anything is spent`, async () => {
      const { store, id, key } = await setup();
      const k = key('fence');
      await redis().set(k, value, 'PX', 60_000);
      const lease = { limit: 2, ttl: 5000 };
      await expect(store.acquire({ id, rules: [gcra], costs: [1], count: 1, lease })).rejects.toThrow(
        corrupt(k),
      );
      // Nothing was spent: neither the rule nor a lease.
      expect(await redis().exists(key(`r:${gcra.digest}`), key('leases'))).toBe(0);
    });
  }

  it('a lease expiring at +inf or years ahead, and a leases key of another type', async () => {
    const { store, id, key } = await setup();
    const k = key('leases');
    const lease = { limit: 5, ttl: 5000 };
    await redis().zadd(k, 'inf', 'forever');
    await redis().pexpire(k, 60_000);
    await expect(store.acquire({ id, rules: [], costs: [1], count: 1, lease })).rejects.toThrow(corrupt(k));
    await redis().zadd(k, String(Date.now() + 3 * 365 * 86_400_000), 'forever');
    await expect(store.acquire({ id, rules: [], costs: [1], count: 1, lease })).rejects.toThrow(corrupt(k));
    await expect(store.renew(id, ['forever'], 1000)).rejects.toThrow(corrupt(k));
    await redis().del(k);
    await redis().set(k, 'x', 'PX', 60_000);
    await expect(store.acquire({ id, rules: [], costs: [1], count: 1, lease })).rejects.toThrow(corrupt(k));
    await expect(store.renew(id, ['t'], 1000)).rejects.toThrow(corrupt(k));
    await expect(store.release(id, ['t'])).rejects.toThrow(corrupt(k));
  });
});

describe('rules at the validation bounds', () => {
  it('refuses what the scripts could not compute exactly, naming the option', () => {
    // The case that over-admitted: 1e6 units of burst on a yearly rule pushed the state past 2^63 µs.
    expect(() => normalizeRule({ limit: 1, interval: '365d', burst: 1e6 }, 'rules[0]')).toThrow(RangeError);
    expect(() => normalizeRule({ limit: 1, interval: '365d', burst: 2 }, 'rules[0]')).toThrow(
      /`rules\[0\].burst` × interval \/ limit.*at most 365 days/,
    );
    expect(() => normalizeRule({ limit: 1e15 + 1, interval: '1s' }, 'rules[0]')).toThrow(
      /`rules\[0\].limit` to be at most 1000000000000000/,
    );
    expect(() => normalizeRule({ limit: 1, interval: '366d' }, 'rules[0]')).toThrow(/`rules\[0\].interval`/);
    // The extremes themselves are accepted.
    expect(normalizeRule({ limit: 1, interval: '365d', burst: 1 }, 'r').emissionUs).toBe(31_536_000_000_000);
    expect(normalizeRule({ limit: 1e15, interval: '1ms', burst: 31_536_000_000_000 }, 'r').maxCost).toBe(
      31_536_000_000_000,
    );
    expect(normalizeRule({ limit: 1e15, interval: '365d', algorithm: 'fixed-window' }, 'r').maxCost).toBe(
      1e15,
    );
  });

  it('a yearly rule spent by one job of its largest cost refuses the next on Redis (no overflow)', async () => {
    const c = await connectClient('ioredis', sharedRedis());
    try {
      const store = redisStore({ client: c.client, prefix: uniquePrefix('extreme') });
      const year = normalizeRule({ limit: 10, interval: '365d', burst: 10 }, 'r');
      expect((await store.acquire({ id: 'y', rules: [year], costs: [10], count: 1 })).granted).toBe(1);
      const next = await store.acquire({ id: 'y', rules: [year], costs: [1], count: 1 });
      expect(next.granted).toBe(0);
      expect(next.retryAfter).toBeGreaterThan(36 * 86_400_000 - 1000);
      const huge = normalizeRule({ limit: 1e15, interval: '1ms', burst: 31_536_000_000_000 }, 'r');
      const a = await store.acquire({ id: 'z', rules: [huge], costs: [31_536_000_000_000, 1], count: 2 });
      expect(a.granted).toBe(1);
      expect(a.retryAfter).toBeGreaterThan(0);
      expect(Number.isSafeInteger(Math.round(a.retryAfter * 1000))).toBe(true);
    } finally {
      await c.close();
    }
  });
});

describe('the line of turns on yearly rules (a step of up to a year per waiting caller)', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });
  const DAY_MS = 86_400_000;

  /**
   * `callers` callers on one id, each sending the ticket of its last answer: the budget spent,
   * then three rounds of every caller asking (1 ms apart), the clock moved `skipMs` between
   * rounds. Every answer, or the error's message.
   */
  async function drive(store: Store, clock: FakeClock, callers: number, rule: Rule, skipMs: number) {
    const rules = [normalizeRule(rule, 'rules[0]')];
    const out: unknown[] = [];
    const tickets = new Array<number>(callers).fill(0);
    out.push(await store.acquire({ id: 'y', rules, costs: [1], count: 1, turn: 0 }));
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < callers; i++) {
        try {
          const r = await store.acquire({ id: 'y', rules, costs: [1], count: 1, turn: tickets[i] });
          tickets[i] = r.turn ?? 0;
          out.push(r);
        } catch (e) {
          out.push((e as Error).message);
        }
        clock.advance(1);
      }
      clock.advance(skipMs);
    }
    return out;
  }

  const rules: Rule[] = [
    { limit: 1, interval: '365d' },
    { limit: 2, interval: '365d', burst: 2 },
    { limit: 10, interval: '365d', burst: 10 },
    { limit: 3, interval: '30d', burst: 3 },
  ];
  for (const rule of rules) {
    it(`${JSON.stringify(rule)}, 2 to 24 callers: Redis answers exactly as memory does, never VALVE_CORRUPT_STATE`, async () => {
      for (const callers of [2, 4, 8, 24]) {
        for (const skipMs of [1, 183 * DAY_MS, 366 * DAY_MS]) {
          const start = 1_700_000_000_000.123;
          const mc = new FakeClock(start);
          const rc = new FakeClock(start);
          const memory = await drive(memoryStore({ clock: mc }), mc, callers, rule, skipMs);
          const redis = await drive(
            redisStore({ client: c.client, prefix: uniquePrefix('yline'), unsafeTestClock: rc }),
            rc,
            callers,
            rule,
            skipMs,
          );
          expect(redis, `${callers} callers, ${skipMs} ms between rounds`).toEqual(memory);
        }
      }
    });
  }

  it('the line stops at 3 × 366 days: callers beyond hold no ticket and wait for the rule alone', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const store = redisStore({ client: c.client, prefix: uniquePrefix('yline'), unsafeTestClock: clock });
    // 182.5 days apart (plus the 100 µs pad): the head's turn and 6 more within 3 × 366 days.
    const rules = [normalizeRule({ limit: 2, interval: '365d', burst: 2 }, 'rules[0]')];
    await store.acquire({ id: 'y', rules, costs: [1, 1], count: 2, turn: 0 });
    const answers: AcquireResult[] = [];
    for (let i = 0; i < 10; i++) {
      answers.push(await store.acquire({ id: 'y', rules, costs: [1], count: 1, turn: 0 }));
      clock.advance(1);
    }
    const held = answers.filter((r) => (r.turn ?? 0) > 0);
    expect(held).toHaveLength(7);
    expect(new Set(held.map((r) => r.turn)).size).toBe(7);
    // The last ticket's turn 6 steps after the first's; beyond it, the rule's wait (about half a year).
    expect(held[6]!.retryAfter - held[0]!.retryAfter).toBeCloseTo(6 * 182.5 * DAY_MS - 6 + 0.6, 3);
    for (const r of answers.slice(7)) {
      expect(r.turn).toBe(0);
      expect(r.retryAfter).toBeLessThanOrEqual(held[0]!.retryAfter);
    }
  });

  it('a slow rule with a large burst: the ticket behind the head waits one job, not three quarters of the burst (Redis as memory)', async () => {
    // Shopify's 2 a second with a burst of 40: the step is one job (500 ms), not 30 (15 s).
    const rules = [normalizeRule({ limit: 2, interval: '1s', burst: 40 }, 'rules[0]')];
    for (const [name, store] of [
      ['memory', memoryStore({ clock: new FakeClock(1_700_000_000_000) })],
      [
        'redis',
        redisStore({
          client: c.client,
          prefix: uniquePrefix('slowline'),
          unsafeTestClock: new FakeClock(1_700_000_000_000),
        }),
      ],
    ] as const) {
      const head = await store.acquire({ id: 's', rules, costs: Array(41).fill(1), count: 41, turn: 0 });
      expect(head.granted, name).toBe(40);
      expect(head.turn, name).toBeGreaterThan(0);
      const behind = await store.acquire({ id: 's', rules, costs: [1], count: 1, turn: 0 });
      expect(behind.turn, name).toBe(head.turn! + 1);
      expect(head.retryAfter, name).toBeCloseTo(500, 3);
      // The head's turn, then one step (500 ms) and the 0.1 ms pad.
      expect(behind.retryAfter, name).toBeCloseTo(1000.1, 3);
    }
  });

  it('eight valves waiting for their turn on Redis: no store errors', async () => {
    const prefix = uniquePrefix('yvalve');
    const rules = { limit: 2, interval: '365d', burst: 2 };
    const valves = Array.from({ length: 9 }, () =>
      createValve({ id: 'yearly', rules, store: redisStore({ client: c.client, prefix }) }),
    );
    const errors: string[] = [];
    for (const v of valves) v.on('store-error', (e) => errors.push(String((e as Error).message)));
    try {
      await valves[0]!.run(() => 0);
      await valves[0]!.run(() => 0); // the year's budget is spent
      const waiting = valves.slice(1).map((v) => v.run(() => 1).catch((e: unknown) => e));
      // Each asks, takes a ticket (or, past the line's span, none) and sleeps.
      await new Promise((r) => setTimeout(r, 1000));
      for (const v of valves) await v.close();
      await Promise.all(waiting);
    } finally {
      for (const v of valves) await v.close();
    }
    expect(errors).toEqual([]);
  }, 20_000);
});

describe('an out-of-memory server (maxmemory, noeviction): writing scripts fail before their first write', () => {
  for (const kind of ['redis', 'valkey'] as const) {
    describe(kind, () => {
      let server: RedisServer;
      let c: Connected;
      let prefix: string;
      let store: Store;
      const lease = { limit: 5, ttl: 30_000 };
      const leaseKey = () => `${prefix}:{oom}:leases`;
      /** A lease taken before the server filled up (30 s TTL). */
      let heldToken: string;
      beforeAll(async () => {
        server = await startRedis({ kind, args: ['--maxmemory', '4mb', '--maxmemory-policy', 'noeviction'] });
        c = await connectClient('ioredis', server);
        prefix = uniquePrefix('oom');
        store = redisStore({ client: c.client, prefix });
        // Load the scripts and take a lease while there is memory: later calls go by EVALSHA.
        const first = await store.acquire({ id: 'oom', rules: [gcra], costs: [1], count: 1, lease });
        expect(first.granted).toBe(1);
        heldToken = first.leases![0]!.token;
        await store.pause('other', 1);
        await store.renew('oom', [heldToken], 30_000);
        await store.resume('other');
        // Fill the server until it refuses writes, then set maxmemory well below what it uses,
        // so that freed buffers cannot bring it back under the limit during the tests.
        const junk = 'x'.repeat(64 * 1024);
        let refused = false;
        for (let i = 0; i < 1000 && !refused; i++) {
          try {
            await (c.client as IORedis).set(`${prefix}:junk:${i}`, junk);
          } catch (err) {
            expect(String(err)).toMatch(/OOM/);
            refused = true;
          }
        }
        if (!refused) throw new Error('the server never ran out of memory');
        const info = String(await server.command(['INFO', 'memory']));
        const used = Number(/^used_memory:(\d+)/m.exec(info)?.[1]);
        await server.command(['CONFIG', 'SET', 'maxmemory', String(used - 512 * 1024)]);
      }, 30_000);
      afterAll(async () => {
        await c?.close();
        await server?.stop();
      });

      it('acquire (with and without leases) and pause are refused whole with OOM (EVALSHA)', async () => {
        const before = await (c.client as IORedis).zcard(leaseKey());
        await expect(
          store.acquire({ id: 'oom', rules: [gcra], costs: [1], count: 1, lease }),
        ).rejects.toThrow(/OOM/);
        await expect(store.acquire({ id: 'oom2', rules: [], costs: [1], count: 1, lease })).rejects.toThrow(
          /OOM/,
        );
        await expect(store.acquire({ id: 'oom3', rules: [gcra], costs: [1], count: 1 })).rejects.toThrow(
          /OOM/,
        );
        await expect(store.pause('oom', 1000)).rejects.toThrow(/OOM/);
        // Nothing was written: no lease, no key for the new ids.
        expect(await (c.client as IORedis).zcard(leaseKey())).toBe(before);
        expect(await (c.client as IORedis).exists(`${prefix}:{oom2}:leases`, `${prefix}:{oom2}:fence`)).toBe(
          0,
        );
        // release and resume only delete: they still run, and free what they can.
        await store.release('oom', ['unknown']);
        await store.resume('oom');
      });

      it('renew still runs (allow-oom): it extends the leases still held and creates nothing', async () => {
        const redis = c.client as IORedis;
        const before = Number(await redis.zscore(leaseKey(), heldToken));
        expect(await store.renew('oom', [heldToken, 'unknown'], 60_000)).toEqual([true, false]);
        expect(Number(await redis.zscore(leaseKey(), heldToken))).toBeGreaterThan(before);
        expect(await redis.zcard(leaseKey())).toBe(1);
        expect(await store.renew('oom5', ['t'], 1000)).toEqual([false]);
        expect(await redis.exists(`${prefix}:{oom5}:leases`, `${prefix}:{oom5}:fence`)).toBe(0);
        // Still full: writes are refused.
        await expect(redis.set(`${prefix}:after`, 'x')).rejects.toThrow(/OOM/);
      });

      it('the same after the script cache was flushed (EVAL)', async () => {
        await server.command(['SCRIPT', 'FLUSH']);
        await expect(
          store.acquire({ id: 'oom', rules: [gcra], costs: [1], count: 1, lease }),
        ).rejects.toThrow(/OOM/);
        await expect(store.acquire({ id: 'oom3', rules: [gcra], costs: [1], count: 1 })).rejects.toThrow(
          /OOM/,
        );
        expect(await store.renew('oom', [heldToken], 60_000)).toEqual([true]);
      });

      it('a global-concurrency valve fails with STORE_UNAVAILABLE like a plain valve, and starts nothing', async () => {
        let started = 0;
        for (const concurrency of [undefined, { limit: 3, scope: 'global' as const }]) {
          const valve = createValve({
            id: concurrency ? 'oom-global' : 'oom-plain',
            rules: { limit: 100, interval: '1s' },
            store,
            onStoreError: 'throw',
            ...(concurrency ? { concurrency } : {}),
          });
          valve.on('store-error', () => {});
          const error = await valve.run(() => started++).catch((err: unknown) => err);
          expect(isValveError(error, 'STORE_UNAVAILABLE'), String(error)).toBe(true);
          expect(String((error as Error).cause)).toMatch(/OOM/);
          await valve.close();
        }
        expect(started).toBe(0);
        expect(await (c.client as IORedis).exists(`${prefix}:{oom-global}:leases`)).toBe(0);
      });
    });
  }
});

describe('a server that fills up (noeviction) while global-concurrency jobs run', () => {
  let server: RedisServer;
  let c: Connected;
  beforeAll(async () => {
    server = await startRedis({ args: ['--maxmemory-policy', 'noeviction'] });
    c = await connectClient('ioredis', server);
  });
  afterAll(async () => {
    await c?.close();
    await server?.stop();
  });

  it('their renewals still run: the jobs keep their leases, and their releases free the slots', async () => {
    const redis = c.client as IORedis;
    const prefix = uniquePrefix('full');
    const leases = `${prefix}:{full}:leases`;
    const valve = createValve({
      id: 'full',
      store: redisStore({ client: c.client, prefix }),
      concurrency: { limit: 2, scope: 'global', leaseTtl: 3000 },
    });
    const lost: string[] = [];
    const errors: unknown[] = [];
    valve.on('lease-lost', (e) => lost.push(e.reason));
    valve.on('store-error', (err) => errors.push(err));
    let token = '';
    let aborted: () => boolean = () => true;
    let finish: () => void = () => {};
    const job = valve.run(({ signal, lease }) => {
      token = lease!.token;
      aborted = () => signal.aborted;
      return new Promise<string>((resolve) => {
        finish = () => resolve('done');
      });
    });
    await vi.waitFor(() => expect(token).not.toBe(''));
    try {
      await server.command(['CONFIG', 'SET', 'maxmemory', '1']);
      await expect(redis.set(`${prefix}:probe`, 'x')).rejects.toThrow(/OOM/);
      // Renewals (every leaseTtl / 3) keep moving the lease's expiry on the full server; a
      // refused one would lose the lease at once ('renew-failed').
      const seen = new Set<string>([String(await redis.zscore(leases, token))]);
      const deadline = Date.now() + 15_000;
      while (seen.size < 3 && lost.length === 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        seen.add(String(await redis.zscore(leases, token)));
      }
      expect(lost).toEqual([]);
      expect(errors).toEqual([]);
      expect(seen.size).toBe(3);
      expect(aborted()).toBe(false);
      finish();
      expect(await job).toBe('done');
      // release runs under OOM too: the slot is free at once.
      await vi.waitFor(async () => expect(await redis.zcard(leases)).toBe(0));
    } finally {
      await server.command(['CONFIG', 'SET', 'maxmemory', '0']);
      finish();
      await valve.close();
    }
  }, 30_000);
});

describe(`a batch at the cap (${MAX_BATCH} jobs of mixed costs) on every client family`, () => {
  // A server of its own: each 201,000-token call holds the server for 0.15-0.35 s, which would
  // stall the other test files' calls on the shared server.
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  for (const family of CLIENT_FAMILIES) {
    it(family, async () => {
      const c = await connectClient(family, server);
      try {
        // 201,000 tokens in one renew and one release: 0.15-0.35 s each here on a quiet machine,
        // several times that beside the fault tests. This checks their arguments, not their
        // speed, so the store's deadline is far above the default 2 s.
        const store = redisStore({ client: c.client, prefix: uniquePrefix('cap'), timeout: 20_000 });
        const rule = normalizeRule({ limit: 1_000_000, interval: '1h', burst: 10_000 }, 'r');
        const costs = Array.from({ length: MAX_BATCH }, (_, i) => 1 + (i % 3));
        const r = await store.acquire({
          id: 'cap',
          rules: [rule],
          costs,
          count: MAX_BATCH,
          lease: { limit: MAX_BATCH, ttl: 30_000 },
        });
        expect(r.granted).toBe(MAX_BATCH);
        expect(r.leases).toHaveLength(MAX_BATCH);
        const tokens = r.leases!.map((l) => l.token);
        // Renewal and release carry one argument per running job: far more than a call could
        // spread (200 000 arguments overflow V8's stack in a spread call).
        const many = tokens.concat(Array.from({ length: 200_000 }, (_, i) => `gone.${i}`));
        const held = await store.renew('cap', many, 30_000);
        expect(held.filter(Boolean)).toHaveLength(MAX_BATCH);
        await store.release('cap', many);
        const after = await store.acquire({
          id: 'cap',
          rules: [],
          costs: [1],
          count: 1,
          lease: { limit: 1, ttl: 1000 },
        });
        expect(after.granted).toBe(1);
      } finally {
        await c.close();
      }
    }, 30_000);
  }
});

describe('wake-ups count only once the server confirmed them', () => {
  it('ioredis: a SUBSCRIBE sent between TCP connect and ready is retried until a probe comes back', async () => {
    const { Redis } = await import('ioredis');
    const { host, port } = sharedRedis();
    const publisher = await connectClient('ioredis', { host, port });
    const client = new Redis({ host, port });
    const subscriber = new Redis({ host, port });
    client.on('error', () => {});
    subscriber.on('error', () => {});
    try {
      const prefix = uniquePrefix('gap');
      const events: string[] = [];
      const statuses: boolean[] = [];
      let store: Store | undefined;
      // The first subscription is made in the handshake's gap (status 'connect'), where
      // ioredis 5.8.2+ would write it before its ready check (ioredis #2037): the store holds
      // it until 'ready', and counts it once a probe comes back.
      subscriber.once('connect', () => {
        store = redisStore({ client, subscriber, prefix });
        store.subscribe!(
          'gap',
          (e) => events.push(e.type),
          (s) => statuses.push(s.listening),
        );
      });
      await waitFor(() => store !== undefined && store.listening!('gap') === true, 10_000);
      expect(store!.notifies).toBe(true);
      expect(statuses).toContain(true);
      const other = redisStore({ client: publisher.client, prefix });
      await other.pause('gap', 1000);
      await waitFor(() => events.includes('pause'), 5000);
    } finally {
      client.disconnect();
      subscriber.disconnect();
      await publisher.close();
    }
  }, 20_000);

  it('an ACL that refuses SUBSCRIBE is reported once, and the id is not listening', async () => {
    const user = {
      name: 'nosub',
      password: 'pw',
      rules: ['~*', '&*', '+@all', '-subscribe', '-ssubscribe'],
    };
    const server = await startRedis({ aclUser: user });
    const c = await connectClient('ioredis', {
      host: server.host,
      port: server.port,
      username: 'nosub',
      password: 'pw',
    });
    try {
      const store = redisStore({ client: c.client, subscriber: c.subscriber, prefix: uniquePrefix('acl') });
      const statuses: { listening: boolean; error?: unknown }[] = [];
      store.subscribe!(
        'acl',
        () => {},
        (s) => statuses.push(s),
      );
      await waitFor(() => statuses.length > 0, 5000);
      await new Promise((r) => setTimeout(r, 2500)); // a retry or two happen meanwhile
      expect(statuses).toHaveLength(1);
      expect(statuses[0]!.listening).toBe(false);
      expect(String(statuses[0]!.error)).toMatch(/NOPERM/);
      expect(store.listening!('acl')).toBe(false);
      expect(store.notifies).toBe(false);
    } finally {
      await c.close();
      await server.stop();
    }
  }, 20_000);
});

async function waitFor(check: () => boolean, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out waiting for a condition');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("the store's clock is the server's TIME", () => {
  it('two clients whose clocks are skewed by +10 and -10 minutes share one budget on the server clock', async () => {
    const a = await connectClient('ioredis', sharedRedis());
    const b = await connectClient('redis', sharedRedis());
    // Only Date is faked: sockets and timers stay real.
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      const real = () => performance.timeOrigin + performance.now();
      const prefix = uniquePrefix('skew');
      const stores = [redisStore({ client: a.client, prefix }), redisStore({ client: b.client, prefix })];
      const rule = normalizeRule({ limit: 10, interval: '1s' }, 'r'); // 100 ms apart
      const grants: number[] = [];
      for (let i = 0; i < 40 && grants.length < 8; i++) {
        vi.setSystemTime(real() + (i % 2 === 0 ? 600_000 : -600_000));
        expect(Math.abs(Date.now() - real())).toBeGreaterThan(590_000);
        const r = await stores[i % 2]!.acquire({ id: 'skew', rules: [rule], costs: [1], count: 1 });
        // Answers are on the server's clock (this machine's real time), not the client's.
        expect(Math.abs(r.now - real())).toBeLessThan(5000);
        // A client 10 minutes behind is not told to wait 20 minutes, nor one ahead let through.
        expect(r.retryAfter).toBeLessThanOrEqual(100);
        if (r.granted === 1) grants.push(r.now);
        else await new Promise((resolve) => setTimeout(resolve, r.retryAfter));
      }
      expect(grants.length).toBe(8);
      // Burst 1: consecutive grants at least one emission interval apart on the server clock.
      for (let i = 1; i < grants.length; i++) expect(grants[i]! - grants[i - 1]!).toBeGreaterThanOrEqual(100);
    } finally {
      vi.useRealTimers();
      await a.close();
      await b.close();
    }
  });
});
