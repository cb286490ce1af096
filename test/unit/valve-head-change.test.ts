/**
 * A rate wait is the store's answer for the cost of the job it refused. When the head of the
 * queue changes (the head is cancelled, reaches its maxWait, or a job of a higher priority
 * comes before it) and the new head costs less, the valve asks the store again at once: a
 * job that fits does not wait for the costlier one that left. A new head of equal or higher
 * cost cannot fit sooner, and costs no store call.
 */
import { describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { count } from '../helpers/spy-store.js';
import { flushMicrotasks, setup, track } from './harness.js';

// 100 units per 10 s with a burst of 100: 100 ms per unit. With 60 spent, 40 are left, and a
// cost-60 job fits 2 s later.
const rules = { limit: 100, interval: '10s', burst: 100 } as const;

/** A valve over a spied memory store with 60 units spent, and a job of `headCost` refused at its head. */
async function spentWithHead(headCost: number, options: { maxWait?: number; signal?: AbortSignal } = {}) {
  const s = setup({ rules });
  await s.valve.run(() => {}, { cost: 60 });
  const t0 = s.clock.now();
  const started: Record<string, number> = {};
  const job = (name: string) => () => {
    started[name] = s.clock.now() - t0;
    return name;
  };
  const head = track(s.valve.run(job('A'), { cost: headCost, ...options }));
  await flushMicrotasks();
  expect(s.store.acquires.at(-1)).toMatchObject({ granted: 0, blocked: 'rate' });
  return { ...s, t0, started, job, head };
}

describe('a cheaper job behind a head that leaves starts without waiting for the head', () => {
  it('the head reaches its maxWait: the job behind it starts then', async () => {
    const { valve, clock, store, started, job, head } = await spentWithHead(60, { maxWait: 200 });
    const b = track(valve.run(job('B'), { cost: 40 }));
    await flushMicrotasks();
    const calls = count(store, 'acquire');
    await clock.tickAsync(199);
    expect(b.done).toBe(false);
    await clock.tickAsync(1);
    expect(head.done && isValveError(head.error, 'MAX_WAIT')).toBe(true);
    expect(b.value).toBe('B');
    expect(started.B).toBe(200);
    // One store call, at the deadline.
    expect(count(store, 'acquire')).toBe(calls + 1);
    await valve.close();
  });

  it('the head is aborted: the job queued behind it starts at the abort', async () => {
    const ac = new AbortController();
    const { valve, clock, store, started, job, head } = await spentWithHead(60, { signal: ac.signal });
    const b = track(valve.run(job('B'), { cost: 40 }));
    await clock.tickAsync(300);
    expect(b.done).toBe(false);
    const calls = count(store, 'acquire');
    ac.abort();
    await flushMicrotasks();
    expect(head.done && head.ok).toBe(false);
    expect(b.value).toBe('B');
    expect(started.B).toBe(300);
    expect(count(store, 'acquire')).toBe(calls + 1);
    await valve.close();
  });

  it('the head is aborted with nothing behind it: a job queued afterwards starts at once', async () => {
    const ac = new AbortController();
    const { valve, clock, store, started, job } = await spentWithHead(60, { signal: ac.signal });
    await clock.tickAsync(300);
    ac.abort();
    await flushMicrotasks();
    const calls = count(store, 'acquire');
    const b = track(valve.run(job('B'), { cost: 40 }));
    await flushMicrotasks();
    expect(b.value).toBe('B');
    expect(started.B).toBe(300);
    expect(count(store, 'acquire')).toBe(calls + 1);
    await valve.close();
  });

  it('a higher-priority job arriving behind the head (now the head itself) starts at once, the head keeps its wait', async () => {
    const { valve, clock, started, job, head } = await spentWithHead(60);
    await clock.tickAsync(100);
    const c = track(valve.run(job('C'), { cost: 10, priority: 5 }));
    await flushMicrotasks();
    expect(c.value).toBe('C');
    expect(started.C).toBe(100);
    // A: 60 units, 30 left after C; it fits once 30 more have come back (3 s), 100 ms of
    // which had passed when C was charged.
    await clock.tickAsync(2899);
    expect(head.done).toBe(false);
    await clock.tickAsync(1);
    expect(head.value).toBe('A');
    expect(started.A).toBe(3000);
    await valve.close();
  });

  it('a cheaper new head that does not fit either costs one store call, then waits for its own slot', async () => {
    const ac = new AbortController();
    const { valve, clock, store, started, job } = await spentWithHead(60, { signal: ac.signal });
    const b = track(valve.run(job('B'), { cost: 50 }));
    await clock.tickAsync(300);
    const calls = count(store, 'acquire');
    ac.abort();
    await flushMicrotasks();
    expect(count(store, 'acquire')).toBe(calls + 1);
    // 43 units back by then (40 + 3): B needs 50, 700 ms more.
    expect(store.acquires.at(-1)).toMatchObject({ costs: [50], granted: 0, retryAfter: 700 });
    await clock.tickAsync(699);
    expect(b.done).toBe(false);
    expect(count(store, 'acquire')).toBe(calls + 1);
    await clock.tickAsync(1);
    expect(b.value).toBe('B');
    expect(started.B).toBe(1000);
    expect(count(store, 'acquire')).toBe(calls + 2);
    await valve.close();
  });
});

describe('a new head of equal or higher cost makes no store call', () => {
  for (const cost of [60, 70]) {
    it(`the head (cost 60) is aborted and the next job costs ${cost}: it waits for its slot with no extra call`, async () => {
      const ac = new AbortController();
      const { valve, clock, store, started, job } = await spentWithHead(60, { signal: ac.signal });
      const b = track(valve.run(job('B'), { cost }));
      const low = track(valve.run(job('low'), { cost, priority: -1 }));
      await clock.tickAsync(300);
      const calls = count(store, 'acquire');
      ac.abort();
      await flushMicrotasks();
      // A job of another priority joining behind B is no new head either.
      const later = track(valve.run(job('later'), { cost, priority: -2 }));
      await clock.tickAsync(1699);
      expect(count(store, 'acquire')).toBe(calls);
      expect(b.done).toBe(false);
      // At A's slot, one call (as without the abort); a costlier B is refused there with its own wait.
      await clock.tickAsync(1 + (cost - 60) * 100);
      expect(b.value).toBe('B');
      expect(started.B).toBe(2000 + (cost - 60) * 100);
      expect(count(store, 'acquire')).toBe(calls + (cost === 60 ? 1 : 2));
      await clock.runAllAsync();
      expect(low.ok && later.ok).toBe(true);
      await valve.close();
    });
  }

  it('the head reaches its maxWait and the next job costs the same: no call at the deadline', async () => {
    const { valve, clock, store, started, job, head } = await spentWithHead(60, { maxWait: 200 });
    const b = track(valve.run(job('B'), { cost: 60 }));
    await flushMicrotasks();
    const calls = count(store, 'acquire');
    await clock.tickAsync(1000);
    expect(head.done && isValveError(head.error, 'MAX_WAIT')).toBe(true);
    expect(count(store, 'acquire')).toBe(calls);
    await clock.tickAsync(1000);
    expect(b.value).toBe('B');
    expect(started.B).toBe(2000);
    expect(count(store, 'acquire')).toBe(calls + 1);
    await valve.close();
  });
});

describe('a head change while a call is in flight', () => {
  it('a cheaper job of a higher priority that arrives while the refused call travels is asked for once it is answered', async () => {
    const { valve, clock, store } = setup({ rules });
    store.timing.acquire = { delay: 10 };
    const first = track(valve.run(() => {}, { cost: 60 }));
    await clock.tickAsync(10);
    expect(first.ok).toBe(true);
    const t0 = clock.now();
    const a = track(valve.run(() => 'A', { cost: 60 }));
    await clock.tickAsync(5);
    // In flight: the call for A. C comes before A, so the wait the answer gives for A is not C's.
    let cAt = -1;
    const c = track(
      valve.run(
        () => {
          cAt = clock.now() - t0;
          return 'C';
        },
        { cost: 10, priority: 5 },
      ),
    );
    await clock.tickAsync(15);
    expect(c.value).toBe('C');
    expect(cAt).toBe(20);
    // The call for A, refused with a wait of about 2 s, then at its answer the one for C and A.
    expect(store.acquires.slice(-2)).toMatchObject([
      { costs: [60], at: t0, granted: 0, blocked: 'rate' },
      { costs: [10, 60], at: t0 + 10, granted: 1 },
    ]);
    expect(store.acquires.at(-2)!.retryAfter).toBeGreaterThan(1900);
    expect(a.done).toBe(false);
    await valve.close();
  });
});
