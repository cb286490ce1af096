import { describe, expect, it } from 'vitest';
import type { ValveOptions } from '../../src/options.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult, BlockReason, Store } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';
import { type SpyStore, spyStore } from '../helpers/spy-store.js';

/**
 * Adaptive request size ("ask") after rate refusals, and the sub-millisecond re-ask for
 * asynchronous stores (see src/pace.ts).
 */

/**
 * A spy over `inner` recording every acquire() and its answer (store.acquires). Without `rtt` the
 * answer is synchronous. With `rtt` (ms) the answer is a promise: the inner store decides half a
 * round trip after the call (mid-flight, like a network store) and the reply arrives after the
 * other half; `rtt: 0` decides and answers in a microtask, at the same virtual instant. After
 * `maxCalls` calls, acquire() never answers (so that a tight re-ask loop ends instead of hanging
 * the test). `syncCost` (synchronous only) moves the clock by that many ms during each call.
 */
function recording(
  inner: Store,
  clock: FakeClock,
  { rtt, maxCalls = 1000, syncCost = 0 }: { rtt?: number; maxCalls?: number; syncCost?: number } = {},
): SpyStore {
  const store = spyStore(inner, clock, { syncCost, maxAcquires: maxCalls });
  if (rtt !== undefined) store.timing.acquire = { delay: rtt, decideAt: rtt / 2 };
  return store;
}

/** A synchronous store answering from a script: `answer(i, count)` for the i-th call (0-based). */
function scripted(
  clock: FakeClock,
  answer: (
    i: number,
    count: number,
  ) => { granted: number; blocked?: BlockReason; retryAfter?: number; pausedUntil?: number },
): SpyStore {
  return spyStore(memoryStore({ clock }), clock, {
    acquire(request, i): AcquireResult {
      const a = answer(i, request.count);
      const full = a.granted >= request.count;
      return {
        granted: Math.min(a.granted, request.count),
        retryAfter: full ? 0 : (a.retryAfter ?? 10),
        blocked: full ? null : (a.blocked ?? 'rate'),
        pausedUntil: a.pausedUntil ?? null,
        now: clock.now(),
      };
    },
  });
}

function valveOver(store: Store, clock: FakeClock, options: Omit<ValveOptions, 'id' | 'clock' | 'store'>) {
  return createValve({ id: 'adaptive', ...options, clock, store });
}

/** Queues `n` jobs recording their start times; returns the starts and the jobs' promises. */
function queue(valve: ReturnType<typeof createValve>, clock: FakeClock, n: number) {
  const starts: number[] = [];
  const all = Array.from({ length: n }, () => valve.run(() => starts.push(clock.now())));
  // Tests that close the valve early leave jobs rejected CLOSED: handled here.
  for (const p of all) p.catch(() => {});
  return { starts, all };
}

describe('adaptive request size (ask)', () => {
  it('shrinks to 2 after a burst-1 rule refuses a full batch (first call asks 32, grants 1)', async () => {
    const clock = new FakeClock();
    const store = recording(memoryStore({ clock }), clock);
    const valve = valveOver(store, clock, { rules: { limit: 10, interval: 1000, burst: 1 } });
    const { starts } = queue(valve, clock, 40);
    await clock.tickAsync(1000);
    // One call per 100 ms slot, at 0, 100, ..., 1000.
    expect(store.acquires.map((c) => c.count)).toEqual([32, ...Array(10).fill(2)]);
    expect(store.acquires.map((c) => c.granted)).toEqual(Array(11).fill(1));
    expect(starts.length).toBe(11);
    expect(valve.stats()).toMatchObject({ started: 11, queued: 29 });
    await valve.close({ drain: false });
  });

  it('after a partial grant of k (burst 5) asks k + 1, then 2 once one job per call fits', async () => {
    const clock = new FakeClock();
    const store = recording(memoryStore({ clock }), clock);
    const valve = valveOver(store, clock, { rules: { limit: 10, interval: 1000, burst: 5 } });
    queue(valve, clock, 40);
    await clock.tickAsync(1000);
    expect(store.acquires.map((c) => c.count)).toEqual([32, 6, ...Array(9).fill(2)]);
    expect(store.acquires.map((c) => c.granted)).toEqual([5, ...Array(10).fill(1)]);
    await valve.close({ drain: false });
  });

  it('doubles back up to batch with every call granted in full once the rule stops binding', async () => {
    const clock = new FakeClock();
    // Refuses the first call after one job (wait 10 ms), then grants everything.
    const store = scripted(clock, (i) => (i === 0 ? { granted: 1, retryAfter: 10 } : { granted: 1e9 }));
    const valve = valveOver(store, clock, {});
    const { all } = queue(valve, clock, 100);
    await clock.tickAsync(10);
    await Promise.all(all);
    expect(store.acquires.map((c) => c.count)).toEqual([32, 2, 4, 8, 16, 32, 32, 5]);
    expect(store.acquires.map((c) => Math.round((c.at - store.acquires[0]!.at) * 1000))).toEqual([
      0, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000,
    ]);
  });

  it('never asks for more than a custom batch (5): k + 1 capped, minimum 2 after a grant of 0', async () => {
    const clock = new FakeClock();
    const store = scripted(clock, (i) =>
      i === 0 ? { granted: 4 } : i === 1 ? { granted: 0 } : { granted: 1e9 },
    );
    const valve = valveOver(store, clock, { batch: 5 });
    const { all } = queue(valve, clock, 30);
    await clock.tickAsync(20);
    await Promise.all(all);
    // 5 (grants 4) → ask 5; 5 (grants 0) → ask 2; then 2 → 4 → 5 (not 8) → 5 …
    expect(store.acquires.map((c) => c.count)).toEqual([5, 5, 2, 4, 5, 5, 5, 5]);
    expect(Math.max(...store.acquires.map((c) => c.count))).toBe(5);
  });

  it('a pause refusal (another process paused the id) does not shrink ask', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = recording(inner, clock);
    const valve = valveOver(store, clock, { rules: [] });
    inner.pause('adaptive', 50); // written by "another process": this valve does not know
    const { all } = queue(valve, clock, 40);
    await clock.tickAsync(50);
    await Promise.all(all);
    expect(store.acquires.map((c) => [c.count, c.granted, c.blocked])).toEqual([
      [32, 0, 'pause'],
      [32, 32, null],
      [8, 8, null],
    ]);
    expect(Math.round((store.acquires[1]!.at - store.acquires[0]!.at) * 1000)).toBe(50_000);
  });

  it('a pause refusal keeps a shrunk ask (neither shrinks nor resets it)', async () => {
    const clock = new FakeClock();
    const store = scripted(clock, (i) =>
      i === 0
        ? { granted: 1, retryAfter: 10 }
        : i === 1
          ? { granted: 0, blocked: 'pause', retryAfter: 20, pausedUntil: clock.now() + 20 }
          : { granted: 1e9 },
    );
    const valve = valveOver(store, clock, {});
    const { all } = queue(valve, clock, 20);
    await clock.tickAsync(30);
    await Promise.all(all);
    expect(store.acquires.map((c) => c.count)).toEqual([20, 2, 2, 4, 8, 5]);
    expect(store.acquires[1]!.blocked).toBe('pause');
  });

  it('a global-concurrency refusal does not shrink ask', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const concurrency = { limit: 10, scope: 'global' as const };
    const a = recording(inner, clock);
    const valveA = createValve({ id: 'g', clock, store: a, concurrency });
    const valveB = createValve({ id: 'g', clock, store: spyStore(inner, clock), concurrency });
    const gates: (() => void)[] = [];
    const hold = () => new Promise<void>((r) => gates.push(r));
    const bJobs = Array.from({ length: 8 }, () => valveB.run(hold));
    await flushMicrotasks();
    expect(valveB.stats().running).toBe(8);
    const bGates = gates.splice(0);
    const aJobs = Array.from({ length: 40 }, () => valveA.run(hold));
    for (const p of aJobs) p.catch(() => {}); // the queued ones reject CLOSED at the end
    await flushMicrotasks();
    // 10 free local slots: asks 10, the store grants the 2 free global slots.
    expect(a.acquires.map((c) => [c.count, c.granted, c.blocked])).toEqual([[10, 2, 'concurrency']]);
    for (const g of bGates) g();
    await Promise.all(bJobs);
    await clock.tickAsync(0);
    // The releases wake A: 8 free slots, ask still 32 → asks 8 (a rate-style shrink would ask 3).
    expect(a.acquires.map((c) => [c.count, c.granted])).toEqual([
      [10, 2],
      [8, 8],
    ]);
    expect(valveA.stats().running).toBe(10);
    const closing = valveA.close({ drain: false });
    for (const g of gates) g();
    await closing;
    await Promise.allSettled(aJobs);
    await valveB.close();
  });

  it('with a synchronous store, a binding burst-1 rule costs one call per job (no empty calls)', async () => {
    const clock = new FakeClock();
    const store = recording(memoryStore({ clock }), clock);
    const valve = valveOver(store, clock, { rules: { limit: 10, interval: 1000 } });
    const { starts, all } = queue(valve, clock, 40);
    await clock.tickAsync(4000);
    await Promise.all(all);
    expect(store.acquires.length).toBe(40);
    expect(store.acquires.map((c) => c.granted)).toEqual(Array(40).fill(1));
    expect(store.acquires.map((c) => c.count)).toEqual([32, ...Array(38).fill(2), 1]);
    const t0 = starts[0]!;
    expect(starts.map((t) => Math.round((t - t0) * 1000))).toEqual(
      Array.from({ length: 40 }, (_, i) => i * 100_000),
    );
    // One timer per slot, on the store's hint.
    expect(clock.requested.filter((d) => d > 0)).toEqual(Array(39).fill(100));
    expect(clock.pending).toBe(0);
  });
});

describe('sub-millisecond re-ask (asynchronous stores only)', () => {
  /** µs since t0, rounded (the FakeClock's resolution). */
  const us = (t: number | undefined, t0: number) => Math.round((t! - t0) * 1000);

  for (const precision of ['timer', 'spin'] as const) {
    it(`precision '${precision}': a synchronous store, even one whose calls take 0.2 ms, is never re-asked: one ${precision === 'spin' ? 'precise' : 'plain'} timer per slot`, async () => {
      const clock = new FakeClock();
      const store = recording(memoryStore({ clock }), clock, { syncCost: 0.2, maxCalls: 200 });
      const valve = valveOver(store, clock, {
        rules: { limit: 2000, interval: 1000, burst: 1 },
        precision,
      });
      const { all } = queue(valve, clock, 10);
      await clock.tickAsync(10);
      await Promise.all(all);
      const calls = store.acquires;
      const t0 = calls[0]!.at;
      expect(calls.map((c) => c.granted)).toEqual(Array(10).fill(1));
      // Each call is sent the hint (0.5 ms) after the store decided the previous one (halfway
      // through it, on the valve's clock), by one timer: as the slot opens, not 0.1 ms later
      // when the reply came back. The store's 0.1 ms to decide is all that is lost.
      expect(calls.map((c) => us(c.at, t0))).toEqual(Array.from({ length: 10 }, (_, i) => i * 600));
      expect(calls.map((c) => us(c.decidedAt, t0))).toEqual(
        Array.from({ length: 10 }, (_, i) => 100 + i * 600),
      );
      expect(clock.requested.length).toBe(9);
      for (const d of clock.requested) expect(d).toBeCloseTo(0.4, 3);
      expect(clock.preciseRequested.length).toBe(precision === 'spin' ? 9 : 0);
    });
  }

  for (const rtt of [0.2, 0.06]) {
    it(`precision 'spin', round trip ${rtt} ms, 2000/s burst 1: the sub-millisecond rest of a wait is spent on the precise timer, not a whole tick; no call is refused`, async () => {
      const clock = new FakeClock();
      const store = recording(memoryStore({ clock }), clock, { rtt });
      const valve = valveOver(store, clock, {
        rules: { limit: 2000, interval: 1000, burst: 1 },
        precision: 'spin',
      });
      const { starts, all } = queue(valve, clock, 10);
      await clock.tickAsync(20);
      await Promise.all(all);
      const calls = store.acquires;
      const t0 = calls[0]!.at;
      // Each call is sent the hint after the previous one was sent, so it reaches the store as the
      // slot opens: one call per job, none refused outright, none polling.
      expect(calls.map((c) => c.granted)).toEqual(Array(10).fill(1));
      expect(calls.map((c) => us(c.at, t0))).toEqual(calls.map((_, i) => i * 500));
      // The waits (0.5 ms minus the round trip) went to the precise timer.
      expect(clock.preciseRequested).toHaveLength(9);
      for (const d of clock.preciseRequested) expect(d).toBeCloseTo(0.5 - rtt, 3);
      // The bound holds on the store's clock: grants exactly one emission interval apart.
      const grants = calls.map((c) => us(c.decidedAt, t0));
      for (let i = 1; i < grants.length; i++) expect(grants[i]! - grants[i - 1]!).toBe(500);
      expect(starts.length).toBe(10);
      for (let i = 1; i < starts.length; i++) {
        expect(us(starts[i], t0) - us(starts[i - 1], t0)).toBeGreaterThanOrEqual(500);
      }
    });
  }

  it('a slow rule (10/s burst 1, hint ~100 ms) is not re-asked: one timer until sentAt + hint, one call per job', async () => {
    const clock = new FakeClock();
    const rtt = 2;
    const store = recording(memoryStore({ clock }), clock, { rtt });
    const valve = valveOver(store, clock, { rules: { limit: 10, interval: 1000, burst: 1 } });
    const { all } = queue(valve, clock, 4);
    await clock.tickAsync(400);
    await Promise.all(all);
    const calls = store.acquires;
    const t0 = calls[0]!.at;
    expect(calls.map((c) => us(c.at, t0))).toEqual([0, 100_000, 200_000, 300_000]);
    expect(calls.map((c) => us(c.decidedAt, t0))).toEqual([1000, 101_000, 201_000, 301_000]);
    expect(calls.map((c) => c.granted)).toEqual([1, 1, 1, 1]);
    expect(calls.map((c) => c.count)).toEqual([4, 2, 2, 1]);
    // The valve's own timers: one per slot, for the hint minus the round trip.
    const timers = clock.requested.filter((d) => d !== rtt / 2);
    expect(timers.length).toBe(3);
    for (const d of timers) expect(d).toBeCloseTo(98, 3);
    expect(clock.pending).toBe(0);
  });

  it('a wait just over 1 ms after the reply (emission 1.5 ms, round trip 0.4 ms) sleeps on one timer', async () => {
    const clock = new FakeClock();
    const rtt = 0.4;
    const store = recording(memoryStore({ clock }), clock, { rtt });
    const valve = valveOver(store, clock, { rules: { limit: 2, interval: 3, burst: 1 } });
    const { all } = queue(valve, clock, 5);
    await clock.tickAsync(10);
    await Promise.all(all);
    const calls = store.acquires;
    const t0 = calls[0]!.at;
    // Hint 1.5 ms from the decision; 1.1 ms left at the reply: not under a timer tick.
    expect(calls.map((c) => us(c.at, t0))).toEqual([0, 1500, 3000, 4500, 6000]);
    expect(calls.map((c) => c.granted)).toEqual([1, 1, 1, 1, 1]);
    const timers = clock.requested.filter((d) => d !== rtt / 2);
    expect(timers.length).toBe(4);
    for (const d of timers) expect(d).toBeCloseTo(1.1, 3);
  });

  it('an answer at the same virtual instant (round trip 0) is not re-asked in a loop: one timer per slot', async () => {
    const clock = new FakeClock();
    const store = recording(memoryStore({ clock }), clock, { rtt: 0, maxCalls: 200 });
    const valve = valveOver(store, clock, { rules: { limit: 2000, interval: 1000, burst: 1 } });
    const { all } = queue(valve, clock, 10);
    await clock.tickAsync(10);
    expect(store.acquires.length).toBe(10);
    await Promise.all(all);
    const t0 = store.acquires[0]!.at;
    expect(store.acquires.map((c) => c.granted)).toEqual(Array(10).fill(1));
    expect(store.acquires.map((c) => us(c.at, t0))).toEqual(Array.from({ length: 10 }, (_, i) => i * 500));
    expect(clock.requested.length).toBe(9);
    for (const d of clock.requested) expect(d).toBeCloseTo(0.5, 3);
  });

  it('a round trip under 0.05 ms (0.04 ms) arms a timer instead: at most 2 calls per slot', async () => {
    const clock = new FakeClock();
    const rtt = 0.04;
    const store = recording(memoryStore({ clock }), clock, { rtt, maxCalls: 500 });
    const valve = valveOver(store, clock, { rules: { limit: 2000, interval: 1000, burst: 1 } });
    const { all } = queue(valve, clock, 10);
    await clock.tickAsync(10);
    await Promise.all(all);
    const calls = store.acquires;
    const t0 = calls[0]!.at;
    expect(calls.length).toBeLessThanOrEqual(2 * 10);
    expect(calls.length).toBe(10);
    expect(calls.map((c) => us(c.at, t0))).toEqual(Array.from({ length: 10 }, (_, i) => i * 500));
    expect(calls.map((c) => us(c.decidedAt, t0))).toEqual(Array.from({ length: 10 }, (_, i) => i * 500 + 20));
    const timers = clock.requested.filter((d) => d !== rtt / 2);
    expect(timers.length).toBe(9);
    for (const d of timers) expect(d).toBeCloseTo(0.46, 3);
  });

  it('a fast rule with burst tolerance ≥ 2 ms (2000/s burst 10) is not precise: sleeps until sentAt + hint', async () => {
    const clock = new FakeClock();
    const rtt = 0.2;
    const store = recording(memoryStore({ clock }), clock, { rtt });
    const valve = valveOver(store, clock, { rules: { limit: 2000, interval: 1000, burst: 10 } });
    const { all } = queue(valve, clock, 20);
    await clock.tickAsync(20);
    await Promise.all(all);
    const calls = store.acquires;
    const t0 = calls[0]!.at;
    expect(calls.map((c) => c.count)).toEqual([20, 10, ...Array(8).fill(2), 1]);
    expect(calls.map((c) => c.granted)).toEqual([10, ...Array(10).fill(1)]);
    expect(calls.map((c) => us(c.at, t0))).toEqual(Array.from({ length: 11 }, (_, i) => i * 500));
    for (let i = 0; i + 1 < calls.length; i++) {
      const c = calls[i]!;
      // Refused with a sub-millisecond wait, yet the next call waits for the hint, after the reply.
      expect(c.retryAfter).toBeLessThan(1);
      expect(us(calls[i + 1]!.at, t0)).toBe(us(c.at + c.retryAfter!, t0));
      expect(us(calls[i + 1]!.at, t0)).toBeGreaterThan(us(c.repliedAt, t0));
    }
    const timers = clock.requested.filter((d) => d !== rtt / 2);
    expect(timers.length).toBe(10);
    for (const d of timers) expect(d).toBeCloseTo(0.3, 3);
  });
});
