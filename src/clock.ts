/**
 * The one seam for time and timers. The valve and the memory store read time and
 * set timers only through a Clock, so tests can drive both with a virtual clock.
 */
export interface Clock {
  /** Current time in epoch milliseconds; may carry a fraction (sub-millisecond precision). */
  now(): number;
  /** Calls `fn` once after about `ms` milliseconds. Returns a handle for {@link Clock.clearTimeout}. */
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const origin = performance.timeOrigin;

/** The real clock: epoch ms with sub-millisecond precision, Node timers that do not keep the process alive by themselves when unref'd by the caller. */
export const systemClock: Clock = {
  now: () => origin + performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};
