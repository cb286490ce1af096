import type { Pauses } from './pauses.js';
import { PAUSE_RECHECK, PAUSE_TRUST, type Wakeups } from './wakeups.js';

/*
 * The pause gate: until when the known pause holds the admission room (admission.ts) back from
 * asking the store. The cached pause is trusted only as far as the wake-ups that would end it
 * are (wakeups.ts): a second after the last store call while they are not confirmed, and
 * PAUSE_TRUST after the pause was last heard of while they are. A pause this valve applied that
 * the store has not confirmed holds it to its end whatever the store says; a recheck (wake-ups
 * may have been missed) lets the next call through. See docs/architecture.md, "The scheduler".
 */
export class PauseGate {
  /** The next store call is sent even under the cached pause (wake-ups may have been missed); cleared when sent. */
  recheck = false;
  /** When the last acquisition was sent (local clock): an unconfirmed subscription rechecks the pause after PAUSE_RECHECK. */
  private lastSentAt = Number.NEGATIVE_INFINITY;

  constructor(
    /** The known pause. */
    private readonly pauses: Pauses,
    /** Whether wake-ups are confirmed. */
    private readonly wakeups: Wakeups,
  ) {}

  /** An acquisition was sent at `now`: it carries the recheck. */
  sent(now: number): void {
    this.lastSentAt = now;
    this.recheck = false;
  }

  /**
   * Until when the cached pause holds admission back: its end, or (wake-ups not confirmed, so
   * a resume may go unnoticed) a second after the last store call, and with confirmed ones
   * PAUSE_TRUST after the pause was last heard of (a wake-up can be lost); 0 when the store is
   * to be asked anyway.
   */
  end(): number {
    const pauses = this.pauses;
    // A pause this valve applied that the store has not confirmed (its write failed or is in
    // flight): no store answer can end it, so the store is not asked before its end.
    const held = pauses.unconfirmedUntil;
    if (this.recheck) return held;
    const until = pauses.cachedUntil;
    let end: number;
    if (until > this.lastSentAt + PAUSE_RECHECK && this.wakeups.polling) {
      end = this.lastSentAt + PAUSE_RECHECK;
    } else {
      // Confirmed wake-ups: still asked at least every PAUSE_TRUST after the pause was last heard of.
      const trustedUntil = Math.max(this.lastSentAt, pauses.heardAt) + PAUSE_TRUST;
      end = Math.min(until, trustedUntil);
    }
    return Math.max(held, end);
  }

  /**
   * onStoreError 'open' (jobs start without the store until `openUntil`) inside a known pause:
   * until the open window or the pause ends (the earlier), admission neither starts jobs open
   * nor asks the store; 0 otherwise.
   */
  openHeld(openUntil: number): number {
    if (openUntil === 0) return 0;
    return Math.min(openUntil, this.pauses.until);
  }
}
