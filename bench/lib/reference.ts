/**
 * Reference limiters for the precision scenario: the smallest possible GCRA scheduler (an array
 * queue, one `tat`, one wake-up), so that the table shows what waking up on this machine allows
 * at all, in the same run. They are not products: no priorities, no stores, no cancellation.
 *
 * - `ref-timer` wakes with setTimeout(at − now) (no rounding; an early timer re-arms).
 * - `ref-spin` sleeps with setTimeout until 1.5 ms before the target, then turns the event loop
 *   with setImmediate until the target: the best an in-process waker can do, at a CPU cost.
 * - `ref-busy` never sleeps: it turns the event loop with setImmediate all the time (a whole core).
 *   What it loses is time the process was not running at all (the VM or the OS took the CPU):
 *   the ceiling for any limiter in one process on this machine.
 */
import type { Adapter, LimiterOptions } from './adapters.js';
import { nowMs } from './common.js';

export function referenceAdapter(name: 'ref-timer' | 'ref-spin' | 'ref-busy'): Adapter {
  const spin = name !== 'ref-timer';
  const spinWindow = name === 'ref-busy' ? Number.POSITIVE_INFINITY : 1.5;
  let queue: (() => void)[] = [];
  let head = 0;
  let tat = 0;
  let emission = 0;
  let tolerance = 0;
  let armed = false;
  let stopped = false;
  let target = 0;

  const drain = (): void => {
    armed = false;
    if (stopped) return;
    const now = nowMs();
    while (head < queue.length) {
      const next = Math.max(tat, now) + emission;
      if (next - now > tolerance + emission) break;
      tat = next;
      const run = queue[head]!;
      queue[head++] = undefined as unknown as () => void;
      run();
    }
    if (head > 1024 && head * 2 > queue.length) {
      queue = queue.slice(head);
      head = 0;
    }
    if (head < queue.length) arm(tat - tolerance);
  };

  const poll = (): void => {
    if (nowMs() >= target) drain();
    else setImmediate(poll);
  };

  const arm = (at: number): void => {
    if (armed) return;
    armed = true;
    target = at;
    const wait = at - nowMs();
    if (!spin) {
      setTimeout(drain, Math.max(0, wait));
    } else if (wait > spinWindow) {
      setTimeout(poll, wait - spinWindow);
    } else {
      setImmediate(poll);
    }
  };

  return {
    name,
    async setup(o: LimiterOptions) {
      emission = o.intervalMs / o.limit;
      tolerance = (o.burst - 1) * emission;
      tat = 0;
      stopped = false;
    },
    schedule(fn) {
      return new Promise<void>((resolve) => {
        queue.push(() => {
          fn();
          resolve();
        });
        if (!armed) arm(nowMs());
      });
    },
    async teardown() {
      stopped = true;
      queue = [];
      head = 0;
    },
  };
}
