import { describe, expect, it, vi } from 'vitest';
import { inspectMemoryStore, memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult, Store, WakeEvent, WakeStatus } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { count, type SpyStore, spyStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

/**
 * A memory store whose wake-ups are confirmed or not as the test scripts it: while not
 * listening, wake-ups are dropped (as by a subscriber whose SUBSCRIBE was lost), and
 * `status()` tells the valve through onStatus.
 */
function scriptedStore(clock: FakeClock, listening = false) {
  const inner = memoryStore({ clock });
  const spy = spyStore(inner, clock);
  const statusListeners = new Set<(status: WakeStatus) => void>();
  const state = { listening, subscribes: 0, unsubscribes: 0 };
  const store: SpyStore = Object.assign(Object.create(null), spy, {
    subscribe(id: string, onWake: (event: WakeEvent) => void, onStatus?: (status: WakeStatus) => void) {
      state.subscribes++;
      const off = inner.subscribe!(id, (event) => {
        if (state.listening) onWake(event);
      });
      if (onStatus) statusListeners.add(onStatus);
      return () => {
        state.unsubscribes++;
        off();
        if (onStatus) statusListeners.delete(onStatus);
      };
    },
    listening: () => state.listening,
  });
  Object.defineProperty(store, 'notifies', { get: () => state.listening });
  /** The store says whether it delivers wake-ups now (optionally refused with `error`). */
  const status = (value: boolean, error?: unknown) => {
    state.listening = value;
    for (const fn of [...statusListeners])
      fn(error === undefined ? { listening: value } : { listening: value, error });
  };
  return { inner, spy, store, state, status };
}

function takeSlot(inner: Store): string {
  const r = inner.acquire({
    id: 'w',
    rules: [],
    costs: [1],
    count: 1,
    lease: { limit: 1, ttl: 600_000 },
  }) as AcquireResult;
  return r.leases![0]!.token;
}

function gaps(times: number[]): number[] {
  return times.slice(1).map((t, i) => t - times[i]!);
}

describe('wake-ups count only once the store confirms them', () => {
  it('a global-slot waiter polls every 50 ms plus jitter until confirmed, then rechecks once and trusts the wake-ups', async () => {
    const clock = new FakeClock();
    const { inner, spy, store, status } = scriptedStore(clock);
    const valve = createValve({
      id: 'w',
      clock,
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 600_000 },
    });
    const theirs = takeSlot(inner);
    const job = track(valve.run(() => 'mine'));
    await clock.tickAsync(1000);
    const polls = gaps(spy.acquires.map((a) => a.at));
    expect(polls.length).toBeGreaterThanOrEqual(12);
    for (const g of polls) {
      expect(g).toBeGreaterThanOrEqual(50);
      expect(g).toBeLessThanOrEqual(76);
    }
    // Confirmed: the valve asks once at once (it may have missed a release), then waits for a
    // wake-up, rechecking at most once a second.
    const before = spy.acquires.length;
    status(true);
    await clock.tickAsync(0);
    expect(spy.acquires.length).toBe(before + 1);
    await clock.tickAsync(3000);
    const trusting = gaps(spy.acquires.slice(before).map((a) => a.at));
    expect(Math.min(...trusting)).toBeGreaterThan(76);
    expect(spy.acquires.length - before).toBeLessThanOrEqual(5);
    inner.release('w', [theirs]);
    await clock.tickAsync(0);
    expect(job.value).toBe('mine');
  });

  it('wake-ups dropped after confirmation: the waiter goes back to polling', async () => {
    const clock = new FakeClock();
    const { inner, spy, store, status } = scriptedStore(clock, true);
    const valve = createValve({
      id: 'w',
      clock,
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 600_000 },
    });
    const theirs = takeSlot(inner);
    const job = track(valve.run(() => 'mine'));
    await clock.tickAsync(10);
    const before = spy.acquires.length;
    status(false);
    // The release's wake-up is lost: the waiter notices it by polling, within 50 ms plus jitter.
    inner.release('w', [theirs]);
    await clock.tickAsync(76);
    expect(job.value).toBe('mine');
    expect(spy.acquires.length).toBe(before + 1);
  });

  it("a resume whose wake-up was missed is noticed within a second, not at the cached pause's end", async () => {
    const clock = new FakeClock();
    const { inner, spy, store, status } = scriptedStore(clock, true);
    const valve = createValve({ id: 'w', clock, store });
    const other = createValve({ id: 'w', clock, store: inner });
    // The valve has work waiting behind a long pause it cached.
    await other.pause(60_000);
    const job = track(valve.run(() => 'ran'));
    await clock.tickAsync(10);
    expect(valve.stats().pausedUntil).not.toBeNull();
    const calls = spy.acquires.length;
    await clock.tickAsync(5000);
    expect(spy.acquires.length).toBe(calls); // confirmed wake-ups: the cached pause is trusted
    status(false);
    await other.resume(); // its wake-up is lost
    await clock.tickAsync(1001);
    expect(job.value).toBe('ran');
  });

  it('a resume missed before confirmation is noticed at the confirmation', async () => {
    const clock = new FakeClock();
    const { inner, spy, store, status } = scriptedStore(clock, false);
    const valve = createValve({ id: 'w', clock, store });
    const other = createValve({ id: 'w', clock, store: inner });
    await other.pause(60_000);
    const job = track(valve.run(() => 'ran'));
    await clock.tickAsync(10);
    await other.resume(); // lost
    const calls = spy.acquires.length;
    status(true);
    await clock.tickAsync(0);
    expect(spy.acquires.length).toBe(calls + 1);
    expect(job.value).toBe('ran');
  });

  it("a refused subscription is reported once as a 'store-error' of operation 'subscribe'", async () => {
    const clock = new FakeClock();
    const { inner, store, status } = scriptedStore(clock, false);
    const valve = createValve({
      id: 'w',
      clock,
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 600_000 },
    });
    const errors = vi.fn();
    valve.on('store-error', errors);
    const theirs = takeSlot(inner);
    const job = track(valve.run(() => 'mine'));
    await clock.tickAsync(10);
    const refusal = new Error("NOPERM User has no permissions to access the 'x' channel");
    status(false, refusal);
    status(false, refusal);
    await clock.tickAsync(10);
    expect(errors).toHaveBeenCalledTimes(1);
    expect(errors).toHaveBeenCalledWith(refusal, { operation: 'subscribe', id: 'w', action: 'none' });
    expect(valve.stats().storeErrors).toBe(1);
    // The valve polls meanwhile.
    inner.release('w', [theirs]);
    await clock.tickAsync(76);
    expect(job.value).toBe('mine');
  });
});

describe('an idle valve holds nothing in its store', () => {
  it('unsubscribes when nothing is queued, in flight, running or being released, and subscribes again at its next job', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const subscribers = () =>
      (store as unknown as Record<symbol, () => { subscribers: number }>)[inspectMemoryStore]!().subscribers;
    const valve = createValve({
      id: 'idle',
      clock,
      store,
      rules: { limit: 10, interval: 1000 },
      concurrency: { limit: 2, scope: 'global', leaseTtl: 3000 },
    });
    let finish = () => {};
    const running = track(valve.run(() => new Promise<void>((resolve) => (finish = resolve))));
    await flushMicrotasks();
    expect(subscribers()).toBe(1);
    await clock.tickAsync(1000); // a renewal
    expect(subscribers()).toBe(1);
    finish();
    await flushMicrotasks();
    expect(running.done).toBe(true);
    expect(subscribers()).toBe(0);
    expect(clock.pending).toBe(0); // no timer left either
    const again = track(valve.run(() => 'again'));
    await flushMicrotasks();
    expect(again.value).toBe('again');
    expect(subscribers()).toBe(0);
    expect(clock.pending).toBe(0);
  });

  it('a failed release leaves the valve idle too', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = spyStore(inner, clock);
    const valve = createValve({
      id: 'idle3',
      clock,
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 3000 },
    });
    valve.on('store-error', () => {});
    store.timing.release = { delay: 5 };
    store.fail.release = new Error('release failed');
    await valve.run(() => 1);
    await flushMicrotasks();
    expect(count(store, 'release')).toBe(1);
    await clock.tickAsync(5);
    expect(valve.stats().storeErrors).toBe(1);
    expect(
      (inner as unknown as Record<symbol, () => { subscribers: number }>)[inspectMemoryStore]!().subscribers,
    ).toBe(0);
    expect(clock.pending).toBe(0);
  });

  it('a job that ends before it starts (cancelled, maxWait) leaves the valve idle too', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const subscribers = () =>
      (store as unknown as Record<symbol, () => { subscribers: number }>)[inspectMemoryStore]!().subscribers;
    const valve = createValve({ id: 'idle2', clock, store, rules: { limit: 1, interval: 1000 } });
    await valve.run(() => 1);
    const ac = new AbortController();
    const waiting = track(valve.run(() => 2, { signal: ac.signal }));
    const expiring = track(valve.run(() => 3, { maxWait: 100 }));
    await flushMicrotasks();
    expect(subscribers()).toBe(1);
    ac.abort(new Error('no'));
    await clock.tickAsync(100);
    expect(waiting.done && expiring.done).toBe(true);
    expect(subscribers()).toBe(0);
    expect(clock.pending).toBe(0);
  });
});
