/** Ways of feeding jobs to an adapter. */
import { type Adapter, createAdapter } from './adapters.js';
import { gcHeap, noop, nowMs, sleep } from './common.js';

const ignore = (): void => {};

export interface TimedRun {
  /** Jobs that started before the deadline (with `drain`: every job issued). */
  readonly started: number;
  readonly elapsedMs: number;
}

/**
 * Keeps `window` jobs outstanding for `durationMs`: each finished job schedules the next, so the
 * limiter is saturated the whole time. `log` (if given) receives each start time (epoch ms).
 * Stops issuing at the deadline; jobs still queued are left for the adapter's teardown. With
 * `drain`, it instead waits for every job issued to settle and counts them all, the clock stopping
 * at the last one: jobs, CPU, store calls and Redis counters then cover the same work (without it,
 * a limiter with many jobs in flight at the deadline has made calls for jobs it is not credited).
 * `tally` counts the starts whose time (epoch ms) falls in [from, to): a steady rate that a
 * lagging event loop cannot shift, as timers read at the window's ends would be.
 */
export async function runFor(
  adapter: Adapter,
  options: {
    window: number;
    durationMs: number;
    log?: number[] | undefined;
    drain?: boolean | undefined;
    tally?: { readonly from: number; readonly to: number; started: number } | undefined;
  },
): Promise<TimedRun> {
  const log = options.log;
  let started = 0;
  let stopped = false;
  let issued = 0;
  const t0 = nowMs();
  const deadline = t0 + options.durationMs;
  const tally = options.tally;
  const job = log
    ? () => {
        started++;
        log.push(nowMs());
      }
    : tally
      ? () => {
          started++;
          const t = nowMs();
          if (t >= tally.from && t < tally.to) tally.started++;
        }
      : () => {
          started++;
        };
  const next = (): void => {
    // Checked every 256 jobs: a limiter that never yields to timers must still stop.
    if (stopped || ((++issued & 255) === 0 && nowMs() >= deadline)) {
      stopped = true;
      return;
    }
    adapter.schedule(job).then(next, ignore);
  };
  // drain: every job issued is counted when it settles, and the run ends with the last one.
  let outstanding = 0;
  let drained: (() => void) | undefined;
  const settledThenNext = (): void => {
    outstanding--;
    if (!stopped && ((++issued & 255) !== 0 || nowMs() < deadline)) issue();
    else {
      stopped = true;
      if (outstanding === 0) drained?.();
    }
  };
  const issue = (): void => {
    outstanding++;
    adapter.schedule(job).then(settledThenNext, settledThenNext);
  };
  for (let i = 0; i < options.window; i++) (options.drain ? issue : next)();
  await sleep(Math.max(0, deadline - nowMs()));
  stopped = true;
  if (options.drain && outstanding > 0) await new Promise<void>((r) => (drained = r));
  return { started, elapsedMs: nowMs() - t0 };
}

/** Enqueues `n` jobs at once and waits for all of them; returns the elapsed ms. */
export async function runBatch(adapter: Adapter, n: number, job: () => void): Promise<number> {
  const promises = new Array<Promise<unknown>>(n);
  const t0 = nowMs();
  for (let i = 0; i < n; i++) promises[i] = adapter.schedule(job);
  await Promise.all(promises);
  return nowMs() - t0;
}

/** Keeps measured objects reachable until the process exits. */
const retained: unknown[] = [];

const never = (): Promise<never> => new Promise<never>(() => {});

/**
 * Heap bytes per queued job: a blocked limiter (one job per hour, one at a time, the first job
 * never finishes) receives `n` no-op jobs; heapUsed after a full GC before and after, divided by n.
 * The caller's array of returned promises is allocated before the first reading, so it is not
 * counted; the promises themselves are (a caller holds them).
 */
export async function heapPerQueuedJob(peer: string, n: number): Promise<number> {
  const adapter = createAdapter(peer);
  await adapter.setup({ limit: 1, intervalMs: 3_600_000, burst: 1, concurrency: 1 });
  adapter.schedule(never).catch(ignore);
  await sleep(20);
  const held: (Promise<unknown> | null)[] = [];
  for (let i = 0; i < n; i++) held.push(null);
  // Without this, V8 may find the limiter (and with it its queue) dead once the loop is done.
  retained.push(adapter, held);
  const before = gcHeap();
  for (let i = 0; i < n; i++) held[i] = adapter.schedule(noop);
  await sleep(100); // let deferred work (microtasks, the first store call) happen
  const after = gcHeap();
  return (after - before) / n;
}
