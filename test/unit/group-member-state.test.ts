/*
 * What a valve group keeps for a key beyond one valve: rules set with setRules() on a member,
 * a pause the store has not confirmed; and options(key) answers it refuses (a Promise).
 */
import { describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { createValveGroup } from '../../src/group.js';
import type { ValveOverrides } from '../../src/group-types.js';
import type { Rule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireRequest, Store } from '../../src/stores/store.js';
import { storeWith } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

const T = 60_000;
const GROUP_RULES = { limit: 100, interval: '1s', burst: 100 };

/** A memory store that records the rule digests of every acquisition, per id. */
function recordingStore(clock: FakeClock) {
  const inner = memoryStore({ clock });
  const sent: { id: string; rules: string }[] = [];
  const store = storeWith(inner, {
    acquire: (r: AcquireRequest) => {
      sent.push({ id: r.id, rules: r.rules.map((x) => x.digest).join(',') });
      return inner.acquire(r);
    },
  });
  /** The digests the last acquisition of `id` checked. */
  const last = (id: string) => sent.filter((s) => s.id === id).at(-1)?.rules;
  return { store, last };
}

describe('a valve group: rules set on a member with setRules()', () => {
  it('survive its eviction: the next valve of the key has them, and their budget', async () => {
    const clock = new FakeClock();
    const { store, last } = recordingStore(clock);
    const g = createValveGroup({ rules: GROUP_RULES, store, clock, idleTimeout: T });
    const mismatches: unknown[] = [];
    g.on('rule-mismatch', (e, key) => mismatches.push([e, key]));
    await g.run('A', () => 0);
    // The provider told us A's real quota: 1 per hour.
    await g.valve('A').setRules({ limit: 1, interval: '1h' });
    const first = track(g.run('A', () => 1));
    await clock.tickAsync(3 * 3_600_000);
    expect(first.ok).toBe(true);
    await clock.tickAsync(T + 10);
    expect(g.size).toBe(0);
    const runs = Array.from({ length: 3 }, () => track(g.run('A', () => 2)));
    await clock.tickAsync(1000);
    // The new valve checks 1 per hour: one start, the others wait an hour (the group's rules
    // would have started all three).
    expect(last('A')).toBe('g1.3600000000.1');
    expect(runs.filter((r) => r.done)).toHaveLength(1);
    expect(mismatches).toEqual([]);
    // Other keys keep the group's rules.
    await g.run('B', () => 0);
    expect(last('B')).toBe('g100.1000000.100');
    await g.close();
  });

  it("win over options(key)'s rules; options(key) still gives the key's other overrides", async () => {
    const clock = new FakeClock();
    const { store, last } = recordingStore(clock);
    const asked: string[] = [];
    const g = createValveGroup({
      rules: GROUP_RULES,
      store,
      clock,
      idleTimeout: T,
      options: (key) => {
        asked.push(key);
        return { rules: { limit: 50, interval: '1s' }, maxWait: '2s' };
      },
    });
    await g.run('B', () => 0);
    expect(last('B')).toBe('g50.1000000.1');
    const rules: Rule = { limit: 1, interval: '1h' };
    await g.valve('A').setRules(rules);
    rules.limit = 99; // the group keeps a copy
    await clock.tickAsync(T + 10);
    expect(g.size).toBe(0);
    const runs = Array.from({ length: 2 }, () => track(g.run('A', () => 0)));
    await clock.tickAsync(10);
    expect(asked).toEqual(['B', 'A', 'A']);
    expect(last('A')).toBe('g1.3600000000.1');
    // The change from 50 per second to 1 per hour was never converted before the eviction: the
    // next valve converts it, and a state of 50 per second cannot tell what the hour held (it is
    // assumed spent): nothing starts, and maxWait still comes from options(key): 2 s at most.
    expect(runs[0]!.done).toBe(false);
    await clock.tickAsync(2000);
    expect(isValveError(runs[0]!.error, 'MAX_WAIT')).toBe(true);
    expect(isValveError(runs[1]!.error, 'MAX_WAIT')).toBe(true);
    await g.close();
  });

  it('are forgotten once setRules() gives the key its own rules again (the same digests)', async () => {
    const clock = new FakeClock();
    const { store, last } = recordingStore(clock);
    let plan: ValveOverrides = { rules: { limit: 100, interval: '1s', burst: 100 } };
    const g = createValveGroup({ rules: GROUP_RULES, store, clock, idleTimeout: T, options: () => plan });
    await g.valve('A').setRules({ limit: 5, interval: '1s' });
    // options("A")'s rules again, written another way: nothing is kept for A any more.
    await g.valve('A').setRules([{ limit: 100, interval: 1000, burst: 100, algorithm: 'gcra' }]);
    await clock.tickAsync(T + 10);
    expect(g.size).toBe(0);
    // So A's next valve has what options("A") answers then.
    plan = { rules: { limit: 50, interval: '1s' } };
    await g.run('A', () => 0);
    expect(last('A')).toBe('g50.1000000.1');
    await g.close();
  });

  it('rules setRules() refuses, or a closed valve, change nothing', async () => {
    const clock = new FakeClock();
    const { store, last } = recordingStore(clock);
    const g = createValveGroup({ rules: GROUP_RULES, store, clock, idleTimeout: T });
    const v = g.valve('A');
    await expect(v.setRules({ limit: 0, interval: '1s' })).rejects.toThrow(RangeError);
    await expect(v.setRules([{ limit: 5, interval: '1s', extra: 1 } as Rule])).rejects.toThrow(TypeError);
    await clock.tickAsync(T + 10);
    expect(g.size).toBe(0);
    // The dropped valve is closed: its setRules() rejects CLOSED and the group keeps nothing.
    const err = await v.setRules({ limit: 5, interval: '1s' }).catch((e: unknown) => e);
    expect(isValveError(err, 'CLOSED')).toBe(true);
    await g.run('A', () => 0);
    expect(last('A')).toBe('g100.1000000.100');
    await g.close();
  });
});

describe('a valve group: options(key) must answer synchronously', () => {
  it('a Promise (an async lookup) is a TypeError naming options(key), thrown by valve(), rejected by run()', async () => {
    const clock = new FakeClock();
    let asked = 0;
    const lookup = async (key: string): Promise<ValveOverrides | undefined> => {
      asked++;
      if (key === 'broken') throw new Error('db down');
      return { rules: { limit: 1, interval: '1m' } };
    };
    const g = createValveGroup({
      rules: GROUP_RULES,
      store: memoryStore({ clock }),
      clock,
      options: lookup as unknown as (key: string) => ValveOverrides | undefined,
    });
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const runs = Array.from({ length: 3 }, () => track(g.run('trial', () => 1)));
      await flushMicrotasks();
      for (const r of runs) {
        expect(r.ok).toBe(false);
        expect(r.error).toBeInstanceOf(TypeError);
        expect((r.error as Error).message).toMatch(
          /^`options\("trial"\)` must return the overrides synchronously, got a Promise/,
        );
      }
      expect(() => g.valve('trial')).toThrow(/`options\("trial"\)` must return the overrides synchronously/);
      // A lookup that rejects is no unhandled rejection besides the TypeError.
      await expect(g.run('broken', () => 1)).rejects.toThrow(/synchronously, got a Promise/);
      await new Promise((r) => setImmediate(r));
      expect(unhandled).toEqual([]);
      expect(asked).toBe(5);
      expect(g.size).toBe(0);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    await g.close();
  });

  it('any other object than a plain one is a TypeError too (a Map, a class instance)', () => {
    const g = createValveGroup({
      rules: GROUP_RULES,
      options: (key) =>
        (key === 'map' ? new Map([['rules', { limit: 1, interval: '1s' }]]) : new (class Plan {})()) as never,
    });
    expect(() => g.valve('map')).toThrow(
      /Expected `options\("map"\)` to return a plain object like \{ rules, concurrency, maxWait \} or undefined, got an instance of Map/,
    );
    expect(() => g.valve('plan')).toThrow(/got an instance of Plan/);
    void g.close();
  });
});

describe('a valve group: a pause the store has not confirmed', () => {
  function failingPauseStore(clock: FakeClock): Store {
    return storeWith(memoryStore({ clock }), {
      pause: () => {
        throw new Error('store down for pause');
      },
    });
  }

  it('keeps its valve past idleTimeout until the pause ends: the key does not start inside it', async () => {
    const clock = new FakeClock();
    const g = createValveGroup({
      rules: GROUP_RULES,
      store: failingPauseStore(clock),
      clock,
      idleTimeout: T,
    });
    g.on('store-error', () => {});
    const err = await g
      .valve('A')
      .pause('10m')
      .catch((e: unknown) => e);
    expect(isValveError(err, 'STORE_UNAVAILABLE')).toBe(true);
    await clock.tickAsync(T + 10);
    expect(g.size).toBe(1);
    const after = track(g.run('A', () => 'after'));
    await clock.tickAsync(10);
    expect(after.done).toBe(false);
    // Started at the pause's end, then dropped idleTimeout later (at most) like any valve.
    await clock.tickAsync(10 * T);
    expect(after.ok).toBe(true);
    await clock.tickAsync(2 * T);
    expect(g.size).toBe(0);
    expect(g.stats().evicted).toBe(1);
    await g.close();
  });

  it('also one read from a response (observe()) whose background write failed; resume() lets it go', async () => {
    const clock = new FakeClock();
    const g = createValveGroup({
      rules: GROUP_RULES,
      store: failingPauseStore(clock),
      clock,
      idleTimeout: T,
    });
    g.on('store-error', () => {});
    await g.run('A', () =>
      g.valve('A').observe({ status: 429, headers: new Headers({ 'retry-after': '600' }) }),
    );
    await clock.tickAsync(T + 10);
    expect(g.size).toBe(1);
    const held = track(g.run('A', () => 'held'));
    await clock.tickAsync(10);
    expect(held.done).toBe(false);
    await g.valve('A').resume();
    await clock.tickAsync(10);
    expect(held.ok).toBe(true);
    await clock.tickAsync(T + 10);
    expect(g.size).toBe(0);
    await g.close();
  });
});
