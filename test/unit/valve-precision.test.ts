import { describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import type { Precision } from '../../src/options.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';
import { type SpyStore, spyStore } from '../helpers/spy-store.js';

/*
 * The `precision` option (src/options.ts, src/pace.ts): by default ('timer') a rate wait is one
 * plain timer to the store's hint, never the clock's precise timer and never a store call
 * before the slot; 'spin' restores the precise timer under rules that cannot absorb a late start.
 * Spinning can only come through the Clock seam (the valve reads time and sets timers nowhere
 * else), so counting the timers and precise timers a FakeClock was asked for, and the store
 * calls, catches any form of it.
 */

/** Late like Node's timers: each plain timer fires 0.05 to 0.9 ms after its target, in turn. */
function nodeLikeLateness(): () => number {
  const pattern = [0.05, 0.3, 0.9, 0.15, 0.6];
  let i = 0;
  return () => pattern[i++ % pattern.length]!;
}

interface Run {
  clock: FakeClock;
  store: SpyStore;
  /** Start times of the jobs (local clock), in order. */
  starts: number[];
}

/**
 * `n` jobs through a saturated valve under `limit` per second, burst 1, on a FakeClock whose
 * plain timers are late like Node's; with `rtt`, an asynchronous store that far away (then timers
 * are exact: the store's round trips are timers of the same clock, and late replies would blur
 * what the valve asked for).
 */
async function saturated(
  n: number,
  limit: number,
  { precision, rtt }: { precision?: Precision; rtt?: number } = {},
): Promise<Run> {
  const clock = new FakeClock();
  if (rtt === undefined) clock.lateness = nodeLikeLateness();
  clock.preciseExact = true;
  const store = spyStore(memoryStore({ clock }), clock);
  if (rtt !== undefined) store.timing.acquire = { delay: rtt, decideAt: rtt / 2 };
  const valve = createValve({
    id: 'precision',
    rules: { limit, interval: '1s' },
    clock,
    store,
    ...(precision !== undefined ? { precision } : {}),
  });
  const starts: number[] = [];
  const all = Array.from({ length: n }, () => valve.run(() => starts.push(clock.now())));
  await clock.runAllAsync(60_000);
  await Promise.all(all);
  await valve.close();
  return { clock, store, starts };
}

/** Gaps between consecutive grants on the store's clock, in µs. */
function grantGapsUs(store: SpyStore): number[] {
  const at = store.acquires.filter((a) => (a.granted ?? 0) > 0).map((a) => Math.round(a.decidedAt! * 1000));
  return at.slice(1).map((t, i) => t - at[i]!);
}

describe("precision 'timer' (the default): no spinning, no store call before the slot", () => {
  for (const limit of [1000, 200, 2000]) {
    it(`${limit}/s burst 1, synchronous store, timers up to 0.9 ms late: one plain timer and one granting store call per slot`, async () => {
      const { clock, store, starts } = await saturated(60, limit);
      expect(starts).toHaveLength(60);
      // Never the precise timer.
      expect(clock.preciseRequested).toEqual([]);
      // One store call per job, each granting one: the valve never asked before the slot opened.
      expect(store.acquires).toHaveLength(60);
      expect(store.acquires.map((a) => a.granted)).toEqual(Array(60).fill(1));
      // One timer per slot after the first start, for the store's hint, nothing in between.
      expect(clock.requested).toHaveLength(59);
      for (const ms of clock.requested) expect(ms).toBeCloseTo(1000 / limit, 6);
      // The bound holds on the store's clock, and lateness is never caught up.
      for (const gap of grantGapsUs(store)) expect(gap).toBeGreaterThanOrEqual(1_000_000 / limit);
    });
  }

  for (const limit of [1000, 2000]) {
    it(`${limit}/s burst 1, a store 0.2 ms away: a sub-millisecond wait is one plain timer, never a re-ask`, async () => {
      const { clock, store, starts } = await saturated(60, limit, { rtt: 0.2 });
      expect(starts).toHaveLength(60);
      expect(clock.preciseRequested).toEqual([]);
      // No call granted nothing: none was sent before its slot.
      expect(store.acquires).toHaveLength(60);
      expect(store.acquires.every((a) => a.granted === 1)).toBe(true);
      // The valve's timers, beside the store's own 0.1 ms halves of each round trip: one per slot,
      // for the slot minus the round trip.
      const own = clock.requested.filter((ms) => Math.abs(ms - 0.1) > 1e-9);
      expect(own).toHaveLength(59);
      for (const ms of own) expect(ms).toBeCloseTo(1000 / limit - 0.2, 3);
      for (const gap of grantGapsUs(store)) expect(gap).toBeGreaterThanOrEqual(1_000_000 / limit);
    });
  }

  it('lateness is lost, never caught up: starts drift from the ideal schedule by the timers’ lateness', async () => {
    const { starts } = await saturated(51, 1000);
    // 50 waits of 1 ms, each plain timer late by 0.05–0.9 ms (mean 0.4 ms).
    const span = starts.at(-1)! - starts[0]!;
    expect(span).toBeCloseTo(50 + 10 * (0.05 + 0.3 + 0.9 + 0.15 + 0.6), 3);
  });
});

describe("precision 'spin': the precise timer where a late start would cost rate", () => {
  it('1000/s burst 1, synchronous store: every rate wait uses the precise timer, and starts stay 1 ms apart although plain timers are late', async () => {
    const { clock, store, starts } = await saturated(51, 1000, { precision: 'spin' });
    expect(clock.preciseRequested).toEqual(Array(50).fill(1));
    expect(store.acquires.map((a) => a.granted)).toEqual(Array(51).fill(1));
    expect(starts.at(-1)! - starts[0]!).toBeCloseTo(50, 3);
    for (const gap of grantGapsUs(store)) expect(gap).toBe(1000);
  });

  it('a store 0.2 ms away at 1000/s: the sub-millisecond rest of each wait is timed by the precise timer', async () => {
    const { clock, store } = await saturated(20, 1000, { precision: 'spin', rtt: 0.2 });
    expect(clock.preciseRequested).toHaveLength(19);
    for (const ms of clock.preciseRequested) expect(ms).toBeCloseTo(0.8, 3);
    expect(store.acquires.every((a) => a.granted === 1)).toBe(true);
  });

  it('follows setRules(): from burst 10 (plain timers) to burst 1 (precise), and back', async () => {
    const clock = new FakeClock();
    const valve = createValve({
      id: 'rules',
      rules: { limit: 1000, interval: '1s', burst: 10 },
      clock,
      store: memoryStore({ clock }),
      precision: 'spin',
    });
    const batch = async (n: number) => {
      const all = Array.from({ length: n }, () => valve.run(() => undefined));
      await clock.runAllAsync(60_000);
      await Promise.all(all);
    };
    await batch(30);
    expect(clock.preciseRequested).toEqual([]);
    await valve.setRules({ limit: 1000, interval: '1s', burst: 1 });
    await clock.tickAsync(100);
    await batch(5);
    expect(clock.preciseRequested.length).toBeGreaterThanOrEqual(4);
    const precise = clock.preciseRequested.length;
    await valve.setRules({ limit: 1000, interval: '1s', burst: 10 });
    await clock.tickAsync(1000);
    await batch(30);
    expect(clock.preciseRequested.length).toBe(precise);
    await valve.close();
  });

  it('the default stays on plain timers after setRules() to a burst-1 rule', async () => {
    const clock = new FakeClock();
    const valve = createValve({
      id: 'rules',
      rules: { limit: 1000, interval: '1s', burst: 10 },
      clock,
      store: memoryStore({ clock }),
    });
    await valve.setRules({ limit: 1000, interval: '1s', burst: 1 });
    const all = Array.from({ length: 10 }, () => valve.run(() => undefined));
    await clock.runAllAsync(60_000);
    await Promise.all(all);
    expect(clock.requested.length).toBeGreaterThanOrEqual(9);
    expect(clock.preciseRequested).toEqual([]);
    await valve.close();
  });

  it('a valve group passes precision to its valves', async () => {
    const clock = new FakeClock();
    const group = createValveGroup({
      rules: { limit: 1000, interval: '1s' },
      store: memoryStore({ clock }),
      clock,
      precision: 'spin',
    });
    const all = Array.from({ length: 5 }, () => group.run('a', () => undefined));
    await clock.runAllAsync(1000);
    await Promise.all(all);
    expect(clock.preciseRequested).toEqual([1, 1, 1, 1]);
    await group.close();
    await flushMicrotasks();
  });
});

describe('precision: validation', () => {
  const ok = { id: 'v', rules: { limit: 1, interval: '1s' } } as const;

  it("accepts 'timer' and 'spin', and an absent option", () => {
    for (const precision of ['timer', 'spin'] as const) {
      expect(() => createValve({ ...ok, precision })).not.toThrow();
    }
    expect(() => createValve({ ...ok })).not.toThrow();
  });

  for (const value of ['fast', 'Spin', 'precise', '']) {
    it(`refuses ${JSON.stringify(value)} with a RangeError naming the option and the value`, () => {
      const call = () => createValve({ ...ok, precision: value as Precision });
      expect(call).toThrow(RangeError);
      expect(call).toThrow(/`precision`.*'timer' or 'spin'/);
      expect(call).toThrow(JSON.stringify(value));
    });
  }

  for (const value of [null, 1, true, { mode: 'spin' }]) {
    it(`refuses ${JSON.stringify(value)} with a TypeError naming the option`, () => {
      const call = () => createValve({ ...ok, precision: value as unknown as Precision });
      expect(call).toThrow(TypeError);
      expect(call).toThrow(/`precision`.*'timer' or 'spin'/);
    });
  }

  it('a valve group checks it when created', () => {
    expect(() => createValveGroup({ rules: ok.rules, precision: 'fast' as Precision })).toThrow(
      /`precision`.*"fast"/,
    );
  });
});

describe('examples/precision.ts (docs/api.md, Precision)', () => {
  it('its three valves run jobs on the real clock, within their rule', async () => {
    const { tightValves, saturate } = await import('../../examples/precision.js');
    const { cheap, exact, bursty } = tightValves();
    for (const valve of [cheap, exact, bursty]) {
      const { started, elapsed } = await saturate(valve, 60);
      // Jobs started, and no more than the rule allows in the time they had (1 per ms, plus
      // a burst of at most 3).
      expect(started).toBeGreaterThan(0);
      expect(started).toBeLessThanOrEqual(3 + Math.ceil(elapsed) + 1);
    }
  });
});
