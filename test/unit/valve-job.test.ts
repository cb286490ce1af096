/**
 * The job room (src/job.ts): a job's result, its context, and its signal after the start.
 */
import { describe, expect, it } from 'vitest';
import { flushMicrotasks, setup } from './harness.js';

describe('run()', () => {
  it("resolves with the job's result and rejects with the job's error", async () => {
    const { valve } = setup({ rules: [] });
    await expect(valve.run(() => 42)).resolves.toBe(42);
    await expect(valve.run(async () => 'x')).resolves.toBe('x');
    const boom = new Error('boom');
    await expect(
      valve.run(() => {
        throw boom;
      }),
    ).rejects.toBe(boom);
    await expect(valve.run(() => Promise.reject(boom))).rejects.toBe(boom);
    expect(valve.stats()).toMatchObject({ started: 4, succeeded: 2, failed: 2, rejected: 0 });
  });

  it('gives the job a ctx with an AbortSignal (no lease without global concurrency)', async () => {
    const { valve } = setup({});
    const ctx = await valve.run((c) => c);
    expect(ctx.signal).toBeInstanceOf(AbortSignal);
    expect(ctx.signal.aborted).toBe(false);
    expect(ctx.lease).toBeUndefined();
  });
});

describe('cancellation', () => {
  it("after the start, the caller's signal aborts ctx.signal and the job decides", async () => {
    const { valve, clock } = setup({});
    const ac = new AbortController();
    let seen: unknown;
    const p = valve.run(
      ({ signal }) =>
        new Promise((resolve) => {
          signal.addEventListener('abort', () => {
            seen = signal.reason;
            resolve('handled');
          });
        }),
      { signal: ac.signal },
    );
    await clock.tickAsync(5);
    ac.abort('late');
    await expect(p).resolves.toBe('handled');
    expect(seen).toBe('late');
  });

  it('a ctx.signal read after the abort is already aborted', async () => {
    const { valve } = setup({});
    const ac = new AbortController();
    let resolveGate!: () => void;
    const gate = new Promise<void>((r) => {
      resolveGate = r;
    });
    const p = valve.run(
      async (ctx) => {
        await gate;
        return ctx.signal.aborted;
      },
      { signal: ac.signal },
    );
    await flushMicrotasks();
    ac.abort();
    resolveGate();
    await expect(p).resolves.toBe(true);
  });
});
