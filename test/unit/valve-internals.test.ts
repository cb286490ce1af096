import { describe, expect, it, vi } from 'vitest';
import { isValveError } from '../../src/errors.js';
import type { ValveInternals } from '../../src/feedback-port.js';
import type { Valve } from '../../src/valve.js';
import { count } from '../helpers/spy-store.js';
import { flushMicrotasks, setup, track } from './harness.js';

/** The seam the feedback module gets (not public API). */
const internals = (valve: Valve) => (valve as unknown as { internals: ValveInternals }).internals;

describe('ValveInternals (the feedback seam)', () => {
  it('exposes id, clock and the feedback settings', () => {
    const { valve, clock } = setup({ feedback: { maxPause: '10m', backoffInitial: 200 } });
    const i = internals(valve);
    expect(i.id).toBe('test');
    expect(i.clock).toBe(clock);
    expect(i.feedback).toEqual({ maxPause: 600_000, backoffInitial: 200, backoffMax: 60_000 });
  });

  it('runAt(…, undefined, onSequence) enqueues like run() and reports the sequence synchronously', async () => {
    const { valve } = setup({});
    const seqs: number[] = [];
    const a = internals(valve).runAt(
      () => 'a',
      {},
      undefined,
      (s) => seqs.push(s),
    );
    const b = internals(valve).runAt(
      () => 'b',
      {},
      undefined,
      (s) => seqs.push(s),
    );
    expect(seqs).toEqual([0, 1]);
    expect(await Promise.all([a, b])).toEqual(['a', 'b']);
  });

  it('runAt with an earlier sequence goes back to that position (ahead of later arrivals) and ignores maxQueue', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 }, maxQueue: 2 });
    const order: string[] = [];
    let firstSeq = -1;
    const first = internals(valve).runAt(
      () => order.push('first'),
      {},
      undefined,
      (s) => {
        firstSeq = s;
      },
    );
    const later1 = valve.run(() => order.push('later1'));
    await flushMicrotasks();
    const later2 = valve.run(() => order.push('later2'));
    // A retry of the first attempt, at its original position; the queue is full for run().
    const full = track(valve.run(() => order.push('x')));
    const retry = internals(valve).runAt(() => order.push('retry'), {}, firstSeq);
    await flushMicrotasks();
    expect(isValveError(full.error, 'QUEUE_FULL')).toBe(true);
    await clock.tickAsync(3000);
    await Promise.all([first, later1, later2, retry]);
    expect(order).toEqual(['first', 'retry', 'later1', 'later2']);
  });

  it('pauseInBackground applies the pause locally at once, writes it, and emits pause with source and detail', async () => {
    const { valve, clock, store } = setup({});
    const events: unknown[] = [];
    valve.on('pause', (e) => events.push(e));
    const t0 = clock.now();
    internals(valve).pauseInBackground(2000, 'retry-after', { header: 'Retry-After' });
    expect(valve.stats().pausedUntil).toBe(t0 + 2000);
    await flushMicrotasks();
    expect(count(store, 'pause')).toBe(1);
    expect(events).toEqual([
      {
        until: t0 + 2000,
        source: 'retry-after',
        header: 'Retry-After',
        model: undefined,
        detail: { header: 'Retry-After' },
      },
    ]);
    const job = track(valve.run(() => 1));
    await clock.tickAsync(1999);
    expect(job.done).toBe(false);
    await clock.tickAsync(1);
    expect(job.value).toBe(1);
  });

  it('a failed background pause emits store-error, is not retried, and rejects nothing', async () => {
    const { valve, clock, store } = setup({});
    store.async = { delay: 0 };
    store.fail.pause = new Error('down');
    const errors = vi.fn();
    valve.on('store-error', errors);
    internals(valve).pauseInBackground(1000, 'backoff');
    await clock.tickAsync(5000);
    expect(errors).toHaveBeenCalledWith(store.fail.pause, { operation: 'pause', id: 'test', action: 'none' });
    expect(count(store, 'pause')).toBe(1);
  });

  it('a pause raised while an acquisition is in flight is not cleared by its answer', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 1, interval: 100 } });
    store.async = { delay: 10 };
    const a = track(valve.run(() => 'a'));
    const b = track(valve.run(() => 'b'));
    await flushMicrotasks();
    expect(count(store, 'acquire')).toBe(1);
    // The pause is local only: its write fails, after the acquisition answered "no pause".
    store.fail.pause = new Error('slow and failing');
    valve.on('store-error', () => {});
    internals(valve).pauseInBackground(1000, 'retry-after');
    await clock.tickAsync(10);
    expect(a.value).toBe('a');
    expect(valve.stats().pausedUntil).not.toBeNull();
    await clock.tickAsync(500);
    expect(b.done).toBe(false);
    await clock.tickAsync(600);
    expect(b.value).toBe('b');
  });

  it("emit() forwards typed events, but never one named 'error'", () => {
    const { valve } = setup({});
    const retry = vi.fn();
    valve.on('retry', retry);
    internals(valve).emit('retry', { attempt: 1 });
    internals(valve).emit('error', new Error('x'));
    expect(retry).toHaveBeenCalledWith({ attempt: 1 });
  });
});

describe('re-entrancy', () => {
  it('a job that closes the valve: the rest of its batch rejects CLOSED and never runs', async () => {
    const { valve } = setup({});
    const ran: number[] = [];
    let closing: Promise<void> | undefined;
    const jobs = [0, 1, 2].map((i) =>
      track(
        valve.run(() => {
          ran.push(i);
          if (i === 0) closing = valve.close();
        }),
      ),
    );
    await flushMicrotasks();
    expect(ran).toEqual([0]);
    expect(jobs[0]!.ok).toBe(true);
    expect(jobs.slice(1).every((j) => isValveError(j.error, 'CLOSED'))).toBe(true);
    await closing;
  });

  it('jobs may call run() from inside a job', async () => {
    const { valve } = setup({ concurrency: 1 });
    const inner = await valve.run(() => ({ p: valve.run(() => 'inner') }));
    await expect(inner.p).resolves.toBe('inner');
  });
});
