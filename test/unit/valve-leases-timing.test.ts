import { describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { JobContext } from '../../src/valve.js';
import { createValve } from '../../src/valve.js';
import { spyStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

/*
 * When a lease counts from: its local expiry is the acquisition's send time + leaseTtl, so a
 * grant answered late is already (partly) spent. A job never starts on a lease already expired
 * as this process sees it (it goes back to the queue and asks again), and the first renewal
 * is timed from the send, not from the job's start.
 */

const T0 = 1_700_000_000_000;

/**
 * Valve A over a spied memory store whose acquisitions answer only when the test says so, and
 * valve B (another process) on the same memory store, answering at once; global limit 1.
 */
function lateGrant(leaseTtl = 1000, rules?: { limit: number; interval: number }) {
  const clock = new FakeClock(T0);
  const inner = memoryStore({ clock });
  const store = spyStore(inner, clock);
  store.timing.acquire = 'manual';
  const concurrency = { limit: 1, scope: 'global' as const, leaseTtl };
  const a = createValve({ id: 'g', clock, store, concurrency, ...(rules ? { rules } : {}) });
  const b = createValve({ id: 'g', clock, store: inner, concurrency, ...(rules ? { rules } : {}) });
  const lost = vi.fn();
  a.on('lease-lost', lost);
  return { clock, inner, store, a, b, lost };
}

/** A job that holds until released, recording its context and when it started. */
function holder(clock: FakeClock) {
  const contexts: JobContext[] = [];
  const startedAt: number[] = [];
  const gates: (() => void)[] = [];
  const job = (ctx: JobContext) => {
    contexts.push(ctx);
    startedAt.push(clock.now() - T0);
    return new Promise<string>((resolve) => gates.push(() => resolve('done')));
  };
  return { contexts, startedAt, gates, job };
}

function released(store: ReturnType<typeof spyStore>): string[] {
  return store.calls.filter((c) => c.op === 'release').flatMap((c) => c.args[1] as string[]);
}

describe('a grant answered after its lease expired locally', () => {
  it('does not start its job while another process holds the slot; the job asks again and runs once the slot is free', async () => {
    const { clock, store, a, b, lost } = lateGrant();
    const ha = holder(clock);
    const hb = holder(clock);
    const ja = track(a.run(ha.job));
    await flushMicrotasks();
    expect(store.pending.length).toBe(1); // decided on the store at t=0: the lease ends at t=1000
    await clock.tickAsync(1200);
    // The store dropped A's expired lease: B takes the only slot.
    const jb = track(b.run(hb.job));
    await flushMicrotasks();
    expect(hb.contexts.length).toBe(1);
    store.timing.acquire = null; // the next acquisitions answer at once
    store.pending.shift()!.resolve(); // A's grant arrives 200 ms after its lease expired
    await flushMicrotasks();
    expect(ha.contexts.length).toBe(0); // not started on the reassigned slot
    expect(a.stats()).toMatchObject({ started: 0, running: 0, queued: 1, leasesLost: 0 });
    expect(lost).not.toHaveBeenCalled(); // no running job lost anything
    expect(released(store).length).toBe(1); // the dead lease's token is released
    expect(ja.done).toBe(false);
    // B finishes: A's job, back in the queue, asks again and starts on a fresh lease.
    hb.gates[0]!();
    await clock.tickAsync(100);
    expect(jb.value).toBe('done');
    expect(ha.contexts.length).toBe(1);
    expect(ha.contexts[0]!.signal.aborted).toBe(false);
    expect(ha.contexts[0]!.lease!.fence).toBeGreaterThan(hb.contexts[0]!.lease!.fence);
    ha.gates[0]!();
    await flushMicrotasks();
    expect(ja.value).toBe('done');
    expect(a.stats()).toMatchObject({ started: 1, succeeded: 1, failed: 0, leasesLost: 0 });
  });

  it('a synchronous job is not called on the expired lease either', async () => {
    const { clock, store, a, b, lost } = lateGrant();
    let bRunning = false;
    const ranWhileB: boolean[] = [];
    const ja = track(
      a.run(() => {
        ranWhileB.push(bRunning);
        return 'A';
      }),
    );
    await flushMicrotasks();
    await clock.tickAsync(1200);
    const jb = track(
      b.run(async () => {
        bRunning = true;
        await new Promise<void>((r) => clock.setTimeout(r, 2000));
        bRunning = false;
      }),
    );
    await flushMicrotasks();
    store.timing.acquire = null;
    store.pending.shift()!.resolve();
    await flushMicrotasks();
    expect(ranWhileB).toEqual([]);
    expect(lost).not.toHaveBeenCalled();
    await clock.tickAsync(2500);
    expect(jb.done).toBe(true);
    expect(ranWhileB).toEqual([false]);
    expect(ja.value).toBe('A');
  });

  it('the spent grant is not reused: the job waits for new rate budget', async () => {
    const { clock, store, a } = lateGrant(1000, { limit: 1, interval: 10_000 });
    const ha = holder(clock);
    track(a.run(ha.job));
    await flushMicrotasks();
    await clock.tickAsync(1200);
    store.timing.acquire = null;
    store.pending.shift()!.resolve();
    await flushMicrotasks();
    expect(ha.contexts.length).toBe(0);
    // The first grant spent the rule's one unit for 10 s: the job asks again and waits for it.
    await clock.tickAsync(8700);
    expect(ha.contexts.length).toBe(0);
    await clock.tickAsync(200);
    expect(ha.startedAt).toEqual([10_000]);
    ha.gates[0]!();
    await flushMicrotasks();
  });

  it('the requeued job keeps its place ahead of jobs queued after it', async () => {
    const { clock, store, a } = lateGrant();
    const order: string[] = [];
    const job = (name: string) => () => {
      order.push(name);
      return name;
    };
    const j1 = track(a.run(job('first'), { priority: 0 }));
    await flushMicrotasks();
    expect(store.pending.length).toBe(1);
    const j2 = track(a.run(job('second'), { priority: 0 }));
    await flushMicrotasks();
    await clock.tickAsync(1200);
    store.timing.acquire = null;
    store.pending.shift()!.resolve();
    await clock.tickAsync(100);
    expect(order).toEqual(['first', 'second']);
    // The late grant started nothing: 'first' ran on a second acquisition, 'second' on a third.
    expect(store.acquires.filter((c) => c.granted === 1).length).toBe(3);
    expect(j1.value).toBe('first');
    expect(j2.value).toBe('second');
  });

  it('a job of a batch whose lease expired while an earlier job of the batch ran synchronously does not start on it', async () => {
    const clock = new FakeClock(T0);
    const store = spyStore(memoryStore({ clock }), clock);
    store.timing.acquire = 'manual';
    const a = createValve({
      id: 'g',
      clock,
      store,
      concurrency: { limit: 2, scope: 'global', leaseTtl: 1000 },
    });
    const ctxs: JobContext[] = [];
    const j1 = track(
      a.run(() => {
        clock.jump(1100); // a long synchronous job: the event loop is blocked past the TTL
        return 'one';
      }),
    );
    const h2 = holder(clock);
    const j2 = track(
      a.run((ctx) => {
        ctxs.push(ctx);
        return h2.job(ctx);
      }),
    );
    await flushMicrotasks();
    expect(store.pending.map((p) => p.count)).toEqual([2]);
    store.pending.shift()!.resolve(); // answered in time, at t=0
    await flushMicrotasks();
    // Job one ran to its end past its own lease's expiry: it rejects LEASE_LOST (see below).
    expect(j1.error).toMatchObject({ code: 'LEASE_LOST' });
    // The second grant's lease expired (t=1100) before its job's turn: it asks again.
    expect(ctxs.length).toBe(0);
    expect(released(store).length).toBe(2); // job one's lease, and the dead one
    expect(store.pending.length).toBe(1);
    store.pending.shift()!.resolve();
    await flushMicrotasks();
    expect(ctxs.length).toBe(1);
    expect(ctxs[0]!.signal.aborted).toBe(false);
    h2.gates[0]!();
    await flushMicrotasks();
    expect(j2.value).toBe('done');
  });
});

describe('the first renewal counts from the acquisition', () => {
  it('after an acquisition answered late, the lease is renewed at once, not leaseTtl / 3 after the start', async () => {
    const clock = new FakeClock(T0);
    const store = spyStore(memoryStore({ clock }), clock);
    store.timing.acquire = { delay: 600 };
    store.timing.renew = { delay: 100 };
    const a = createValve({
      id: 'g',
      clock,
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 1000 },
    });
    const lost = vi.fn();
    a.on('lease-lost', lost);
    const renewSent: number[] = [];
    const renew = store.renew.bind(store);
    store.renew = (id, tokens, ttl) => {
      renewSent.push(clock.now() - T0);
      return renew(id, tokens, ttl);
    };
    const h = holder(clock);
    const job = track(a.run(h.job));
    for (let i = 0; i < 60; i++) await clock.tickAsync(50);
    expect(h.startedAt).toEqual([600]);
    // Sent at 0, the lease is known held until 1000: its first renewal is due at 333, so it goes at once.
    expect(renewSent[0]).toBe(600);
    expect(lost).not.toHaveBeenCalled();
    expect(h.contexts[0]!.signal.aborted).toBe(false);
    h.gates[0]!();
    await flushMicrotasks();
    expect(job.value).toBe('done');
  });

  it('a lease granted while a renewal is in flight (which does not carry it) is renewed in time', async () => {
    const clock = new FakeClock(T0);
    const store = spyStore(memoryStore({ clock }), clock);
    store.timing.renew = { delay: 500 };
    const a = createValve({
      id: 'g',
      clock,
      store,
      concurrency: { limit: 2, scope: 'global', leaseTtl: 3000 },
    });
    const lost = vi.fn();
    a.on('lease-lost', lost);
    const h = holder(clock);
    const x = track(a.run(h.job)); // starts at 0, renewed at 1000 (answered 1500), 2000 (answered 2500)…
    await flushMicrotasks();
    await clock.tickAsync(300);
    store.timing.acquire = { delay: 1800 };
    const y = track(a.run(h.job)); // sent at 300 (known held until 3300), answered at 2100
    for (let i = 0; i < 80; i++) await clock.tickAsync(50);
    expect(h.startedAt).toEqual([0, 2100]);
    // Without its own schedule, Y would wait for the renewal at 3000, answered at 3500.
    expect(lost).not.toHaveBeenCalled();
    expect(h.contexts.every((c) => !c.signal.aborted)).toBe(true);
    for (const g of h.gates) g();
    await flushMicrotasks();
    expect(x.value).toBe('done');
    expect(y.value).toBe('done');
  });
});

describe('grants that keep coming too late', () => {
  // A store that answers later than leaseTtl used to make the job ask again forever: every
  // grant outlived, its lease released and the job requeued, spending rate budget, silently.

  function slowStore(ttl = 1000) {
    const clock = new FakeClock(T0);
    const store = spyStore(memoryStore({ clock }), clock);
    store.timing.acquire = { delay: ttl + 100 };
    const a = createValve({
      id: 'slow',
      clock,
      store,
      rules: { limit: 10, interval: '1s' },
      concurrency: { limit: 1, scope: 'global', leaseTtl: ttl },
    });
    const lost = vi.fn();
    a.on('lease-lost', lost);
    return { clock, store, a, lost };
  }

  it('after 3 outlived grants in a row the job rejects LEASE_LOST, naming leaseTtl; it never ran', async () => {
    const { clock, store, a, lost } = slowStore();
    const ran = vi.fn();
    const job = track(a.run(ran));
    await clock.tickAsync(60_000);
    expect(job.done).toBe(true);
    expect(job.error).toMatchObject({ code: 'LEASE_LOST' });
    expect((job.error as Error).message).toMatch(/later than leaseTtl \(1000 ms/);
    expect((job.error as Error).message).toMatch(/Raise leaseTtl/);
    expect(ran).not.toHaveBeenCalled();
    expect(store.acquires.reduce((n, c) => n + (c.granted ?? 0), 0)).toBe(3);
    expect(released(store).length).toBe(3);
    // The job never ran: no 'lease-lost' (a running job's lease), counted as rejected.
    expect(lost).not.toHaveBeenCalled();
    expect(a.stats()).toMatchObject({ rejected: 1, started: 0, failed: 0 });
    // Each job counts its own grants: with a store answering in time, the next one runs.
    store.timing.acquire = null;
    const next = track(a.run(() => 'ran'));
    await clock.tickAsync(10);
    expect(next.value).toBe('ran');
  });

  it('fewer outlived grants: the job still runs on the next grant that comes in time', async () => {
    const { clock, store, a, lost } = slowStore();
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(1100); // the first grant came too late: asked again at once
    await clock.tickAsync(500);
    store.timing.acquire = { delay: 10 }; // the second comes too late too, the third in time
    await clock.tickAsync(1000);
    expect(job.value).toBe('ran');
    expect(store.acquires.reduce((n, c) => n + (c.granted ?? 0), 0)).toBe(3);
    expect(lost).not.toHaveBeenCalled();
  });
});

describe('a lease that expires while its job runs to its end', () => {
  /** Valve A on a memory store, global limit 1, leaseTtl 3 s. */
  function leased() {
    const clock = new FakeClock(T0);
    const store = memoryStore({ clock });
    const a = createValve({
      id: 'g',
      clock,
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 3000 },
    });
    const lost = vi.fn();
    a.on('lease-lost', lost);
    return { clock, a, lost };
  }
  // The expiry timer cannot interrupt a synchronous stretch; the job's end is checked instead.
  const jobs: [string, (clock: FakeClock) => () => unknown][] = [
    [
      'a synchronous job',
      (clock) => () => {
        clock.jump(4000); // blocks the event loop past the lease's expiry
        return 'done';
      },
    ],
    [
      'an async job whose last synchronous stretch runs past it',
      (clock) => async () => {
        await Promise.resolve();
        clock.jump(4000);
        return 'done';
      },
    ],
  ];

  it.each(jobs)('%s: the lease is lost (LEASE_LOST, a lease-lost event, counted)', async (_name, make) => {
    const { clock, a, lost } = leased();
    const job = track(a.run(make(clock)));
    await clock.tickAsync(0);
    await flushMicrotasks();
    expect(job.error).toMatchObject({ code: 'LEASE_LOST' });
    expect(lost).toHaveBeenCalledTimes(1);
    expect(lost.mock.calls[0]![0]).toMatchObject({ reason: 'expired' });
    expect(a.stats()).toMatchObject({ leasesLost: 1, failed: 1, succeeded: 0 });
  });

  it('a job that ends before its lease expires succeeds', async () => {
    const { clock, a, lost } = leased();
    const job = track(
      a.run(() => {
        clock.jump(2999);
        return 'done';
      }),
    );
    await clock.tickAsync(0);
    await flushMicrotasks();
    expect(job.value).toBe('done');
    expect(lost).not.toHaveBeenCalled();
  });
});
