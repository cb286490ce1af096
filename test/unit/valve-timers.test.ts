import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { type SpyStore, spyStore } from '../helpers/spy-store.js';
import { FakeClock, setup, track } from './harness.js';

const noop = () => undefined;

describe('wake-up timers', () => {
  it('by default a burst-1 rate wait with a synchronous store is one plain timer, for the exact hint', async () => {
    const { valve, clock } = setup({ rules: { limit: 1000, interval: '1s' } });
    const jobs = Array.from({ length: 5 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    // One start now, then four rate waits of exactly one emission interval each, none precise.
    expect(clock.requested).toEqual([1, 1, 1, 1]);
    expect(clock.preciseRequested).toEqual([]);
  });

  it("precision 'spin': a burst-1 rate wait with a synchronous store uses the precise timer, for the exact hint", async () => {
    const { valve, clock } = setup({ rules: { limit: 1000, interval: '1s' }, precision: 'spin' });
    const jobs = Array.from({ length: 5 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    // One start now, then four rate waits of exactly one emission interval each.
    expect(clock.preciseRequested).toEqual([1, 1, 1, 1]);
  });

  it("a rule whose burst absorbs lateness (≥ 2 ms of tolerance) uses plain timers, even with precision 'spin'", async () => {
    const { valve, clock } = setup({ rules: { limit: 1000, interval: '1s', burst: 10 }, precision: 'spin' });
    const jobs = Array.from({ length: 30 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    expect(clock.requested.length).toBeGreaterThan(0);
    expect(clock.preciseRequested).toEqual([]);
  });

  it("an asynchronous store uses plain timers for waits of 1 ms or more, even with precision 'spin' (network jitter dominates; spinning would take CPU from a local Redis)", async () => {
    const { valve, clock, store } = setup({ rules: { limit: 100, interval: '1s' }, precision: 'spin' });
    store.async = { delay: 0.2 };
    const jobs = Array.from({ length: 5 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    expect(clock.preciseRequested).toEqual([]);
  });

  it("precision 'spin', an asynchronous store: a rate wait of less than 1 ms uses the precise timer, not a whole tick", async () => {
    const { valve, clock, store } = setup({ rules: { limit: 1000, interval: '1s' }, precision: 'spin' });
    store.async = { delay: 0.2 };
    const jobs = Array.from({ length: 5 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    // Each wait is the 1 ms slot minus the round trip, sent so that it arrives on the slot.
    expect(clock.preciseRequested).toHaveLength(4);
    for (const ms of clock.preciseRequested) expect(ms).toBeCloseTo(0.8, 3);
    expect(store.acquires.map((a) => a.granted)).toEqual([1, 1, 1, 1, 1]);
  });

  it('by default, an asynchronous store: a rate wait of less than 1 ms is one plain timer to the hint, never precise', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 1000, interval: '1s' } });
    store.async = { delay: 0.2 };
    const jobs = Array.from({ length: 5 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    expect(clock.preciseRequested).toEqual([]);
    // The valve's own timers (the store's 0.2 ms round trips aside): the slot minus the round trip.
    const waits = clock.requested.filter((ms) => Math.abs(ms - 0.2) > 1e-9);
    expect(waits).toHaveLength(4);
    for (const ms of waits) expect(ms).toBeCloseTo(0.8, 3);
    expect(store.acquires.map((a) => a.granted)).toEqual([1, 1, 1, 1, 1]);
  });

  it('maxWait deadlines use plain timers', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: '1h' }, maxWait: 50 });
    const a = track(valve.run(noop));
    const b = track(valve.run(noop));
    await clock.tickAsync(60);
    expect(a.ok).toBe(true);
    expect(b.done).toBe(true);
    expect(clock.preciseRequested).toEqual([]);
  });
});

describe('a refused acquisition whose hint has already passed', () => {
  /**
   * A store that grants `first` jobs of the first call and refuses the rest with a hint shorter
   * than the call took (0.5 ms; it decides at its end), then grants everything.
   */
  function slowHintStore(clock: FakeClock, hintMs: number, first = 0): SpyStore {
    const store = spyStore(memoryStore({ clock }), clock, {
      acquire: (r, i): AcquireResult =>
        i === 0
          ? { granted: first, retryAfter: hintMs, blocked: 'rate', pausedUntil: null, now: clock.now() }
          : { granted: r.count, retryAfter: 0, blocked: null, pausedUntil: null, now: clock.now() },
    });
    store.timing.acquire = { delay: 0.5 };
    return store;
  }

  it('after a partial grant whose short hint already passed, asks again on the answer', async () => {
    const clock = new FakeClock();
    const store = slowHintStore(clock, 0.05, 1);
    const valve = createValve({ id: 'h', clock, store });
    const jobs = [track(valve.run(noop)), track(valve.run(noop))];
    await clock.tickAsync(5);
    expect(jobs.every((j) => j.ok)).toBe(true);
    const at = store.acquires.map((a) => a.decidedAt!);
    expect(at.length).toBe(2);
    // Sent at 0, answered at 0.5 ms with one job granted and a 50 µs hint that had already
    // passed: the next call goes out on the answer (answered 0.5 ms later), not 1 ms after it.
    const gapUs = Math.round((at[1]! - at[0]!) * 1000);
    expect(gapUs).toBe(500);
  });

  it('after an answer that granted nothing, the next call goes out 1 ms after the refused one was sent, no sooner', async () => {
    const clock = new FakeClock();
    const store = slowHintStore(clock, 0.05);
    const valve = createValve({ id: 'h', clock, store });
    const job = track(valve.run(noop));
    await clock.tickAsync(5);
    expect(job.ok).toBe(true);
    const sent = store.acquires.map((a) => Math.round(a.at * 1000));
    expect(sent.length).toBe(2);
    // At most about one call per millisecond while nothing is granted (see valve-store-answers).
    expect(sent[1]! - sent[0]!).toBe(1000);
  });
});
