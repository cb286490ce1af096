import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { count } from '../helpers/spy-store.js';
import { flushMicrotasks, setup, track } from './harness.js';

/** Many jobs sharing one caller's AbortSignal: one listener per signal, whatever the number of jobs. */

const listeners = (signal: AbortSignal) => getEventListeners(signal, 'abort').length;

describe("jobs sharing one caller's signal", () => {
  const warnings: Error[] = [];
  const onWarning = (w: Error) => warnings.push(w);
  process.on('warning', onWarning);
  afterEach(() => {
    warnings.length = 0;
  });

  it('100k jobs on one signal enqueue in linear time, with one listener and no MaxListenersExceededWarning', async () => {
    // One rule unit per second: the jobs stay queued (a few start), nothing is scanned per job.
    const { valve, store } = setup({ rules: { limit: 1, interval: '1s' } });
    const ac = new AbortController();
    const n = 100_000;
    const results: Promise<unknown>[] = new Array(n);
    const job = () => 1;
    const t0 = performance.now();
    for (let i = 0; i < n; i++) results[i] = valve.run(job, { signal: ac.signal });
    const elapsed = performance.now() - t0;
    // One listener per job made this quadratic: about a minute for 100k (137 s on a loaded
    // machine). Linear takes about 0.4 s here; the bound is loose enough for any load, tight
    // enough to catch the quadratic path. (The 1 s target is a benchmark figure, not a test's.)
    expect(elapsed).toBeLessThan(20_000);
    expect(listeners(ac.signal)).toBe(1);
    await flushMicrotasks();
    expect(count(store, 'acquire')).toBeGreaterThan(0);
    const settled = Promise.allSettled(results);
    const reason = new Error('stop');
    ac.abort(reason);
    const outcomes = await settled;
    const rejected = outcomes.filter((o) => o.status === 'rejected');
    // The one granted job ran before the abort; every other job rejects with the signal's reason.
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    expect(rejected).toHaveLength(n - 1);
    expect(rejected.every((o) => (o as PromiseRejectedResult).reason === reason)).toBe(true);
    expect(valve.stats()).toMatchObject({ queued: 0, rejected: n - 1 });
    expect(listeners(ac.signal)).toBe(0);
    await flushMicrotasks();
    expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
  });

  it('an abort rejects queued jobs with signal.reason and aborts ctx.signal of started ones', async () => {
    const { valve, clock } = setup({ rules: { limit: 2, interval: '1s', burst: 2 }, concurrency: 5 });
    const ac = new AbortController();
    const seen: unknown[] = [];
    const running = Array.from({ length: 2 }, () =>
      track(
        valve.run(
          ({ signal }) =>
            new Promise((resolve) => {
              signal.addEventListener('abort', () => {
                seen.push(signal.reason);
                resolve('stopped');
              });
            }),
          { signal: ac.signal },
        ),
      ),
    );
    const queued = Array.from({ length: 12 }, () => track(valve.run(() => 'ran', { signal: ac.signal })));
    const other = track(valve.run(() => 'other'));
    await clock.tickAsync(1);
    expect(valve.stats()).toMatchObject({ running: 2, started: 2 });
    expect(listeners(ac.signal)).toBe(1);
    const reason = new Error('abort all');
    ac.abort(reason);
    await flushMicrotasks();
    expect(seen).toEqual([reason, reason]);
    expect(running.map((r) => r.value)).toEqual(['stopped', 'stopped']);
    expect(queued.every((q) => q.done && q.error === reason)).toBe(true);
    expect(listeners(ac.signal)).toBe(0);
    // A job without the signal is untouched.
    await clock.tickAsync(1000);
    expect(other.value).toBe('other');
    expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
  });

  it('the listener goes once the last job sharing the signal settles or ends, and comes back for a new job', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: '1s' } });
    const ac = new AbortController();
    const a = track(valve.run(() => 'a', { signal: ac.signal }));
    const b = track(valve.run(() => 'b', { signal: ac.signal, maxWait: 500 }));
    expect(listeners(ac.signal)).toBe(1);
    await clock.tickAsync(1);
    expect(a.value).toBe('a');
    // b still waits: the listener stays.
    expect(listeners(ac.signal)).toBe(1);
    await clock.tickAsync(600);
    expect(b.error).toMatchObject({ code: 'MAX_WAIT' });
    expect(listeners(ac.signal)).toBe(0);
    const c = track(valve.run(() => 'c', { signal: ac.signal }));
    expect(listeners(ac.signal)).toBe(1);
    await clock.tickAsync(1000);
    expect(c.value).toBe('c');
    expect(listeners(ac.signal)).toBe(0);
  });

  it('two valves sharing a signal: one listener each, each aborts only its own jobs', async () => {
    const one = setup({ rules: { limit: 1, interval: '1s' } });
    const two = setup({ rules: { limit: 1, interval: '1s' } }, one.clock);
    const ac = new AbortController();
    const jobs = [one.valve, two.valve].flatMap((v) =>
      Array.from({ length: 20 }, () => track(v.run(() => 1, { signal: ac.signal }))),
    );
    expect(listeners(ac.signal)).toBe(2);
    await one.clock.tickAsync(1);
    ac.abort('gone');
    await flushMicrotasks();
    expect(jobs.filter((j) => j.error === 'gone')).toHaveLength(38);
    expect(one.valve.stats().rejected + two.valve.stats().rejected).toBe(38);
    expect(listeners(ac.signal)).toBe(0);
  });
});

describe('a signal valve cannot listen to', () => {
  it('one without removeEventListener is refused by the check, naming `signal`', async () => {
    // It was accepted; the job's end then threw in removeEventListener and never settled.
    const { valve } = setup({});
    const signal = { aborted: false, addEventListener() {} } as unknown as AbortSignal;
    const job = track(valve.run(() => 1, { signal }));
    await flushMicrotasks();
    expect(job).toMatchObject({ done: true, ok: false });
    expect(job.error).toBeInstanceOf(TypeError);
    expect((job.error as Error).message).toMatch(/`signal`/);
    expect(() => valve.wrap(() => 1, { signal })).toThrow(TypeError);
    expect(valve.stats()).toMatchObject({ queued: 0, rejected: 1 });
  });

  it('one whose addEventListener throws rejects the job with its error: no throw, nothing counted, the valve goes on', async () => {
    // run() threw synchronously, the job stayed counted as queued (close() never resolved),
    // and the next run() made admission loop forever.
    const { valve, clock } = setup({});
    const nope = new Error('nope');
    const signal = {
      aborted: false,
      addEventListener() {
        throw nope;
      },
      removeEventListener() {},
    } as unknown as AbortSignal;
    let threw: unknown;
    let refused: ReturnType<typeof track> | undefined;
    try {
      refused = track(valve.run(() => 1, { signal }));
    } catch (err) {
      threw = err;
    }
    expect(threw).toBeUndefined();
    await flushMicrotasks();
    expect(refused).toMatchObject({ done: true, ok: false, error: nope });
    expect(valve.stats()).toMatchObject({ queued: 0, running: 0, started: 0, rejected: 1 });
    expect(await valve.run(() => 2)).toBe(2);
    const closed = track(valve.close());
    await clock.tickAsync(0);
    expect(closed.done).toBe(true);
  });

  it('one whose removeEventListener throws: the jobs settle as they would, the valve goes on', async () => {
    // The throw escaped from the job's end as an uncaught exception; the job never settled.
    const { valve, clock } = setup({});
    const signal = {
      aborted: false,
      addEventListener() {},
      removeEventListener() {
        throw new Error('nope');
      },
    } as unknown as AbortSignal;
    const ok = track(valve.run(() => 1, { signal }));
    const failed = track(
      valve.run(
        () => {
          throw new Error('job');
        },
        { signal },
      ),
    );
    await clock.tickAsync(0);
    expect(ok).toMatchObject({ done: true, ok: true, value: 1 });
    expect(failed).toMatchObject({ done: true, ok: false });
    expect((failed.error as Error).message).toBe('job');
    expect(await valve.run(() => 2, { signal })).toBe(2);
    expect(valve.stats()).toMatchObject({ queued: 0, running: 0 });
  });
});
