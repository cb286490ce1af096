/**
 * The queue room (src/waiting.ts): queue order, maxQueue and maxWait, and a caller's abort
 * before the start (queued, or while its acquisition is in flight).
 */
import { describe, expect, it, vi } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { count } from '../helpers/spy-store.js';
import { flushMicrotasks, setup, track } from './harness.js';

describe('ordering', () => {
  it('starts higher priorities first and keeps call order within a priority', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 100 } });
    const order: string[] = [];
    const jobs = [
      ['a', 0],
      ['b', 5],
      ['c', 0],
      ['d', 5],
      ['e', -1],
      ['f', 10],
      ['g', 0],
    ] as const;
    // The first job takes the only token; the others wait together.
    const first = valve.run(() => order.push('first'));
    await flushMicrotasks();
    const all = jobs.map(([name, priority]) => valve.run(() => order.push(name), { priority }));
    await clock.tickAsync(1000);
    await Promise.all([first, ...all]);
    expect(order).toEqual(['first', 'f', 'b', 'd', 'a', 'c', 'g', 'e']);
  });

  it('a refused batch goes back at its original positions, ahead of later arrivals', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 2, interval: 1000, burst: 2 } });
    const order: number[] = [];
    const all = [0, 1, 2, 3].map((i) => valve.run(() => order.push(i)));
    await flushMicrotasks();
    expect(order).toEqual([0, 1]);
    expect(store.acquires[0]!.count).toBe(4);
    all.push(valve.run(() => order.push(4)));
    await clock.tickAsync(2000);
    await Promise.all(all);
    expect(order).toEqual([0, 1, 2, 3, 4]);
  });

  it('a job arriving later with a higher priority goes ahead of refused ones', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 } });
    const order: string[] = [];
    const all = ['a', 'b', 'c'].map((n) => valve.run(() => order.push(n)));
    await flushMicrotasks();
    all.push(valve.run(() => order.push('vip'), { priority: 1 }));
    await clock.tickAsync(3000);
    await Promise.all(all);
    expect(order).toEqual(['a', 'vip', 'b', 'c']);
  });
});

describe('maxQueue and maxWait', () => {
  it('rejects QUEUE_FULL beyond maxQueue queued jobs', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 }, maxQueue: 2 });
    const a = valve.run(() => 'a');
    const b = valve.run(() => 'b');
    const c = valve.run(() => 'c');
    await expect(c).rejects.toSatisfy((e: unknown) => isValveError(e, 'QUEUE_FULL'));
    await flushMicrotasks();
    // 'a' started, so there is room again.
    const d = valve.run(() => 'd');
    await clock.tickAsync(2000);
    expect(await Promise.all([a, b, d])).toEqual(['a', 'b', 'd']);
    expect(valve.stats().rejected).toBe(1);
  });

  it('rejects MAX_WAIT when a job cannot start in time (valve default and per-job override)', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 }, maxWait: 1500 });
    const t0 = clock.now();
    const a = track(valve.run(() => 'a'));
    const b = track(valve.run(() => 'b'));
    const c = track(valve.run(() => 'c'));
    const d = track(valve.run(() => 'd', { maxWait: 500 }));
    const e = track(valve.run(() => 'e', { maxWait: Infinity }));
    await clock.tickAsync(499);
    expect(d.done).toBe(false);
    await clock.tickAsync(1);
    expect(d.done).toBe(true);
    expect(isValveError(d.error, 'MAX_WAIT')).toBe(true);
    await clock.tickAsync(1000);
    expect(c.done && isValveError(c.error, 'MAX_WAIT')).toBe(true);
    await clock.tickAsync(2000);
    expect([a.value, b.value, e.value]).toEqual(['a', 'b', 'e']);
    expect(clock.now() - t0).toBe(3500);
    expect(valve.stats()).toMatchObject({ rejected: 2, started: 3 });
  });

  it('expired and aborted jobs of a blocked queue do not stay in memory until they reach its head', async () => {
    const { valve, clock } = setup({});
    await valve.pause(3_600_000);
    const ac = new AbortController();
    const jobs = Array.from({ length: 10_000 }, (_, i) =>
      track(valve.run(() => i, i % 2 === 0 ? { maxWait: 100 } : { signal: ac.signal })),
    );
    const keeper = track(valve.run(() => 'kept'));
    await clock.tickAsync(50);
    ac.abort();
    await clock.tickAsync(50);
    expect(jobs.every((j) => j.done && !j.ok)).toBe(true);
    expect((valve as unknown as { waiting: { queue: { size: number } } }).waiting.queue.size).toBeLessThan(
      100,
    );
    expect(valve.stats().queued).toBe(1);
    await valve.resume();
    await clock.tickAsync(0);
    expect(keeper.value).toBe('kept');
  });

  it('accepts maxWait as a duration string', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 }, maxWait: '1s' });
    valve.run(() => 1);
    const late = track(valve.run(() => 2, { maxWait: '0.2s' }));
    await clock.tickAsync(200);
    expect(isValveError(late.error, 'MAX_WAIT')).toBe(true);
  });
});

describe('cancellation', () => {
  it('an already aborted signal rejects with its reason and never runs', async () => {
    const { valve, store } = setup({});
    const reason = new Error('stop');
    const job = vi.fn();
    await expect(valve.run(job, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    await flushMicrotasks();
    expect(job).not.toHaveBeenCalled();
    expect(count(store, 'acquire')).toBe(0);
    expect(valve.stats().rejected).toBe(1);
  });

  it('aborting while queued rejects at once with the reason and skips the job', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 } });
    const ac = new AbortController();
    const ran: string[] = [];
    const a = valve.run(() => ran.push('a'));
    const b = track(valve.run(() => ran.push('b'), { signal: ac.signal }));
    const c = valve.run(() => ran.push('c'));
    await flushMicrotasks();
    ac.abort('why');
    await flushMicrotasks();
    expect(b).toMatchObject({ done: true, ok: false, error: 'why' });
    expect(valve.stats().queued).toBe(1);
    await clock.tickAsync(1000);
    await Promise.all([a, c]);
    expect(ran).toEqual(['a', 'c']);
  });

  it('aborting while its acquisition is in flight: rejects at once, never runs, the grant stays spent', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 1, interval: 1000 } });
    store.async = { delay: 10 };
    const ac = new AbortController();
    const job = vi.fn();
    const a = track(valve.run(job, { signal: ac.signal }));
    await flushMicrotasks();
    expect(count(store, 'acquire')).toBe(1);
    ac.abort(new Error('gone'));
    await flushMicrotasks();
    expect(a.done).toBe(true);
    expect((a.error as Error).message).toBe('gone');
    await clock.tickAsync(10);
    expect(job).not.toHaveBeenCalled();
    // The grant was spent: the next job waits for the next emission.
    const t0 = clock.now();
    let started = 0;
    const b = valve.run(() => {
      started = clock.now();
    });
    await clock.tickAsync(2000);
    await b;
    expect(started - t0).toBeGreaterThanOrEqual(980);
  });
});
