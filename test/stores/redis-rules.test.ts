/**
 * Rule sets and rule changes on real Redis: the record key (its value, its TTL, state valve
 * never writes refused naming the key), a valve's setRules() carrying spent budget over, and
 * rule changes answered exactly as the memory store answers (a conversion meeting a pause, a
 * cut of a rule longer than a day, a job no old rule can ever admit).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createValve, createValveGroup } from '../../src/index.js';
import { normalizeRule, type Rule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { runChange, type Step, stricterViolations } from '../helpers/rule-change.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

type IORedis = import('ioredis').Redis;

const hourly = normalizeRule({ limit: 3, interval: '1h', algorithm: 'fixed-window' }, 'rules');
const fiveHourly = normalizeRule({ limit: 5, interval: '1h', algorithm: 'fixed-window' }, 'rules');

describe('the rule-set record on Redis', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });
  const redis = () => c.client as IORedis;

  it('is <prefix>:{<id>}:rules, "<until µs>:<digests>", expiring with the longest interval', async () => {
    const prefix = uniquePrefix('record');
    const store = redisStore({ client: c.client, prefix });
    const rules = [hourly, normalizeRule({ limit: 10, interval: '1s' }, 'rules')];
    const record = rules
      .map((r) => r.digest)
      .sort()
      .join(',');
    await store.acquire({ id: 'a', rules, costs: [1], count: 1, record });
    const value = await redis().get(`${prefix}:{a}:rules`);
    expect(value).toMatch(new RegExp(`^\\d+:${record.replace(/\./g, '\\.')}$`));
    const ttl = await redis().pttl(`${prefix}:{a}:rules`);
    expect(ttl).toBeGreaterThan(3_600_000 - 5_000);
    expect(ttl).toBeLessThanOrEqual(3_600_000);
  });

  it('a request may keep the record longer (recordTtl); a valve group keeps it idleTimeout, at most a minute', async () => {
    const prefix = uniquePrefix('record');
    const store = redisStore({ client: c.client, prefix });
    const second = normalizeRule({ limit: 10, interval: '1s' }, 'rules');
    const pttl = (id: string) => redis().pttl(`${prefix}:{${id}}:rules`);
    await store.acquire({
      id: 'l',
      rules: [second],
      costs: [1],
      count: 1,
      record: second.digest,
      recordTtl: 60_000,
    });
    expect(await pttl('l')).toBeGreaterThan(55_000);
    expect(await pttl('l')).toBeLessThanOrEqual(60_000);
    // The longest interval when it is longer.
    await store.acquire({
      id: 'h',
      rules: [hourly],
      costs: [1],
      count: 1,
      record: hourly.digest,
      recordTtl: 60_000,
    });
    expect(await pttl('h')).toBeGreaterThan(3_600_000 - 5_000);
    // A group: idleTimeout (default 5 minutes) up to a minute; a shorter idleTimeout, the interval.
    const long = createValveGroup({ rules: { limit: 10, interval: '1s' }, store });
    const short = createValveGroup({ rules: { limit: 10, interval: '1s' }, store, idleTimeout: 300 });
    const middle = createValveGroup({ rules: { limit: 10, interval: '1s' }, store, idleTimeout: '20s' });
    await Promise.all([long.run('g1', () => {}), short.run('g2', () => {}), middle.run('g3', () => {})]);
    expect(await pttl('g1')).toBeGreaterThan(55_000);
    expect(await pttl('g1')).toBeLessThanOrEqual(60_000);
    expect(await pttl('g2')).toBeGreaterThan(0);
    expect(await pttl('g2')).toBeLessThanOrEqual(1_000);
    expect(await pttl('g3')).toBeGreaterThan(15_000);
    expect(await pttl('g3')).toBeLessThanOrEqual(20_000);
    await Promise.all([long.close(), short.close(), middle.close()]);
  });

  it('a record valve never writes is refused with an error naming the key, before anything is spent', async () => {
    const prefix = uniquePrefix('record');
    const store = redisStore({ client: c.client, prefix });
    const key = `${prefix}:{b}:rules`;
    for (const bad of ['nonsense', '12:x1.2', '99999999999999999999:g1.1.1']) {
      await redis().set(key, bad);
      await expect(
        store.acquire({ id: 'b', rules: [hourly], costs: [1], count: 1, record: hourly.digest }),
      ).rejects.toThrow(`VALVE_CORRUPT_STATE ${key} holds`);
    }
    await redis().del(key);
    await redis().lpush(key, 'x');
    await expect(
      store.acquire({ id: 'b', rules: [hourly], costs: [1], count: 1, record: hourly.digest }),
    ).rejects.toThrow(`VALVE_CORRUPT_STATE ${key} holds`);
    await redis().del(key);
    expect((await store.acquire({ id: 'b', rules: [hourly], costs: [3], count: 1 })).granted).toBe(1);
  });

  it("setRules() on a valve over Redis carries spent budget over, and a second process's valve reports the mismatch", async () => {
    const prefix = uniquePrefix('setrules');
    const store = redisStore({ client: c.client, prefix });
    const valve = createValve({
      id: 'c',
      rules: { limit: 3, interval: '1h', algorithm: 'fixed-window' },
      store,
    });
    await Promise.all([valve.run(() => {}), valve.run(() => {})]);
    await valve.setRules({ limit: 5, interval: '1h', algorithm: 'fixed-window' });
    // The old rule (1 left) still holds during the change: one more start, then none.
    const started: number[] = [];
    for (let i = 0; i < 4; i++) void valve.run(() => started.push(i)).catch(() => {});
    await new Promise((r) => setTimeout(r, 300));
    expect(started).toEqual([0]);
    // The new rule counts the 3 spent: 2 left under it in this window.
    const direct = await store.acquire({ id: 'c', rules: [fiveHourly], costs: [1, 1, 1], count: 3 });
    expect(direct.granted).toBe(2);
    const other = createValve({
      id: 'c',
      rules: { limit: 3, interval: '1h', algorithm: 'fixed-window' },
      store,
    });
    const seen: unknown[] = [];
    other.on('rule-mismatch', (e) => seen.push(e));
    await other.run(() => {}, { maxWait: 50 }).catch(() => {});
    expect(seen).toEqual([
      {
        id: 'c',
        rules: [{ limit: 3, interval: 3_600_000, algorithm: 'fixed-window' }],
        recorded: [{ limit: 5, interval: 3_600_000, algorithm: 'fixed-window' }],
      },
    ]);
    await valve.close();
    await other.close();
  });
});

describe('rule changes on Redis, answered as the memory store answers', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });
  const T0 = 1_700_000_000_000;
  /** The memory store and a Redis store, each on its own fake clock at `t0`. */
  const pair = (t0 = T0) => {
    const mc = new FakeClock(t0);
    const lc = new FakeClock(t0);
    return {
      clocks: [mc, lc] as const,
      stores: [
        memoryStore({ clock: mc }),
        redisStore({ client: c.client, prefix: uniquePrefix('change'), unsafeTestClock: lc }),
      ] as const,
    };
  };

  it('a conversion answered "paused" converts: cutting 10 per second to 4 after 6 starts admits nothing more in that window', async () => {
    const O = [normalizeRule({ limit: 10, interval: 1000, algorithm: 'fixed-window' }, 'old')];
    const N = [normalizeRule({ limit: 4, interval: 1000, algorithm: 'fixed-window' }, 'new')];
    const { clocks, stores } = pair();
    const answers: unknown[][] = [[], []];
    for (const [i, store] of stores.entries()) {
      const clock = clocks[i]!;
      const at = (r: AcquireResult) => ({ granted: r.granted, blocked: r.blocked, retryAfter: r.retryAfter });
      answers[i]!.push(at(await store.acquire({ id: 'p', rules: O, costs: [1, 1, 1, 1, 1, 1], count: 6 })));
      await store.pause('p', 50);
      const paused = await store.acquire({
        id: 'p',
        rules: N,
        costs: [1],
        count: 1,
        previous: O,
        convert: true,
      });
      answers[i]!.push(at(paused));
      clock.advance(100);
      answers[i]!.push(at(await store.acquire({ id: 'p', rules: N, costs: [1], count: 1, previous: O })));
      answers[i]!.push(at(await store.acquire({ id: 'p', rules: N, costs: [1], count: 1 })));
    }
    expect(answers[0]).toEqual([
      { granted: 6, blocked: null, retryAfter: 0 },
      { granted: 0, blocked: 'pause', retryAfter: 50 },
      { granted: 0, blocked: 'rate', retryAfter: 900 },
      { granted: 0, blocked: 'rate', retryAfter: 900 },
    ]);
    expect(answers[1]).toEqual(answers[0]);
  });

  it('a valve over Redis converts when its first call after setRules() meets a pause', async () => {
    const clock = new FakeClock(T0);
    const prefix = uniquePrefix('paused');
    const store = redisStore({ client: c.client, prefix, unsafeTestClock: clock });
    const other = redisStore({ client: c.client, prefix, unsafeTestClock: clock });
    const valve = createValve({
      id: 'p',
      store,
      clock,
      rules: { limit: 10, interval: 1000, algorithm: 'fixed-window' },
    });
    const starts: number[] = [];
    await Promise.all(Array.from({ length: 6 }, () => valve.run(() => starts.push(clock.now()))));
    await other.pause('p', 50);
    await valve.setRules({ limit: 4, interval: 1000, algorithm: 'fixed-window' });
    for (let i = 0; i < 10; i++) valve.run(() => starts.push(clock.now())).catch(() => {});
    for (let i = 0; i < 90; i++) {
      await clock.tickAsync(10);
      await new Promise((r) => setTimeout(r, 1));
    }
    expect(starts.filter((t) => t < T0 + 1000).length).toBe(6);
    await valve.close({ drain: false }).catch(() => {});
  }, 30_000);

  it('a valve over Redis changing its rules twice within one interval (100 per 10 s, 1 per second, 100 per minute) keeps every minute within 100 + burst − 1', async () => {
    // The 1/s rule the first change introduced counts grants from its conversion only: the
    // second conversion takes the first rule's state alone (the script skips the young one).
    const clock = new FakeClock(T0);
    const store = redisStore({ client: c.client, prefix: uniquePrefix('chain'), unsafeTestClock: clock });
    const valve = createValve({ id: 'c', store, clock, rules: { limit: 100, interval: 10_000, burst: 100 } });
    const starts: number[] = [];
    const jobs: Promise<unknown>[] = [];
    const run = () => jobs.push(valve.run(() => starts.push(clock.now() - T0)).catch(() => {}));
    const advance = async (ms: number) => {
      for (let t = 0; t < ms; t += 100) {
        await clock.tickAsync(100);
        await new Promise((r) => setTimeout(r, 1));
      }
    };
    for (let i = 0; i < 100; i++) run();
    await advance(500);
    await valve.setRules({ limit: 1, interval: 1_000 });
    run();
    await advance(1_000);
    await valve.setRules({ limit: 100, interval: 60_000, burst: 100 });
    for (let i = 0; i < 300; i++) run();
    await advance(130_000);
    await valve.close({ drain: false }).catch(() => {});
    await Promise.all(jobs);
    expect(starts.filter((t) => t < 1_000).length).toBe(100);
    for (const from of starts) {
      const inMinute = starts.filter((t) => t >= from && t < from + 60_000).length;
      expect(inMinute, `the minute from ${from} ms`).toBeLessThanOrEqual(199);
    }
  }, 60_000);

  it('a cut of a rule longer than a day counts the old spend until its window ends (10 to 4 per 7 days after 6)', async () => {
    const week = 604_800_000;
    const start = Math.ceil(T0 / week) * week;
    const oldRules: Rule[] = [{ limit: 10, interval: '7d', algorithm: 'fixed-window' }];
    const newRules: Rule[] = [{ limit: 4, interval: '7d' }];
    const day = 86_400_000_000;
    const before: Step[] = [{ dt: 0, costs: [1, 1, 1, 1, 1, 1] }];
    // An hour later the change, then one job every 6 hours for 10 days.
    const after: Step[] = [
      { dt: day / 24, costs: [1] },
      ...Array.from({ length: 40 }, () => ({ dt: day / 4, costs: [1] })),
    ];
    const { clocks, stores } = pair(start);
    const runs = [];
    for (const [i, store] of stores.entries()) {
      runs.push(await runChange(store, clocks[i]!, 'long', oldRules, newRules, before, after));
    }
    expect(runs[1]!.answers).toEqual(runs[0]!.answers);
    for (const run of runs) {
      expect(stricterViolations(run, oldRules, newRules)).toEqual([]);
      // Nothing more until the window of the 6 has passed (GCRA counts the whole old limit as
      // spent there: the next start comes (L + B) × T = 8.75 days after the change).
      const more = run.grants.filter((g) => g.after).map((g) => g.t - start);
      expect(more.length).toBeGreaterThan(0);
      expect(Math.min(...more)).toBeGreaterThanOrEqual(week);
    }
  });

  it('a job costing more than an old rule can ever admit waits a bounded time on both stores', async () => {
    const O = [normalizeRule({ limit: 1, interval: '1d' }, 'old')];
    const N = [normalizeRule({ limit: 1e9, interval: '1d', algorithm: 'fixed-window' }, 'new')];
    const { stores } = pair();
    const req = { id: 'big', rules: N, costs: [2e8], count: 1, previous: O, convert: true };
    const a = await stores[0].acquire(req);
    const b = await stores[1].acquire(req);
    // As a cost of burst + 1 would: refused, waiting one emission interval (a day), not 2e8.
    expect(a).toMatchObject({ granted: 0, blocked: 'rate', retryAfter: 86_400_000 });
    expect(b).toEqual(a);
  });

  it("a converted state of a long rule (up to two intervals ahead) keeps the line of turns valve's own", async () => {
    const O = [normalizeRule({ limit: 10, interval: '365d', burst: 10 }, 'old')];
    const N = [normalizeRule({ limit: 1, interval: '300d' }, 'new')];
    const { clocks, stores } = pair();
    const answers: AcquireResult[][] = [[], []];
    for (const [i, store] of stores.entries()) {
      const id = 'line';
      answers[i]!.push(await store.acquire({ id, rules: O, costs: new Array(10).fill(1), count: 10 }));
      // The new rule's state: two of its intervals ahead; a refused caller takes a ticket then.
      answers[i]!.push(
        await store.acquire({ id, rules: N, costs: [1], count: 1, previous: O, convert: true, turn: 0 }),
      );
      clocks[i]!.advance(1000);
      answers[i]!.push(await store.acquire({ id, rules: N, costs: [1], count: 1, previous: O, turn: 0 }));
      answers[i]!.push(await store.acquire({ id, rules: N, costs: [1], count: 1, turn: 0 }));
    }
    expect(answers[0]![1]).toMatchObject({ granted: 0, blocked: 'rate', retryAfter: 600 * 86_400_000 });
    expect(answers[1]).toEqual(answers[0]);
  });

  it('a valve over Redis starts such a job when the transition ends, without store errors', async () => {
    const clock = new FakeClock(T0);
    const inner = redisStore({ client: c.client, prefix: uniquePrefix('over'), unsafeTestClock: clock });
    // The fake clock moves only while no acquisition travels: a loaded machine cannot make an
    // answer land hours (of fake time) after its call.
    let inFlight = 0;
    const store: Store = {
      acquire: (request) => {
        inFlight++;
        return Promise.resolve(inner.acquire(request)).finally(() => inFlight--);
      },
      pause: (id, ms, by) => inner.pause(id, ms, by),
      resume: (id) => inner.resume(id),
      renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
      release: (id, tokens) => inner.release(id, tokens),
    };
    const valve = createValve({ id: 'v', store, clock, rules: { limit: 1, interval: '1d' } });
    const errors: unknown[] = [];
    valve.on('store-error', (e: unknown) => errors.push(e));
    await valve.setRules({ limit: 1e9, interval: '1d', algorithm: 'fixed-window' });
    let startedAt = Number.NaN;
    valve.run(() => (startedAt = clock.now()), { cost: 2e8 }).catch(() => {});
    for (let i = 0; i < 30; i++) {
      await vi.waitFor(() => expect(inFlight).toBe(0), { timeout: 10_000, interval: 1 });
      await clock.tickAsync(3_600_000);
    }
    await vi.waitFor(() => expect(inFlight).toBe(0), { timeout: 10_000, interval: 1 });
    expect(errors).toEqual([]);
    expect(startedAt - T0).toBeGreaterThanOrEqual(86_400_000);
    expect(startedAt - T0).toBeLessThanOrEqual(86_400_000 + 3_600_000);
    await valve.close({ drain: false }).catch(() => {});
  }, 30_000);
});
