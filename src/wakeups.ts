import type { StoreErrorContext, StoreOperation } from './events.js';
import type { Pauses } from './pauses.js';
import type { Store, WakeEvent } from './stores/store.js';

/*
 * Wake-ups from the store: the subscription a valve takes before its first store call, and what
 * a 'pause', 'resume' or 'release' notification changes. Without a subscription (or a store
 * that does not notify), a wait on concurrency is polled. Owned by the admission room.
 */

const POLL_MIN = 50;
const POLL_JITTER = 25;
const NOTIFIED_RECHECK = 1000;

/** What the wake-ups may call above them (the admission room). */
export interface WakeupsHost {
  /** Whether wake-ups still matter: false once the valve closed without drain. */
  listening(): boolean;
  /** A 'release' wake-up: a wait on concurrency ends. */
  released(): void;
  /** After any wake-up: admission looks again. */
  woken(): void;
  /** Counts and emits a 'store-error'. */
  storeError(err: unknown, operation: StoreOperation, action: StoreErrorContext['action']): void;
}

export class Wakeups {
  /** subscribe() was called (once per valve, at its first store call). */
  private subscribed = false;
  /** Ends the store subscription; null when none is active (never taken, or ended by stop()). */
  private unsubscribe: (() => void) | null = null;

  constructor(
    /** The valve's id: the subscription is for it. */
    private readonly id: string,
    /** Sends the wake-ups (when it can subscribe). */
    private readonly store: Store,
    /** Learns of pauses and resumes announced by other valves. */
    private readonly pauses: Pauses,
    /** The admission room. */
    private readonly host: WakeupsHost,
  ) {}

  /** Subscribes to the store's wake-ups, the first time only. */
  subscribeOnce(): void {
    if (this.subscribed) return;
    this.subscribed = true;
    if (typeof this.store.subscribe !== 'function') return;
    try {
      const unsubscribe = this.store.subscribe(this.id, this.onWake);
      if (typeof unsubscribe === 'function') this.unsubscribe = unsubscribe;
    } catch (err) {
      this.host.storeError(err, 'subscribe', 'none');
    }
  }

  /**
   * How long to wait after a refusal on concurrency (ms): with a store that notifies releases,
   * the store's hint (at least 50 ms, at most 1 s: the wake-up comes first); else a short poll.
   */
  pollDelay(hint: number): number {
    if (this.store.notifies === true && this.unsubscribe !== null) {
      return Math.min(NOTIFIED_RECHECK, Math.max(POLL_MIN, hint > 0 ? hint : NOTIFIED_RECHECK));
    }
    return POLL_MIN + Math.random() * POLL_JITTER;
  }

  /** Ends the subscription (the valve closed). */
  stop(): void {
    if (this.unsubscribe === null) return;
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    try {
      unsubscribe();
    } catch (err) {
      this.host.storeError(err, 'subscribe', 'none');
    }
  }

  private readonly onWake = (event: WakeEvent): void => {
    if (!this.host.listening()) return;
    if (typeof event !== 'object' || event === null) return;
    if (event.type === 'pause') {
      if (typeof event.until === 'number') this.pauses.learn(event.until, false);
    } else if (event.type === 'resume') {
      this.pauses.resumedRemotely();
    } else if (event.type === 'release') {
      this.host.released();
    }
    this.host.woken();
  };
}
