import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { type SpyStore, spyStore } from '../helpers/spy-store.js';
import { FakeClock, setup, track } from './harness.js';

const noop = () => undefined;

describe('wake-up timers', () => {
  it('a burst-1 rate wait with a synchronous store uses the precise timer, for the exact hint', async () => {
    const { valve, clock } = setup({ rules: { limit: 1000, interval: '1s' } });
    const jobs = Array.from({ length: 5 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    // One start now, then four rate waits of exactly one emission interval each.
    expect(clock.preciseRequested).toEqual([1, 1, 1, 1]);
  });

  it('a rule whose burst absorbs lateness (≥ 2 ms of tolerance) uses plain timers', async () => {
    const { valve, clock } = setup({ rules: { limit: 1000, interval: '1s', burst: 10 } });
    const jobs = Array.from({ length: 30 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    expect(clock.requested.length).toBeGreaterThan(0);
    expect(clock.preciseRequested).toEqual([]);
  });

  it('an asynchronous store uses plain timers (network jitter dominates; spinning would take CPU from a local Redis)', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 1000, interval: '1s' } });
    store.async = { delay: 0.2 };
    const jobs = Array.from({ length: 5 }, () => track(valve.run(noop)));
    await clock.runAllAsync();
    expect(jobs.every((j) => j.ok)).toBe(true);
    expect(clock.preciseRequested).toEqual([]);
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
  /** A store that refuses the first call with a hint shorter than the call took (0.5 ms; it decides at its end). */
  function slowHintStore(clock: FakeClock, hintMs: number): SpyStore {
    const store = spyStore(memoryStore({ clock }), clock, {
      acquire: (r, i): AcquireResult =>
        i === 0
          ? { granted: 0, retryAfter: hintMs, blocked: 'rate', pausedUntil: null, now: clock.now() }
          : { granted: r.count, retryAfter: 0, blocked: null, pausedUntil: null, now: clock.now() },
    });
    store.timing.acquire = { delay: 0.5 };
    return store;
  }

  it('asks again after the short hint, not a whole millisecond later', async () => {
    const clock = new FakeClock();
    const store = slowHintStore(clock, 0.05);
    const valve = createValve({ id: 'h', clock, store });
    const job = track(valve.run(noop));
    await clock.tickAsync(5);
    expect(job.ok).toBe(true);
    const at = store.acquires.map((a) => a.decidedAt!);
    expect(at.length).toBe(2);
    // Sent at 0, answered at 0.5 ms with a 50 µs hint that had already passed: the next call
    // goes out 50 µs after the answer (and is answered 0.5 ms later), not 1 ms after it.
    const gapUs = Math.round((at[1]! - at[0]!) * 1000);
    expect(gapUs).toBe(550);
  });
});
