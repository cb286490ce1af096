/**
 * Admission (src/admission.ts): when and how many jobs are asked for, the spacing of starts on
 * the store's hint with one timer, local concurrency.
 */
import { describe, expect, it } from 'vitest';
import { count } from '../helpers/spy-store.js';
import { flushMicrotasks, setup } from './harness.js';

describe('run()', () => {
  it('never starts a job synchronously inside run(); admission happens once for a synchronous burst', async () => {
    const { valve, store } = setup({ rules: { limit: 1000, interval: '1s', burst: 1000 } });
    const started: number[] = [];
    const all = Array.from({ length: 100 }, (_, i) => valve.run(() => started.push(i)));
    expect(started).toEqual([]);
    expect(count(store, 'acquire')).toBe(0);
    await Promise.all(all);
    expect(started).toEqual(Array.from({ length: 100 }, (_, i) => i));
    // batch 32: 100 jobs in 4 store calls
    expect(store.acquires.map((a) => a.count)).toEqual([32, 32, 32, 4]);
  });

  it('asks for min(batch, free local slots) jobs', async () => {
    const { valve, store } = setup({ concurrency: 3, batch: 2 });
    const gates: (() => void)[] = [];
    const all = Array.from({ length: 6 }, () => valve.run(() => new Promise<void>((r) => gates.push(r))));
    await flushMicrotasks();
    expect(store.acquires.map((a) => a.count)).toEqual([2, 1]);
    expect(valve.stats()).toMatchObject({ running: 3, queued: 3 });
    gates.shift()!();
    await flushMicrotasks();
    expect(store.acquires.map((a) => a.count)).toEqual([2, 1, 1]);
    for (let i = 0; i < 6; i++) {
      gates.shift()?.();
      await flushMicrotasks();
    }
    await Promise.all(all);
  });

  it('spaces GCRA starts interval/limit apart, sleeping on the store hint with one timer', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 4, interval: 1000 } });
    const t0 = clock.now();
    const starts: number[] = [];
    const all = Array.from({ length: 5 }, () => valve.run(() => starts.push(clock.now() - t0)));
    await clock.tickAsync(1000);
    await Promise.all(all);
    expect(starts).toEqual([0, 250, 500, 750, 1000]);
    expect(clock.requested.filter((d) => d > 0)).toEqual([250, 250, 250, 250]);
    expect(count(store, 'acquire')).toBe(5);
    expect(clock.pending).toBe(0);
  });

  it('never catches up after late timers', async () => {
    const { valve, clock } = setup({ rules: { limit: 10, interval: 1000 } });
    clock.lateness = 37;
    const starts: number[] = [];
    const all = Array.from({ length: 6 }, () => valve.run(() => starts.push(clock.now())));
    await clock.tickAsync(2000);
    await Promise.all(all);
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(100);
    expect(starts[5]! - starts[0]!).toBeGreaterThanOrEqual(5 * 137);
  });

  it('respects local concurrency', async () => {
    const { valve, clock } = setup({ concurrency: 2 });
    let running = 0;
    let peak = 0;
    const all = Array.from({ length: 10 }, () =>
      valve.run(async () => {
        running++;
        peak = Math.max(peak, running);
        await new Promise<void>((r) => clock.setTimeout(r, 10));
        running--;
      }),
    );
    await clock.runAllAsync();
    await Promise.all(all);
    expect(peak).toBe(2);
  });
});
