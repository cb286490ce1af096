/**
 * Pipelined admission: with an asynchronous store whose last answer granted everything, a valve
 * may send a second store call while the first travels (same-cost jobs, no global concurrency,
 * nothing failing). The jobs of both calls wait in one line in queue order; the grants of any
 * answer go to the front of the line, so a job the first call could not get keeps its place
 * ahead of the second call's, and no grant waits for another call's answer.
 */
import { describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { type SpyStore, spyStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

/** A store whose acquire() answers only when the test says so, with the answer the test gives (store.pending). */
function manualStore(clock: FakeClock): SpyStore {
  const store = spyStore(memoryStore({ clock }), clock);
  store.timing.acquire = 'manual';
  return store;
}

const grant = (clock: FakeClock, granted: number, count: number, retryAfter = 5): AcquireResult => ({
  granted,
  retryAfter: granted < count ? retryAfter : 0,
  blocked: granted < count ? 'rate' : null,
  pausedUntil: null,
  now: clock.now(),
});

/** Answers every call, including those sent meanwhile, granting all it asked; returns their sizes. */
async function grantAll(store: SpyStore, clock: FakeClock): Promise<number[]> {
  const counts: number[] = [];
  while (store.pending.length > 0) {
    const p = store.pending.shift()!;
    counts.push(p.count);
    p.resolve(grant(clock, p.count, p.count));
    await flushMicrotasks();
  }
  return counts;
}

/** Enqueues n jobs that record their index when they start. */
function enqueue(valve: ReturnType<typeof createValve>, n: number, started: number[], from = 0) {
  return Array.from({ length: n }, (_, i) => track(valve.run(() => started.push(from + i))));
}

/**
 * A valve over a manual store with `n` jobs queued, after its first call was granted in full:
 * two calls in flight (jobs 32..63 and 64..95).
 */
async function twoInFlight(n: number, options: Partial<Parameters<typeof createValve>[0]> = {}) {
  const clock = new FakeClock();
  const store = manualStore(clock);
  const valve = createValve({ id: 'p', rules: [], store, clock, ...options });
  const started: number[] = [];
  const jobs = enqueue(valve, n, started);
  await flushMicrotasks();
  store.pending.shift()!.resolve(grant(clock, 32, 32));
  await flushMicrotasks();
  return { clock, store, valve, started, jobs };
}

describe('pipelined admission', () => {
  it('sends a second call while the first travels once an answer granted everything, never a third', async () => {
    const clock = new FakeClock();
    const store = manualStore(clock);
    const valve = createValve({ id: 'p', rules: [], store, clock });
    const started: number[] = [];
    enqueue(valve, 200, started);
    await flushMicrotasks();
    // Nothing known yet about the store: one call.
    expect(store.pending.map((p) => p.count)).toEqual([32]);
    store.pending.shift()!.resolve(grant(clock, 32, 32));
    await flushMicrotasks();
    // The answer granted everything: two calls in flight now.
    expect(store.pending.map((p) => p.count)).toEqual([32, 32]);
    expect(started).toEqual(Array.from({ length: 32 }, (_, i) => i));
    await grantAll(store, clock);
    expect(started).toEqual(Array.from({ length: 200 }, (_, i) => i));
    expect(store.maxInFlight).toBe(2);
    expect(store.acquires.length).toBe(7); // 200 jobs, 32 per call
  });

  it("gives the second call's grants to the jobs the first call could not get, in line order", async () => {
    const { clock, store, started, jobs } = await twoInFlight(100);
    expect(store.pending.map((p) => p.count)).toEqual([32, 32]); // jobs 32..63 and 64..95
    store.pending.shift()!.resolve(grant(clock, 10, 32)); // 32..41 start; 42..63 wait in line
    await flushMicrotasks();
    expect(started.length).toBe(42);
    // The second call's 32 grants go to 42..63 first, then to 64..73; 74..95 go back to the queue.
    store.pending.shift()!.resolve(grant(clock, 32, 32));
    await flushMicrotasks();
    expect(started).toEqual(Array.from({ length: 74 }, (_, i) => i));
    // That answer, the later one, granted everything: the valve asks again at once, for twice
    // the 11 it asked after the refusal, and pipelines the last 4 behind it.
    expect(store.pending.map((p) => p.count)).toEqual([22, 4]);
    await grantAll(store, clock);
    expect(started).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(jobs.every((j) => j.ok)).toBe(true);
  });

  it('uses an answer as it comes: grants go to the front of the line, whichever call settles first', async () => {
    const { clock, store, started } = await twoInFlight(96);
    const [first, second] = store.pending.splice(0, 2);
    second!.resolve(grant(clock, 32, 32));
    await flushMicrotasks();
    // The second call's grants start the first call's jobs (same cost): order is kept, and a
    // grant never waits for another call's answer.
    expect(started).toEqual(Array.from({ length: 64 }, (_, i) => i));
    first!.resolve(grant(clock, 32, 32));
    await flushMicrotasks();
    expect(started).toEqual(Array.from({ length: 96 }, (_, i) => i));
  });

  it('a refused first call and a refused second call put every job back in order', async () => {
    const { clock, store, valve, started } = await twoInFlight(96);
    store.pending.shift()!.resolve(grant(clock, 0, 32, 3));
    store.pending.shift()!.resolve(grant(clock, 0, 32, 3));
    await flushMicrotasks();
    expect(started.length).toBe(32);
    expect(valve.stats().queued).toBe(64);
    await clock.tickAsync(3);
    // After a refusal the valve asks for a few jobs, then grows back; one call at a time until
    // an answer grants everything.
    const counts = await grantAll(store, clock);
    expect(counts[0]).toBe(2);
    expect(started).toEqual(Array.from({ length: 96 }, (_, i) => i));
  });

  it('a cancelled job waiting in line spends its grant; the grant does not go to the next job', async () => {
    const clock = new FakeClock();
    const store = manualStore(clock);
    const valve = createValve({ id: 'p', rules: [], store, clock });
    const started: number[] = [];
    const ac = new AbortController();
    const jobs: ReturnType<typeof track>[] = [];
    for (let i = 0; i < 96; i++) {
      jobs.push(track(valve.run(() => started.push(i), i === 40 ? { signal: ac.signal } : undefined)));
    }
    await flushMicrotasks();
    store.pending.shift()!.resolve(grant(clock, 32, 32));
    await flushMicrotasks();
    store.pending.shift()!.resolve(grant(clock, 0, 32)); // 32..63 wait in line for the second call
    await flushMicrotasks();
    ac.abort(new Error('no longer needed'));
    await flushMicrotasks();
    expect(jobs[40]!.done).toBe(true);
    expect(jobs[40]!.ok).toBe(false);
    store.pending.shift()!.resolve(grant(clock, 32, 32));
    await flushMicrotasks();
    // 32 grants over the line 32..63 (40 cancelled, its grant spent): 31 starts, 64.. not yet.
    expect(started).toEqual(Array.from({ length: 64 }, (_, i) => i).filter((i) => i !== 40));
  });

  it('does not pipeline jobs of another cost, under global concurrency, or with a synchronous store', async () => {
    // Another cost: the second call would carry jobs whose spend differs from the first's.
    {
      const clock = new FakeClock();
      const store = manualStore(clock);
      const valve = createValve({ id: 'p', rules: [], store, clock });
      for (let i = 0; i < 72; i++) track(valve.run(() => {}));
      track(valve.run(() => {}, { cost: 2 }));
      for (let i = 0; i < 40; i++) track(valve.run(() => {}));
      await flushMicrotasks();
      store.pending.shift()!.resolve(grant(clock, 32, 32)); // 0..31
      await flushMicrotasks();
      // 32..63 in flight; the second call takes 64..71 (cost 1) and stops at 72 (cost 2).
      expect(store.pending.map((p) => p.costs)).toEqual([Array(32).fill(1), Array(8).fill(1)]);
      store.pending.shift()!.resolve(grant(clock, 32, 32));
      store.pending.shift()!.resolve(grant(clock, 8, 8));
      await flushMicrotasks();
      // The next call starts with 72 (cost 2): mixed costs in flight, so no second call.
      expect(store.pending.map((p) => p.costs[0])).toEqual([2]);
      expect(store.pending[0]!.count).toBe(32);
      expect(store.maxInFlight).toBe(2);
    }
    // Global concurrency: leases belong to their call's jobs.
    {
      const clock = new FakeClock();
      const store = manualStore(clock);
      const valve = createValve({
        id: 'p',
        rules: [],
        store,
        clock,
        concurrency: { limit: 1000, scope: 'global', leaseTtl: 5000 },
      });
      for (let i = 0; i < 100; i++) track(valve.run(() => {}));
      await flushMicrotasks();
      const p = store.pending.shift()!;
      p.resolve({
        ...grant(clock, 32, 32),
        leases: Array.from({ length: 32 }, (_, i) => ({
          token: `t${i}`,
          fence: i + 1,
          expiresAt: clock.now() + 5000,
        })),
      });
      await flushMicrotasks();
      expect(store.pending.length).toBe(1);
      expect(store.maxInFlight).toBe(1);
    }
    // A synchronous store answers before the next call: never two in flight (and no change in calls).
    {
      const clock = new FakeClock();
      const store = spyStore(memoryStore({ clock }), clock);
      const valve = createValve({ id: 'p', rules: [], store, clock });
      const all = Array.from({ length: 100 }, () => valve.run(() => {}));
      await Promise.all(all);
      expect(store.acquires.map((a) => a.count)).toEqual([32, 32, 32, 4]);
    }
  });

  it('leaves room for the jobs of the call in flight under local concurrency', async () => {
    const clock = new FakeClock();
    const store = manualStore(clock);
    const valve = createValve({ id: 'p', rules: [], store, clock, concurrency: 40 });
    const gates: (() => void)[] = [];
    for (let i = 0; i < 100; i++) track(valve.run(() => new Promise<void>((r) => gates.push(r))));
    await flushMicrotasks();
    store.pending.shift()!.resolve(grant(clock, 32, 32)); // 32 running, 8 free
    await flushMicrotasks();
    expect(store.pending.map((p) => p.count)).toEqual([8]);
    for (const g of gates.splice(0, 16)) g(); // 16 running + 8 in flight: 16 free
    await flushMicrotasks();
    expect(store.pending.map((p) => p.count)).toEqual([8, 16]);
    const [a, b] = store.pending.splice(0, 2);
    a!.resolve(grant(clock, 8, 8));
    b!.resolve(grant(clock, 16, 16));
    await flushMicrotasks();
    expect(valve.stats().running).toBe(40);
    expect(store.maxInFlight).toBe(2);
  });

  it("a failed first call (onStoreError 'wait') keeps its jobs ahead of the second call's", async () => {
    const { clock, store, valve, started } = await twoInFlight(96);
    valve.on('store-error', () => {});
    store.pending.shift()!.reject(new Error('connection reset'));
    await flushMicrotasks();
    store.pending.shift()!.resolve(grant(clock, 32, 32)); // its grants go to 32..63
    await flushMicrotasks();
    expect(started).toEqual(Array.from({ length: 64 }, (_, i) => i));
    await clock.tickAsync(200); // the failure's backoff
    await grantAll(store, clock);
    expect(started).toEqual(Array.from({ length: 96 }, (_, i) => i));
  });

  it("a failed call (onStoreError 'throw') rejects its share of the line, the last in line, and the queue", async () => {
    const { clock, store, valve, started, jobs } = await twoInFlight(100, { onStoreError: 'throw' });
    valve.on('store-error', () => {});
    expect(store.pending.map((p) => p.count)).toEqual([32, 32]); // 32..63 and 64..95; 96..99 queued
    store.pending.shift()!.reject(new Error('connection reset'));
    await flushMicrotasks();
    // 32..63 stay in line for the call still in flight; 64..95 and the queue reject.
    for (let i = 64; i < 100; i++) {
      expect(jobs[i]!.ok).toBe(false);
      expect(isValveError(jobs[i]!.error, 'STORE_UNAVAILABLE')).toBe(true);
    }
    expect(jobs[32]!.done).toBe(false);
    store.pending.shift()!.resolve(grant(clock, 32, 32));
    await flushMicrotasks();
    expect(started).toEqual(Array.from({ length: 64 }, (_, i) => i));
    expect(store.pending).toEqual([]);
  });

  it('close() without drain rejects the jobs of both calls and those waiting in line; late grants start nothing', async () => {
    const { clock, store, valve, started, jobs } = await twoInFlight(96);
    store.pending.shift()!.resolve(grant(clock, 0, 32)); // 32..63 wait in line
    await flushMicrotasks();
    const closed = track(valve.close({ drain: false }));
    await flushMicrotasks();
    for (let i = 32; i < 96; i++) expect(isValveError(jobs[i]!.error, 'CLOSED')).toBe(true);
    expect(closed.done).toBe(false); // the second call is still in flight
    store.pending.shift()!.resolve(grant(clock, 32, 32));
    await flushMicrotasks();
    expect(started.length).toBe(32);
    expect(closed.done).toBe(true);
  });
});
