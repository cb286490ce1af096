import { describe, expect, it, vi } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';
import type { JobContext } from '../../src/valve.js';
import { createValve } from '../../src/valve.js';
import { count, spyStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

function twoValves(limit: number, leaseTtl = 3000) {
  const clock = new FakeClock();
  const inner = memoryStore({ clock });
  const store = spyStore(inner, clock);
  const concurrency = { limit, scope: 'global' as const, leaseTtl };
  const a = createValve({ id: 'g', clock, store, concurrency });
  const b = createValve({ id: 'g', clock, store, concurrency });
  return { clock, inner, store, a, b };
}

/** A job that holds until released, recording its context. */
function holder() {
  const contexts: JobContext[] = [];
  const gates: (() => void)[] = [];
  const job = (ctx: JobContext) => {
    contexts.push(ctx);
    return new Promise<string>((resolve) => gates.push(() => resolve('done')));
  };
  return { contexts, gates, job };
}

describe('global concurrency', () => {
  it('limits running jobs across valves sharing the id; ctx.lease carries a growing fence', async () => {
    const { clock, a, b, store } = twoValves(2);
    const h = holder();
    const jobs = [a, b, a, b, a].map((v) => track(v.run(h.job)));
    await flushMicrotasks();
    expect(h.contexts.length).toBe(2);
    expect(a.stats().running + b.stats().running).toBe(2);
    const firstAcquire = store.calls.find((c) => c.op === 'acquire')!.args[0] as { lease: unknown };
    expect(firstAcquire.lease).toEqual({ limit: 2, ttl: 3000 });
    h.gates.shift()!();
    await flushMicrotasks();
    // The release wakes the waiters (memory store notifies) without waiting for a poll.
    expect(h.contexts.length).toBe(3);
    for (let i = 0; i < 10 && h.gates.length; i++) {
      h.gates.shift()!();
      await clock.tickAsync(0);
    }
    expect(jobs.every((j) => j.value === 'done')).toBe(true);
    const fences = h.contexts.map((c) => c.lease!.fence);
    expect(fences).toEqual([...fences].sort((x, y) => x - y));
    expect(new Set(fences).size).toBe(fences.length);
    expect(new Set(h.contexts.map((c) => c.lease!.token)).size).toBe(fences.length);
  });

  it('renews all running leases of the valve in one store call every leaseTtl/3', async () => {
    const { clock, a, store } = twoValves(5, 3000);
    const h = holder();
    const jobs = [1, 2, 3].map(() => track(a.run(h.job)));
    await flushMicrotasks();
    expect(h.contexts.length).toBe(3);
    await clock.tickAsync(1000);
    const renews = store.calls.filter((c) => c.op === 'renew');
    expect(renews.length).toBe(1);
    expect((renews[0]!.args[1] as string[]).length).toBe(3);
    expect(renews[0]!.args[2]).toBe(3000);
    await clock.tickAsync(9000);
    expect(count(store, 'renew')).toBe(10);
    expect(h.contexts.every((c) => !c.signal.aborted)).toBe(true);
    for (const g of h.gates) g();
    await flushMicrotasks();
    expect(jobs.every((j) => j.value === 'done')).toBe(true);
    // Releases of the same tick go in one call.
    const releases = store.calls.filter((c) => c.op === 'release');
    expect(releases.length).toBe(1);
    expect((releases[0]!.args[1] as string[]).length).toBe(3);
    await clock.tickAsync(5000);
    expect(count(store, 'renew')).toBe(10);
    expect(clock.pending).toBe(0);
  });

  it('a lease the store no longer holds is lost: ctx.signal aborts LEASE_LOST, lease-lost is emitted, the job rejects LEASE_LOST even if it resolves', async () => {
    const { clock, a, inner } = twoValves(2, 3000);
    const lost = vi.fn();
    a.on('lease-lost', lost);
    const h = holder();
    const job = track(a.run(h.job));
    await flushMicrotasks();
    const ctx = h.contexts[0]!;
    // Someone else removed it (e.g. state loss).
    inner.release('g', [ctx.lease!.token]);
    await clock.tickAsync(1000);
    expect(ctx.signal.aborted).toBe(true);
    expect(isValveError(ctx.signal.reason, 'LEASE_LOST')).toBe(true);
    expect(lost).toHaveBeenCalledWith({
      token: ctx.lease!.token,
      fence: ctx.lease!.fence,
      reason: 'not-held',
    });
    expect(job.done).toBe(false);
    h.gates[0]!();
    await flushMicrotasks();
    expect(isValveError(job.error, 'LEASE_LOST')).toBe(true);
    expect(a.stats()).toMatchObject({ leasesLost: 1, failed: 1 });
  });

  it('a failed renewal loses the leases at once (and reports store-error); a late answer does not restore them', async () => {
    const { clock, a, store } = twoValves(2, 3000);
    const errors = vi.fn();
    a.on('store-error', errors);
    const h = holder();
    const job = track(a.run(h.job));
    await flushMicrotasks();
    store.fail.renew = new Error('renew down');
    await clock.tickAsync(1000);
    expect(errors).toHaveBeenCalledWith(store.fail.renew, {
      operation: 'renew',
      id: 'g',
      action: 'lease-lost',
    });
    expect(h.contexts[0]!.signal.aborted).toBe(true);
    h.gates[0]!();
    await flushMicrotasks();
    expect(isValveError(job.error, 'LEASE_LOST')).toBe(true);
    expect((job.error as Error).cause).toBe(store.fail.renew);
  });

  it('a renewal that does not answer before the lease expires loses it; its late answer is ignored', async () => {
    const { clock, a, store } = twoValves(2, 3000);
    const h = holder();
    const job = track(a.run(h.job));
    await flushMicrotasks();
    store.async = { delay: 5000 }; // the renewal answers long after expiry
    await clock.tickAsync(1000);
    expect(count(store, 'renew')).toBe(1);
    expect(h.contexts[0]!.signal.aborted).toBe(false);
    await clock.tickAsync(2000);
    expect(h.contexts[0]!.signal.aborted).toBe(true);
    expect((h.contexts[0]!.signal.reason as Error).message).toMatch(/expired/);
    await clock.tickAsync(5000);
    h.gates[0]!();
    await flushMicrotasks();
    expect(isValveError(job.error, 'LEASE_LOST')).toBe(true);
  });

  it('an event loop stalled past the TTL loses the lease (the store does not resurrect it)', async () => {
    const { clock, a } = twoValves(2, 3000);
    const h = holder();
    const job = track(a.run(h.job));
    await flushMicrotasks();
    clock.jump(4000);
    await clock.tickAsync(0);
    expect(h.contexts[0]!.signal.aborted).toBe(true);
    h.gates[0]!();
    await flushMicrotasks();
    expect(isValveError(job.error, 'LEASE_LOST')).toBe(true);
  });

  it('a job aborted while its acquisition is in flight never runs and its lease is released at once', async () => {
    const { clock, a, store } = twoValves(1, 3000);
    store.async = { delay: 10 };
    const ac = new AbortController();
    const job = vi.fn();
    const p = track(a.run(job, { signal: ac.signal }));
    await flushMicrotasks();
    ac.abort('no');
    await clock.tickAsync(10);
    await clock.tickAsync(10);
    expect(job).not.toHaveBeenCalled();
    expect(p.error).toBe('no');
    const releases = store.calls.filter((c) => c.op === 'release');
    expect(releases.length).toBe(1);
    store.async = null;
    const next = track(a.run(() => 'next'));
    await clock.tickAsync(0);
    expect(next.value).toBe('next');
  });

  it('polls while blocked on concurrency without a subscriber, at most every 50ms plus jitter', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const spy = spyStore(inner, clock);
    const store = { ...spy, subscribe: undefined, notifies: false } as typeof spy;
    const a = createValve({
      id: 'g',
      clock,
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 60_000 },
    });
    // Another process holds the only slot.
    const other = inner.acquire({
      id: 'g',
      rules: [],
      costs: [1],
      count: 1,
      lease: { limit: 1, ttl: 60_000 },
    });
    const job = track(a.run(() => 'mine'));
    await clock.tickAsync(1000);
    const times = spy.acquires.map((x) => x.at);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    expect(gaps.length).toBeGreaterThanOrEqual(12);
    for (const g of gaps) {
      expect(g).toBeGreaterThanOrEqual(50);
      expect(g).toBeLessThanOrEqual(76);
    }
    inner.release('g', [(other as AcquireResult).leases![0]!.token]);
    await clock.tickAsync(100);
    expect(job.value).toBe('mine');
  });

  it('with a subscriber, a blocked waiter rechecks at least once a second', async () => {
    const { clock, inner, store, a } = twoValves(1, 60_000);
    inner.acquire({ id: 'g', rules: [], costs: [1], count: 1, lease: { limit: 1, ttl: 60_000 } });
    track(a.run(() => 1));
    await clock.tickAsync(5000);
    const times = store.acquires.map((x) => x.at);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    expect(gaps.length).toBeGreaterThanOrEqual(4);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(1000);
    await a.close();
  });

  it('close() releases held leases once their jobs settle', async () => {
    const { clock, a, store } = twoValves(3, 3000);
    const h = holder();
    const jobs = [1, 2].map(() => track(a.run(h.job)));
    await flushMicrotasks();
    const closed = track(a.close());
    await flushMicrotasks();
    expect(h.contexts.every((c) => isValveError(c.signal.reason, 'CLOSED'))).toBe(true);
    expect(closed.done).toBe(false);
    for (const g of h.gates) g();
    await clock.tickAsync(0);
    expect(closed.done).toBe(true);
    expect(jobs.every((j) => j.value === 'done')).toBe(true);
    const released = store.calls.filter((c) => c.op === 'release').flatMap((c) => c.args[1] as string[]);
    expect(released.sort()).toEqual(h.contexts.map((c) => c.lease!.token).sort());
  });
});

describe('global concurrency: a custom store that misbehaves', () => {
  /** A valve over a memory store whose renew or release a test replaces. */
  function overStore(over: Partial<Store>, leaseTtl = 3000) {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store: Store = {
      acquire: (r) => inner.acquire(r),
      pause: (id, ms, by) => inner.pause(id, ms, by),
      resume: (id) => inner.resume(id),
      renew: (id, t, ttl) => inner.renew(id, t, ttl),
      release: (id, t) => inner.release(id, t),
      ...over,
    };
    const errors: unknown[][] = [];
    const valve = createValve({
      id: 'g',
      clock,
      store,
      concurrency: { limit: 5, scope: 'global', leaseTtl },
    });
    valve.on('store-error', (...args) => errors.push(args));
    return { clock, inner, valve, errors };
  }
  const throwingThen = (err: Error) => ({
    // biome-ignore lint/suspicious/noThenProperty: a hostile thenable on purpose
    then() {
      throw err;
    },
  });

  it('a renewal that never answers is given up after a TTL: leases taken since are renewed, not lost', async () => {
    let hang = true;
    const { clock, inner, valve } = overStore({
      renew: (id, t, ttl) => (hang ? new Promise<boolean[]>(() => {}) : inner.renew(id, t, ttl)),
    });
    const lost: unknown[] = [];
    valve.on('lease-lost', (e) => lost.push(e));
    const first = holder();
    const a = track(valve.run(first.job));
    await clock.tickAsync(1000); // the renewal is sent, and never answers
    await clock.tickAsync(2000); // the lease expires
    expect(lost).toHaveLength(1);
    first.gates[0]!();
    await flushMicrotasks();
    expect(isValveError(a.error, 'LEASE_LOST')).toBe(true);
    hang = false;
    const second = holder();
    const b = track(valve.run(second.job));
    await clock.tickAsync(10_000); // three TTLs: renewed all along
    expect(lost).toHaveLength(1);
    expect(second.contexts[0]!.signal.aborted).toBe(false);
    second.gates[0]!();
    await flushMicrotasks();
    expect(b.value).toBe('done');
    await valve.close();
  });

  it('a renew() or release() whose thenable throws is a store error, never an uncaught exception', async () => {
    const renewBoom = new Error('renew then');
    const releaseBoom = new Error('release then');
    const { clock, valve, errors } = overStore({
      renew: () => throwingThen(renewBoom) as never,
      release: () => throwingThen(releaseBoom) as never,
    });
    const uncaught = vi.fn();
    process.on('uncaughtException', uncaught);
    try {
      const h = holder();
      const job = track(valve.run(h.job));
      await clock.tickAsync(1000);
      expect(h.contexts[0]!.signal.aborted).toBe(true);
      h.gates[0]!();
      await clock.tickAsync(0);
      expect(isValveError(job.error, 'LEASE_LOST')).toBe(true);
      const closed = track(valve.close());
      await clock.tickAsync(0);
      expect(closed.done).toBe(true);
      expect(errors.map(([err, ctx]) => [err, (ctx as { operation: string }).operation])).toEqual([
        [renewBoom, 'renew'],
        [releaseBoom, 'release'],
      ]);
      expect(uncaught).not.toHaveBeenCalled();
    } finally {
      process.off('uncaughtException', uncaught);
    }
  });
});
