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

import { readFileSync, writeFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

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
 * The timer slack (ns) plain timers run with where a late start is lost for good (see
 * sharpenWakeups). Linux may wake a sleeping thread up to its timer slack after the time it
 * asked for (50 µs by default; for epoll's sleeps the larger of that and 0.1 % of the
 * timeout), so that nearby wake-ups share one. On the 2-core VM of bench/results/history.md a
 * 1 ms Node timer came back 0.13–0.15 ms late at the median with the default, 0.08–0.11 ms
 * with 1 µs, and a saturated burst-1 valve at 1000/s got 86.6 % of its rate instead of 81.6 %
 * (medians of 16 paired runs).
 */
export const TIMER_SLACK_NS = 1000;

/** Where Linux (4.6 and later) keeps the timer slack of a process's main thread. */
const SLACK_FILE = '/proc/self/timerslack_ns';

/**
 * Lowers the timer slack in `file` (a /proc timerslack_ns file) to TIMER_SLACK_NS, unless it
 * is that low already. Whether it did; false also when the file cannot be read or written (no
 * such file, a read-only /proc, Node's permission model).
 */
export function lowerTimerSlack(file: string): boolean {
  try {
    const current = Number(readFileSync(file, 'utf8'));
    if (!(current > TIMER_SLACK_NS)) return false;
    writeFileSync(file, String(TIMER_SLACK_NS));
    return true;
  } catch {
    return false;
  }
}

let sharpened = false;

/**
 * Once per process, on Linux, in the main thread: lowers that thread's timer slack to
 * TIMER_SLACK_NS (1 µs), so that its plain timers wake up within microseconds of the time the
 * kernel was asked for instead of up to 50 µs after it. A valve calls this when it times rate
 * waits on systemClock's plain timers under a rule that cannot absorb a late start (burst 1 at
 * a high rate): every µs a wake-up comes late is lost for good there. It costs no CPU of its
 * own (the valve wakes up as often as before); the process's other sleeps are no longer
 * delayed to share a wake-up. The slack is the thread's, so nothing is done in a worker thread
 * (/proc/self is the main thread's); it is not restored.
 */
export function sharpenWakeups(): void {
  if (sharpened) return;
  sharpened = true;
  if (process.platform === 'linux' && isMainThread) lowerTimerSlack(SLACK_FILE);
}

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
