import type { Clock } from './clock.js';

/**
 * A valve's one timer. The admission room decides when to wake (the next admission, the
 * earliest maxWait deadline, a lease renewal or expiry) and whether the clock's precise timer
 * is needed; this holds the one pending timeout.
 */
export class Timer {
  /** The pending timeout's handle, or null when none is set. */
  private handle: unknown = null;
  /** When the pending timeout fires (local clock); Infinity when none is set. */
  private at = Number.POSITIVE_INFINITY;

  constructor(
    /** Sets and clears the timeouts. */
    private readonly clock: Clock,
    /** Called when the timeout fires (after handle and at are reset). */
    private readonly fire: () => void,
  ) {}

  /**
   * Wakes at `next` (Infinity: not at all). A pending timeout that fires no later is kept (the
   * wake-up recomputes then); `precise` uses the clock's precise timer.
   */
  wakeAt(next: number, precise: boolean): void {
    if (next === Number.POSITIVE_INFINITY) {
      this.clear();
      return;
    }
    if (this.handle !== null) {
      if (this.at <= next) return; // an earlier wake-up recomputes then
      this.clock.clearTimeout(this.handle);
    }
    const now = this.clock.now();
    const delay = next > now ? next - now : 0;
    this.at = now + delay;
    this.handle = precise
      ? this.clock.setPreciseTimeout!(this.onTimeout, delay)
      : this.clock.setTimeout(this.onTimeout, delay);
  }

  /** Cancels the pending timeout, if any. */
  clear(): void {
    if (this.handle === null) return;
    this.clock.clearTimeout(this.handle);
    this.handle = null;
    this.at = Number.POSITIVE_INFINITY;
  }

  private readonly onTimeout = (): void => {
    this.handle = null;
    this.at = Number.POSITIVE_INFINITY;
    this.fire();
  };
}
