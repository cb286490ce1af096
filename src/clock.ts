/**
 * The one seam for time and timers. The valve and the memory store read time and
 * set timers only through a Clock, so tests can drive both with a virtual clock.
 */
export interface Clock {
  /** Current time in epoch milliseconds; may carry a fraction (sub-millisecond precision). */
  now(): number;
  /** Calls `fn` once after `ms` milliseconds (fractional allowed), never earlier. Returns a handle for {@link Clock.clearTimeout}. */
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const origin = performance.timeOrigin;
const now = (): number => origin + performance.now();

/**
 * How long before its target a timer hands over from Node's millisecond timers to
 * checking on every event-loop turn. Node timers fire up to about a millisecond
 * late; at 1000 starts/s that alone would cost 10–20 % of the rate (a late start
 * pushes every later one). Within this window the timer re-checks the time once
 * per event-loop turn (setImmediate), so I/O keeps flowing and the wake-up lands
 * within a few microseconds of its target. Only a valve that is actually waiting
 * for less than this window spins, and only until its target.
 */
const SPIN_WINDOW_MS = 1.5;

/** A timer that fires at its target time, not up to a millisecond after it. */
class PreciseTimer {
  private coarse: ReturnType<typeof setTimeout> | null = null;
  private fine: ReturnType<typeof setImmediate> | null = null;

  constructor(
    private readonly fn: () => void,
    private readonly target: number,
  ) {
    const delay = target - now();
    if (delay > SPIN_WINDOW_MS) this.coarse = setTimeout(this.check, delay - SPIN_WINDOW_MS);
    else this.fine = setImmediate(this.check);
  }

  private readonly check = (): void => {
    this.coarse = null;
    this.fine = null;
    if (now() >= this.target) this.fn();
    else this.fine = setImmediate(this.check);
  };

  cancel(): void {
    if (this.coarse !== null) clearTimeout(this.coarse);
    if (this.fine !== null) clearImmediate(this.fine);
    this.coarse = null;
    this.fine = null;
  }
}

/**
 * The real clock: epoch ms with sub-millisecond precision (performance.timeOrigin +
 * performance.now(), monotonic within a process), and timers that fire at their
 * target rather than up to a millisecond late (see SPIN_WINDOW_MS).
 */
export const systemClock: Clock = {
  now,
  setTimeout: (fn, ms) => new PreciseTimer(fn, now() + (ms > 0 ? ms : 0)),
  clearTimeout: (handle) => (handle as PreciseTimer).cancel(),
};
