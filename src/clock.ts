/**
 * The one seam for time and timers. The valve and the memory store read time and
 * set timers only through a Clock, so tests can drive both with a virtual clock.
 */
export interface Clock {
  /** Current time in epoch milliseconds; may carry a fraction (sub-millisecond precision). */
  now(): number;
  /** Calls `fn` once after `ms` milliseconds (fractional allowed), never earlier. Returns a handle for {@link Clock.clearTimeout}. */
  setTimeout(fn: () => void, ms: number): unknown;
  /**
   * Optional: like setTimeout, but fires within microseconds of its target instead of up to a
   * millisecond late, by checking the time on every event-loop turn during the last moments
   * before it. The valve uses it only where a late wake-up would cost rate. Without it,
   * setTimeout is used.
   */
  setPreciseTimeout?(fn: () => void, ms: number): unknown;
  /** Cancels a timer from setTimeout or setPreciseTimeout. */
  clearTimeout(handle: unknown): void;
}

const origin = performance.timeOrigin;
const now = (): number => origin + performance.now();

/**
 * How long before its target a precise timer hands over from Node's millisecond timers
 * to checking on every event-loop turn (setImmediate, so I/O keeps flowing). Node timers
 * fire up to about a millisecond late; at 1000 starts/s with burst 1 that alone costs
 * 10–20 % of the rate, because a late start pushes every later one.
 */
const SPIN_WINDOW_MS = 1.5;

/**
 * The most (ms) a plain timer spends checking the time on event-loop turns at the end of a
 * wait, instead of sleeping a whole millisecond more for a fraction of one (see Timer.arm). A
 * bound on the CPU a plain wait can cost, about what waking up costs anyway: under
 * GCRA with `burst: 1` a start a millisecond late is lost for good.
 */
const PLAIN_TAIL_MS = 0.25;

/**
 * The longest delay Node's timers take (2^31 − 1 ms, 24.8 days). A longer one is clamped to
 * 1 ms with a TimeoutOverflowWarning, so a long wait (a 30-day pause, a monthly window spent
 * early) would become a 1 ms busy loop: such a wait sleeps in chunks of this length instead.
 */
export const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;

/**
 * A timer that never fires before its target on the performance clock. Node's timers
 * count from the event loop's cached time and can fire early by up to a millisecond by
 * that measure; when they do, this re-arms for the rest (so does a wait longer than Node's
 * longest timer, in chunks of MAX_TIMER_DELAY_MS). With a spin window, the last
 * part of the wait is spent checking once per event-loop turn.
 */
class Timer {
  private coarse: ReturnType<typeof setTimeout> | null = null;
  private fine: ReturnType<typeof setImmediate> | null = null;

  constructor(
    private readonly fn: () => void,
    private readonly target: number,
    private readonly spinWindow: number,
  ) {
    this.arm(target - now());
  }

  private arm(remaining: number): void {
    // Whole milliseconds only: Node truncates a fractional delay, fires early, then
    // reschedules, and that path lands late by 2–4 ms several times as often (measured:
    // 3–4 % of setTimeout(3.5) calls against 0.3–1.2 % for whole delays).
    let coarse: number;
    if (this.spinWindow > 0) coarse = Math.floor(remaining - this.spinWindow);
    else {
      // A plain timer rounds up to the next whole millisecond, unless that would oversleep
      // by more than 1 − PLAIN_TAIL_MS: then it sleeps the whole milliseconds below and
      // finishes the fraction left (at most PLAIN_TAIL_MS) on event-loop turns. Node's
      // timers also fire early (they count from the event loop's cached millisecond): the
      // rest of such a wait, when that small, no longer costs a whole millisecond more.
      const whole = Math.floor(remaining);
      coarse = remaining - whole <= PLAIN_TAIL_MS ? whole : whole + 1;
    }
    if (coarse >= 1) this.coarse = setTimeout(this.check, Math.min(coarse, MAX_TIMER_DELAY_MS));
    else this.fine = setImmediate(this.check);
  }

  private readonly check = (): void => {
    this.coarse = null;
    this.fine = null;
    const remaining = this.target - now();
    if (remaining <= 0) this.fn();
    else this.arm(remaining);
  };

  cancel(): void {
    if (this.coarse !== null) clearTimeout(this.coarse);
    if (this.fine !== null) clearImmediate(this.fine);
    this.coarse = null;
    this.fine = null;
  }
}

/** A timer's target; a negative or NaN delay means now. */
const target = (ms: number): number => now() + (Number.isNaN(ms) ? 0 : Math.max(ms, 0));

/**
 * The real clock: epoch ms with sub-millisecond precision (performance.timeOrigin +
 * performance.now(), monotonic within a process). Its timers never fire early; precise
 * timers also fire within microseconds of their target (see SPIN_WINDOW_MS).
 */
export const systemClock: Clock = {
  now,
  setTimeout: (fn, ms) => new Timer(fn, target(ms), 0),
  setPreciseTimeout: (fn, ms) => new Timer(fn, target(ms), SPIN_WINDOW_MS),
  clearTimeout: (handle) => (handle as Timer).cancel(),
};
