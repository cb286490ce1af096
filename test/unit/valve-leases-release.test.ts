import { describe, expect, it, vi } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { inspectMemoryStore, memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';
import type { JobContext } from '../../src/valve.js';
import { createValve } from '../../src/valve.js';
import { count, spyStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

/** A valve under global concurrency over a spied memory store, all on one FakeClock. */
function globalValve(limit: number, leaseTtl = 3000) {
  const clock = new FakeClock();
  const inner = memoryStore({ clock });
  const store = spyStore(inner, clock);
  const concurrency = { limit, scope: 'global' as const, leaseTtl };
  const valve = createValve({ id: 'g', clock, store, concurrency });
  return { clock, inner, store, valve, concurrency };
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

function leasesHeld(store: Store): number {
  return (store as unknown as Record<symbol, () => { leases: number }>)[inspectMemoryStore]!().leases;
}

/** Takes every slot of id 'g' in the store for another process; returns their tokens. */
function takeSlots(inner: Store, n: number, ttl = 60_000): string[] {
  const costs = new Array<number>(n).fill(1);
  const r = inner.acquire({ id: 'g', rules: [], costs, count: n, lease: { limit: n, ttl } }) as AcquireResult;
  return r.leases!.map((lease) => lease.token);
}

describe('a lost lease is released when its job settles', () => {
  it('one failed renewal loses the lease; the settled job still releases its token, so the slot frees at once', async () => {
    const { clock, inner, store, valve, concurrency } = globalValve(1, 60_000);
    const h = holder();
    const job = track(valve.run(h.job));
    await flushMicrotasks();
    const token = h.contexts[0]!.lease!.token;
    // One renewal call fails (e.g. a single timeout): the lease is lost, though the store still holds it.
    store.fail.renew = new Error('renew timed out');
    valve.on('store-error', () => {});
    await clock.tickAsync(20_000);
    delete store.fail.renew;
    expect(isValveError(h.contexts[0]!.signal.reason, 'LEASE_LOST')).toBe(true);
    expect(leasesHeld(inner)).toBe(1);
    h.gates[0]!();
    await flushMicrotasks();
    expect(isValveError(job.error, 'LEASE_LOST')).toBe(true);
    // The settled job's token was released: the slot is free long before the TTL.
    const released = store.calls.filter((c) => c.op === 'release').flatMap((c) => c.args[1] as string[]);
    expect(released).toEqual([token]);
    expect(leasesHeld(inner)).toBe(0);
    const other = createValve({ id: 'g', clock, store: inner, concurrency });
    const next = track(other.run(() => 'next'));
    await clock.tickAsync(1);
    expect(next.value).toBe('next');
  });

  it("releasing a lost lease never frees another holder's slot", async () => {
    const { clock, inner, valve } = globalValve(1, 3000);
    const h = holder();
    track(valve.run(h.job));
    await flushMicrotasks();
    // The store lost the lease (e.g. state loss) and another process took the slot.
    inner.release('g', [h.contexts[0]!.lease!.token]);
    await clock.tickAsync(1000);
    expect(h.contexts[0]!.signal.aborted).toBe(true);
    const [theirs] = takeSlots(inner, 1);
    h.gates[0]!();
    await flushMicrotasks();
    expect(leasesHeld(inner)).toBe(1);
    const stillHeld = inner.renew('g', [theirs!], 60_000) as boolean[];
    expect(stillHeld).toEqual([true]);
  });
});

describe('a renewal answered after the lease expired locally', () => {
  it('a "held" that arrives after the conservative expiry, before the timer saw it, does not restore the lease', async () => {
    const { clock, store, valve } = globalValve(1, 3000);
    const lost = vi.fn();
    valve.on('lease-lost', lost);
    const h = holder();
    const job = track(valve.run(h.job));
    await flushMicrotasks();
    store.timing.renew = 'manual'; // decided (held) when sent, answered when the test says
    await clock.tickAsync(1000);
    expect(count(store, 'renew')).toBe(1);
    // The event loop was busy past the lease's expiry (sent at 0, ttl 3000): the answer "held"
    // is processed before the expiry timer runs.
    clock.jump(2500);
    store.pending.shift()!.resolve();
    await flushMicrotasks();
    const ctx = h.contexts[0]!;
    expect(ctx.signal.aborted).toBe(true);
    expect(isValveError(ctx.signal.reason, 'LEASE_LOST')).toBe(true);
    expect(lost).toHaveBeenCalledTimes(1);
    expect(lost.mock.calls[0]![0]).toMatchObject({ reason: 'expired' });
    // Later renewals do not carry it either.
    store.timing.renew = null;
    await clock.tickAsync(5000);
    expect(store.calls.filter((c) => c.op === 'renew').length).toBe(1);
    h.gates[0]!();
    await flushMicrotasks();
    expect(isValveError(job.error, 'LEASE_LOST')).toBe(true);
    expect(valve.stats().leasesLost).toBe(1);
  });

  it('a "held" that arrives before the expiry keeps the lease', async () => {
    const { clock, store, valve } = globalValve(1, 3000);
    const h = holder();
    const job = track(valve.run(h.job));
    await flushMicrotasks();
    store.timing.renew = 'manual';
    await clock.tickAsync(1000);
    clock.jump(1900); // at 2900, before the expiry at 3000
    store.pending.shift()!.resolve();
    await flushMicrotasks();
    store.timing.renew = null;
    await clock.tickAsync(500);
    expect(h.contexts[0]!.signal.aborted).toBe(false);
    h.gates[0]!();
    await flushMicrotasks();
    expect(job.value).toBe('done');
  });
});

describe('a release wake-up is not lost to a refusal decided before it', () => {
  it('a refusal on concurrency answered after a release asks again at once, not after the recheck delay', async () => {
    const { clock, inner, store, valve } = globalValve(1, 60_000);
    const [theirs] = takeSlots(inner, 1);
    store.timing.acquire = 'manual'; // decided when sent (refused: the slot is taken), answered later
    const job = track(valve.run(() => 'mine'));
    await flushMicrotasks();
    expect(store.pending.length).toBe(1);
    // The other process releases; its wake-up reaches this valve before the stale refusal.
    inner.release('g', [theirs!]);
    await flushMicrotasks();
    store.timing.acquire = null;
    store.pending.shift()!.resolve();
    await clock.tickAsync(1);
    expect(job.value).toBe('mine');
    expect(store.acquires.length).toBe(2);
    expect(store.acquires[1]!.at - store.acquires[0]!.at).toBeLessThan(1);
  });

  it("this valve's own release counts too (a store without wake-ups)", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const spy = spyStore(inner, clock);
    const store = { ...spy, subscribe: undefined, notifies: false } as typeof spy;
    const concurrency = { limit: 2, scope: 'global' as const, leaseTtl: 60_000 };
    const valve = createValve({ id: 'g', clock, store, concurrency });
    takeSlots(inner, 1); // another process holds one of the two slots
    const h = holder();
    track(valve.run(h.job));
    await flushMicrotasks();
    expect(h.contexts.length).toBe(1);
    spy.timing.acquire = 'manual';
    const second = track(valve.run(() => 'second'));
    await flushMicrotasks();
    expect(spy.pending.length).toBe(1); // refused when decided: both slots are taken
    h.gates[0]!(); // the first job settles: its release frees a slot
    await flushMicrotasks();
    expect(count(spy, 'release')).toBe(1);
    spy.timing.acquire = null;
    spy.pending.shift()!.resolve();
    await clock.tickAsync(1);
    expect(second.value).toBe('second');
  });
});

describe("an asynchronous store's hint counts from when the store decided", () => {
  it('the acquisition time is subtracted from the hint: the next call arrives at the slot, not a round trip late', async () => {
    const clock = new FakeClock();
    const store = spyStore(memoryStore({ clock }), clock);
    // A network store: decides 50 ms after the call, answers 100 ms after it.
    store.async = { delay: 100, decideAt: 50 };
    const valve = createValve({ id: 'r', clock, store, rules: { limit: 1, interval: 1000 } });
    const t0 = clock.now();
    const starts: number[] = [];
    const jobs = [1, 2].map(() => valve.run(() => starts.push(clock.now() - t0)));
    await clock.tickAsync(1500);
    await Promise.all(jobs);
    // #1 decided at +50 (the slot after it is +1050), answered +100 with #2's hint 1000 (from
    // +50). The next call is sent at 0 + 1000 and decided exactly at +1050.
    expect(store.acquires[0]).toMatchObject({ granted: 1, retryAfter: 1000 });
    expect(store.acquires[1]!.at - t0).toBe(1000);
    expect(store.acquires[1]!.decidedAt! - t0).toBe(1050);
    expect(starts).toEqual([100, 1100]);
    expect(store.acquires.length).toBe(2);
  });
});
