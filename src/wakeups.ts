import type { StoreErrorContext, StoreOperation } from './events.js';
import type { Pauses } from './pauses.js';
import type { Store, WakeEvent, WakeStatus } from './stores/store.js';

/*
 * Wake-ups from the store: the subscription a valve holds while it has work (taken before a
 * store call, ended when the valve goes idle or closes), whether the store confirmed it, and
 * what a 'pause', 'resume' or 'release' notification changes. Owned by the admission room.
 *
 * A wake-up is a cue, never a fact: Redis pub/sub channels are server-wide (a classic channel
 * ignores the database, and ioredis' keyPrefix does not prefix it), so processes on another
 * database or keyPrefix with the same prefix and id send the same messages, and anyone may
 * publish. So no message holds jobs: a 'pause' makes a valve with jobs queued and no known
 * pause ask the store now (Pauses.heard), whose answer it caches; a 'resume' drops the cached pause (the next call
 * asks); a 'release' ends a wait on concurrency (the next call asks). Cross-talk costs at most
 * a store call per message and listening valve.
 *
 * Wake-ups are trusted only while the store confirms it delivers them for the id (`live`):
 * through onStatus, else store.listening(id), else store.notifies. Otherwise a wait on
 * concurrency is polled (50 ms plus jitter) and, when the store could notify, a cached pause is
 * rechecked at least once a second (`polling`). Without any subscription, a cached pause is
 * slept out to its end or PAUSE_TRUST after it was last heard of (pause-gate.ts): a resume
 * elsewhere is noticed at that store call. A new subscription taken while a pause is known
 * asks the store once (ensure()): wake-ups of the time it did not listen are unknown.
 */

const POLL_MIN = 50;
const POLL_JITTER = 25;
const NOTIFIED_RECHECK = 1000;
/** While wake-ups are not confirmed, a cached pause is checked with the store at least this often (ms). */
export const PAUSE_RECHECK = 1000;
/**
 * Even while wake-ups are confirmed, a cached pause is checked with the store at least this
 * often (ms), counted from the last store answer or own write that reported it (a wake-up
 * never restarts it): pub/sub delivers at most once, and a subscription can end without the
 * client noticing (a cluster slot migration), so a missed resume costs at most this long.
 */
export const PAUSE_TRUST = 30_000;

/** What the wake-ups may call above them (the admission room). */
export interface WakeupsHost {
  /** Whether wake-ups still matter: false once the valve closed without drain. */
  listening(): boolean;
  /** A 'release' wake-up: a wait on concurrency ends. */
  released(): void;
  /** After any wake-up: admission looks again. */
  woken(): void;
  /** The store confirmed the wake-ups: some may have been missed before, so the store is asked once. */
  confirmed(): void;
  /** Wake-ups stopped being delivered: waits that counted on them are shortened to polls. */
  unconfirmed(): void;
  /** Counts and emits a 'store-error'. */
  storeError(err: unknown, operation: StoreOperation, action: StoreErrorContext['action']): void;
}

export class Wakeups {
  /** Ends the store subscription; null while none is held (never taken, idle, closed, or refused). */
  private unsubscribe: (() => void) | null = null;
  /** subscribe() threw once: it is not tried again (reported once), and the valve does without. */
  private broken = false;
  /** A subscription was held before (a new one may have missed wake-ups in between). */
  private heldBefore = false;
  /** The store's last word on this subscription through onStatus; null when it said nothing since subscribing. */
  private heard: boolean | null = null;
  /** A refused subscription was reported and the store has not confirmed one since. */
  private refusalReported = false;
  /** Inside store.subscribe(): a status it gives before returning is kept in `early`. */
  private subscribing = false;
  /** Statuses given inside store.subscribe(), applied once it returned; null when none. */
  private early: WakeStatus[] | null = null;

  constructor(
    /** The valve's id: the subscription is for it. */
    private readonly id: string,
    /** Sends the wake-ups (when it can subscribe). */
    private readonly store: Store,
    /** Told of the pauses and resumes other valves announce (cues to ask the store). */
    private readonly pauses: Pauses,
    /** The admission room. */
    private readonly host: WakeupsHost,
  ) {}

  /**
   * Holds a subscription to the store's wake-ups (the valve has work). Returns true when it
   * took a new one after having held one before, or while it knows a pause (learned while it
   * did not listen: another valve may have resumed it since, however recently it heard of it):
   * wake-ups of the gap are unknown, so the caller asks the store once instead of trusting what
   * it cached. A store that confirms the subscription later (Redis) is asked once more then; one
   * that delivers at once and never confirms (the memory store) only this once.
   */
  ensure(): boolean {
    if (this.unsubscribe !== null || this.broken) return false;
    if (typeof this.store.subscribe !== 'function') return false;
    this.heard = null;
    this.subscribing = true;
    try {
      const unsubscribe = this.store.subscribe(this.id, this.onWake, this.onStatus);
      this.subscribing = false;
      if (typeof unsubscribe !== 'function') {
        this.broken = true;
        this.early = null;
        return false;
      }
      this.unsubscribe = unsubscribe;
    } catch (err) {
      this.subscribing = false;
      this.early = null;
      this.broken = true;
      this.host.storeError(err, 'subscribe', 'none');
      return false;
    }
    // A store may confirm or refuse inside subscribe() (a refusal it knew already): applied now.
    const early = this.early;
    if (early !== null) {
      this.early = null;
      for (const status of early) this.onStatus(status);
    }
    const again = this.heldBefore || this.pauses.known;
    this.heldBefore = true;
    return again;
  }

  /** Wake-ups for the id are delivered now, as far as the store says. */
  get live(): boolean {
    if (this.unsubscribe === null) return false;
    if (this.heard !== null) return this.heard;
    const store = this.store;
    if (typeof store.listening === 'function') {
      try {
        return store.listening(this.id) === true;
      } catch {
        return false;
      }
    }
    return store.notifies === true;
  }

  /** A subscription is held but not confirmed: cached pauses are rechecked, concurrency polled. */
  get polling(): boolean {
    return this.unsubscribe !== null && !this.live;
  }

  /**
   * How long to wait after a refusal on concurrency (ms): with confirmed wake-ups, the store's
   * hint (at least 50 ms, at most 1 s: the wake-up comes first); else a short poll.
   */
  pollDelay(hint: number): number {
    if (this.live) {
      return Math.min(NOTIFIED_RECHECK, Math.max(POLL_MIN, hint > 0 ? hint : NOTIFIED_RECHECK));
    }
    return POLL_MIN + Math.random() * POLL_JITTER;
  }

  /** Ends the subscription (the valve went idle, or closed). The next ensure() takes a new one. */
  stop(): void {
    if (this.unsubscribe === null) return;
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    this.heard = null;
    try {
      unsubscribe();
    } catch (err) {
      this.host.storeError(err, 'subscribe', 'none');
    }
  }

  private readonly onWake = (event: WakeEvent): void => {
    if (this.unsubscribe === null || !this.host.listening()) return;
    if (typeof event !== 'object' || event === null) return;
    if (event.type === 'pause') {
      this.pauses.heard();
    } else if (event.type === 'resume') {
      this.pauses.resumedRemotely();
    } else if (event.type === 'release') {
      this.host.released();
    }
    this.host.woken();
  };

  private readonly onStatus = (status: WakeStatus): void => {
    if (this.subscribing && typeof status === 'object' && status !== null) {
      // Copied: a store may reuse its status object.
      const copy = { listening: status.listening, error: status.error };
      if (this.early === null) this.early = [copy];
      else this.early.push(copy);
      return;
    }
    if (this.unsubscribe === null || typeof status !== 'object' || status === null) return;
    // The store updates listening(id) before it tells: compare with what it told last.
    if (status.listening === true) {
      const was = this.heard === true;
      this.heard = true;
      this.refusalReported = false;
      if (!was && this.host.listening()) this.host.confirmed();
      return;
    }
    const was = this.heard !== false;
    this.heard = false;
    if (status.error !== undefined && !this.refusalReported) {
      // The server refused the subscription (e.g. an ACL without +subscribe): said once.
      this.refusalReported = true;
      this.host.storeError(status.error, 'subscribe', 'none');
    }
    if (was && this.host.listening()) this.host.unconfirmed();
  };
}
