import { describe, expect, it, vi } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { createValveGroup } from '../../src/group.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { Store } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { count, spyMemoryStore, storeWith } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, setup, track } from './harness.js';

const down = new Error('store down');

for (const style of ['sync throw', 'async reject'] as const) {
  describe(`store failures (${style})`, () => {
    const make = (options: Parameters<typeof setup>[0]) => {
      const s = setup(options);
      if (style === 'async reject') s.store.async = { delay: 0 };
      return s;
    };

    it("'wait' (default): emits store-error, keeps jobs queued, retries with growing backoff, then runs them", async () => {
      const { valve, clock, store } = make({ rules: { limit: 10, interval: '1s' } });
      const errors: unknown[][] = [];
      valve.on('store-error', (...args) => errors.push(args));
      store.fail.acquire = down;
      const job = track(valve.run(() => 'ok'));
      await clock.tickAsync(3000);
      expect(job.done).toBe(false);
      expect(errors[0]).toEqual([down, { operation: 'acquire', id: 'test', action: 'wait' }]);
      const times = store.acquires.map((a) => a.at - store.acquires[0]!.at);
      // 100, 200, 400, 800, 1600 ms backoff with jitter in [50%, 100%]
      const gaps = times.slice(1).map((t, i) => t - times[i]!);
      expect(gaps.length).toBeGreaterThanOrEqual(4);
      for (let i = 0; i < gaps.length; i++) {
        const base = Math.min(100 * 2 ** i, 5000);
        expect(gaps[i]).toBeGreaterThanOrEqual(base / 2);
        expect(gaps[i]).toBeLessThanOrEqual(base + 1);
      }
      expect(valve.stats()).toMatchObject({ queued: 1, storeErrors: errors.length });
      store.fail.acquire = undefined;
      await clock.tickAsync(5000);
      expect(job.value).toBe('ok');
    });

    it("'wait': backoff stops growing at 5s", async () => {
      const { valve, clock, store } = make({});
      valve.on('store-error', () => {});
      store.fail.acquire = down;
      track(valve.run(() => 1));
      await clock.tickAsync(120_000);
      const times = store.acquires.map((a) => a.at);
      const gaps = times.slice(1).map((t, i) => t - times[i]!);
      expect(Math.max(...gaps)).toBeLessThanOrEqual(5001);
      expect(gaps.slice(-5).every((g) => g >= 2500)).toBe(true);
    });

    it("'wait': a job past its maxWait rejects STORE_UNAVAILABLE with the store's error as cause", async () => {
      const { valve, clock, store } = make({ maxWait: 1000 });
      store.fail.acquire = down;
      const job = track(valve.run(() => 1));
      await clock.tickAsync(999);
      expect(job.done).toBe(false);
      await clock.tickAsync(1);
      expect(isValveError(job.error, 'STORE_UNAVAILABLE')).toBe(true);
      expect((job.error as Error).cause).toBe(down);
      expect(valve.stats().rejected).toBe(1);
    });

    it("'throw': the batch and every queued job reject STORE_UNAVAILABLE; later jobs try the store again", async () => {
      const { valve, clock, store } = make({ onStoreError: 'throw', batch: 2 });
      const errors = vi.fn();
      valve.on('store-error', errors);
      store.fail.acquire = down;
      const jobs = [1, 2, 3, 4, 5].map((i) => track(valve.run(() => i)));
      await clock.tickAsync(0);
      for (const job of jobs) {
        expect(isValveError(job.error, 'STORE_UNAVAILABLE')).toBe(true);
        expect((job.error as Error).cause).toBe(down);
      }
      expect(count(store, 'acquire')).toBe(1);
      expect(errors).toHaveBeenCalledWith(down, { operation: 'acquire', id: 'test', action: 'throw' });
      store.fail.acquire = undefined;
      const later = track(valve.run(() => 'later'));
      await clock.tickAsync(0);
      expect(later.value).toBe('later');
    });

    it("'open': starts jobs without the store while it fails (local concurrency still holds)", async () => {
      const { valve, clock, store } = make({
        onStoreError: 'open',
        concurrency: 2,
        rules: { limit: 1, interval: '1h' },
      });
      valve.on('store-error', () => {});
      store.fail.acquire = down;
      let running = 0;
      let peak = 0;
      const jobs = Array.from({ length: 6 }, (_, i) =>
        track(
          valve.run(async () => {
            running++;
            peak = Math.max(peak, running);
            await new Promise<void>((r) => clock.setTimeout(r, 10));
            running--;
            return i;
          }),
        ),
      );
      await clock.tickAsync(100);
      expect(jobs.map((j) => j.value)).toEqual([0, 1, 2, 3, 4, 5]);
      expect(peak).toBe(2);
      // The store is probed again after its backoff, not on every batch.
      expect(count(store, 'acquire')).toBeLessThan(4);
    });

    it('a failed pause() rejects STORE_UNAVAILABLE and emits store-error; a failed resume() too', async () => {
      const { valve, store } = make({});
      const errors: unknown[] = [];
      valve.on('store-error', (_err, ctx) => errors.push(ctx.operation));
      store.fail.pause = down;
      store.fail.resume = down;
      const p = await valve.pause(1000).catch((e: unknown) => e);
      expect(isValveError(p, 'STORE_UNAVAILABLE')).toBe(true);
      expect((p as Error).cause).toBe(down);
      const r = await valve.resume().catch((e: unknown) => e);
      expect(isValveError(r, 'STORE_UNAVAILABLE')).toBe(true);
      expect(errors).toEqual(['pause', 'resume']);
    });
  });
}

describe("onStoreError 'open' and a known pause", () => {
  it('the jobs of a call that fails during a pause applied while it travelled wait for the pause', async () => {
    // They started at once (0 ms into a 60 s pause the valve knew of), unlike queued jobs.
    const { valve, clock, store } = setup({ onStoreError: 'open' });
    valve.on('store-error', () => {});
    store.timing.acquire = 'manual';
    const t0 = clock.now();
    const job = track(valve.run(() => clock.now() - t0));
    await flushMicrotasks();
    expect(store.pending.length).toBe(1);
    await valve.pause(60_000); // recorded by the store
    store.pending.shift()!.reject(down);
    store.timing.acquire = null;
    await flushMicrotasks();
    expect(job.done).toBe(false);
    await clock.tickAsync(59_999);
    expect(job.done).toBe(false);
    await clock.tickAsync(1);
    expect(job.value).toBe(60_000);
  });

  it('a pause learnt before the store went down holds them to its end, with wake-ups unconfirmed (polling)', async () => {
    // The store is asked again during the pause (every PAUSE_RECHECK while polling), and each
    // failure opens the store-less window: no job starts open inside the known pause.
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    let failing = false;
    let calls = 0;
    const store = storeWith(inner, {
      acquire: (r) => {
        calls++;
        if (failing) throw down;
        return inner.acquire(r);
      },
      // Held but never confirmed (a subscriber that lost its connection): the valve polls.
      subscribe: (_id, _onWake, onStatus) => {
        queueMicrotask(() => onStatus?.({ listening: false }));
        return () => {};
      },
    });
    const valve = createValve({ id: 'o', clock, store, onStoreError: 'open' });
    valve.on('store-error', () => {});
    await createValve({ id: 'o', clock, store: inner }).pause(120_000);
    const t0 = clock.now();
    const job = track(valve.run(() => clock.now() - t0));
    await clock.tickAsync(10);
    expect(valve.stats().pausedUntil).toBe(t0 + 120_000);
    failing = true;
    await clock.tickAsync(119_989);
    expect(job.done).toBe(false);
    // Still asked during the pause, with the open window as its backoff (up to 5 s).
    expect(calls).toBeGreaterThan(20);
    expect(calls).toBeLessThan(40);
    // The pause ends while the store is still down: the job starts open then, no later.
    await clock.tickAsync(1);
    expect(job.value).toBe(120_000);
  });

  it('with no pause known they still start open at once', async () => {
    const { valve, clock, store } = setup({ onStoreError: 'open' });
    valve.on('store-error', () => {});
    store.timing.acquire = 'manual';
    const t0 = clock.now();
    const job = track(valve.run(() => clock.now() - t0));
    await flushMicrotasks();
    store.pending.shift()!.reject(down);
    await flushMicrotasks();
    expect(job.value).toBe(0);
  });
});

describe('store answers', () => {
  it('an invalid acquire answer is treated as a store failure', async () => {
    const clock = new FakeClock();
    const store = spyMemoryStore(clock, { acquire: () => 'nonsense' as never });
    const valve = createValve({ id: 'bad', clock, store, maxWait: 500 });
    const errors = vi.fn();
    valve.on('store-error', errors);
    const job = track(valve.run(() => 1));
    await clock.tickAsync(500);
    expect(errors).toHaveBeenCalled();
    expect(errors.mock.calls[0]![0]).toBeInstanceOf(TypeError);
    expect(isValveError(job.error, 'STORE_UNAVAILABLE')).toBe(true);
  });

  it('a store that never answers does not stop maxWait (the in-flight job rejects MAX_WAIT)', async () => {
    const clock = new FakeClock();
    const store = spyMemoryStore(clock);
    store.timing.acquire = 'manual'; // never answered
    const valve = createValve({ id: 'hang', clock, store, maxWait: 500 });
    const job = track(valve.run(() => 1));
    await clock.tickAsync(500);
    expect(isValveError(job.error, 'MAX_WAIT')).toBe(true);
  });

  it('subtracts the acquisition time of an async store from the retry hint', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 1, interval: 1000 } });
    store.async = { delay: 100 };
    const t0 = clock.now();
    const starts: number[] = [];
    const jobs = [1, 2].map(() => valve.run(() => starts.push(clock.now() - t0)));
    await clock.tickAsync(1300);
    await Promise.all(jobs);
    // #1 granted when the answer is sent (+100); #2 refused there with hint 1000. Counted from the
    // send time (t0), the next call goes at +1000, is decided at +1100 (the slot) and starts.
    expect(starts[0]).toBe(100);
    expect(starts[1]).toBe(1100); // 1200 if the hint counted from the answer
  });
});

describe('store-error arguments', () => {
  it('a store that fails with undefined still passes the context (valve and group listeners)', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    let fail = true;
    const store: Store = {
      acquire: (r) => (fail ? Promise.reject(undefined) : inner.acquire(r)),
      pause: (id, ms, by) => inner.pause(id, ms, by),
      resume: (id) => inner.resume(id),
      renew: (id, t, ttl) => inner.renew(id, t, ttl),
      release: (id, t) => inner.release(id, t),
    };
    const valve = createValve({ id: 'u', clock, store });
    const args: unknown[][] = [];
    valve.on('store-error', (...a) => args.push(a));
    const job = track(valve.run(() => 'ok'));
    await clock.tickAsync(0);
    expect(args[0]).toEqual([undefined, { operation: 'acquire', id: 'u', action: 'wait' }]);
    fail = false;
    await clock.tickAsync(1000);
    expect(job.value).toBe('ok');

    fail = true;
    const group = createValveGroup({ clock, store });
    const groupArgs: unknown[][] = [];
    group.on('store-error', (...a) => groupArgs.push(a));
    const g = track(group.run('k', () => 'g'));
    await clock.tickAsync(0);
    expect(groupArgs[0]).toEqual([undefined, { operation: 'acquire', id: 'k', action: 'wait' }, 'k']);
    fail = false;
    await clock.tickAsync(1000);
    expect(g.value).toBe('g');
    await Promise.all([valve.close(), group.close()]);
  });
});
