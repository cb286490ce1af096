import type { Clock } from './clock.js';
import { describe } from './duration.js';
import { ValveError } from './errors.js';
import type { Emitter, StoreErrorContext, StoreOperation } from './events.js';
import { isThenable } from './maybe-promise.js';
import type { Lease, Store } from './stores/store.js';

/*
 * Global-concurrency leases of the running jobs: renewal, expiry, LEASE_LOST, batched release.
 * See docs/architecture.md, "The scheduler".
 *
 * A renewal that fails (throws/rejects), answers "not held", or does not answer before the
 * lease's conservative expiry (send time of the last successful renewal + leaseTtl, on this
 * process's clock) loses the lease at once: the job's signal aborts with a LEASE_LOST
 * ValveError and 'lease-lost' is emitted. A renewal that answers "held" after the lease's
 * local expiry does not restore it. A lost lease is still released once its job settles:
 * release removes only that token, so it frees the slot if the store still holds it and
 * changes nothing otherwise (it can never free a slot another job holds). Until then the
 * slot stays taken (or expires on the store by its TTL) while the job may still be running.
 *
 * A new lease counts from its acquisition's send time, as a renewed one from its renewal's:
 * its first renewal is due ttl / 3 after that send, and a grant processed after sentAt + ttl
 * never starts its job (Line.start asks `outlived`; the lease is released, the job requeued,
 * and after OUTLIVED_LIMIT such grants in a row it ends with LEASE_LOST).
 */

/**
 * Grants of one job in a row that came too late to be used (see Leases.outlived): at this many
 * the job ends with LEASE_LOST instead of asking again (a store that always answers later than
 * leaseTtl would otherwise grant, and spend rate budget, forever without the job ever running).
 */
export const OUTLIVED_LIMIT = 3;

/** A running job as this room sees it (the job room's Context). */
export interface LeaseHolder {
  /** The store's lease, or null without global concurrency. */
  heldLease: Lease | null;
  /** Local-clock time until which the lease is known held. */
  leaseExpiry: number;
  /** The LEASE_LOST error once the lease was lost, else null. */
  leaseLost: ValveError | null;
  /** Aborts the job's signal. */
  abort(reason: unknown): void;
}

/** What the leases room may call above it (wired by valve.ts). */
export interface LeasesHost {
  /** Counts and emits a 'store-error'. */
  storeError(err: unknown, operation: StoreOperation, action: StoreErrorContext['action']): void;
  /** A release call succeeded: slots are free on the store (a wait on concurrency ends), and a closing valve may be done. */
  leasesReleased(): void;
  /** A release call failed (already reported): a closing valve may be done. */
  releaseFailed(): void;
  /** An asynchronous renewal answered: the timer is re-armed and admission looks again. */
  renewalAnswered(): void;
}

export class Leases {
  /** Running jobs whose lease this valve holds: added at start; removed when lost or when the job settles. */
  private readonly leased = new Set<LeaseHolder>();
  /** When the next renewal is due (local clock); meaningful only while `leased` is not empty. */
  private renewAt = Number.POSITIVE_INFINITY;
  /** A renewal call is in flight (there is at most one). */
  private renewing = false;
  /** When the renewal in flight was sent (local clock). */
  private renewSentAt = 0;
  /**
   * The earliest grant send time of the leases tracked while a renewal was in flight (it does
   * not carry them); Infinity when none. Their first renewal is due leaseTtl / 3 after it.
   */
  private untrackedSentAt = Number.POSITIVE_INFINITY;
  /** Numbers the renewals: an answer to one given up on (see onTimer) is ignored. */
  private renewGen = 0;
  /** At most the earliest leaseExpiry in `leased` (exact after each renewal and expiry); Infinity when none. */
  private minLeaseExpiry = Number.POSITIVE_INFINITY;
  /** Tokens of settled jobs waiting for the next batched release call. */
  private releaseTokens: string[] = [];
  /** A flush of releaseTokens is queued as a microtask. */
  private releaseScheduled = false;
  /** Release calls sent and not yet answered. */
  private releasing = 0;
  /** Leases lost while their job ran (only grows). */
  private lostCount = 0;
  /**
   * Grants that came too late, per job that got one (see grantOutlived): kept off the Job
   * record, which every queued job carries, since this happens only with a store slower than
   * leaseTtl. Created at the first.
   */
  private outlivedGrants: WeakMap<object, number> | null = null;

  constructor(
    /** The valve's id: every renew and release names it. */
    private readonly id: string,
    /** Where the leases live. */
    private readonly store: Store,
    /** The valve's clock: renewal and expiry times are on it. */
    private readonly clock: Clock,
    /** leaseTtl (ms): a lease is renewed every ttl / 3 and known held until ttl after its last renewal was sent. */
    private readonly ttl: number,
    /** Emits 'lease-lost'. */
    private readonly events: Emitter,
    /** The valve above. */
    private readonly host: LeasesHost,
  ) {}

  /** Leases lost while their job ran. */
  get leasesLost(): number {
    return this.lostCount;
  }

  /** No release call is queued or in flight. */
  get idle(): boolean {
    return this.releasing === 0 && !this.releaseScheduled;
  }

  /**
   * Whether a lease granted by a call sent at `sentAt` has already expired as this process sees
   * it (sentAt + leaseTtl, see track): its job must not start (see Line.start).
   */
  outlived(sentAt: number): boolean {
    return sentAt + this.ttl <= this.clock.now();
  }

  /**
   * A grant for `job`, sent at `sentAt`, came too late to be used (see Line.start): the
   * LEASE_LOST error the job ends with when that makes OUTLIVED_LIMIT in a row, else null.
   * (A job's grants in a row: one in time starts it.)
   */
  grantOutlived(job: object, sentAt: number): ValveError | null {
    if (this.outlivedGrants === null) this.outlivedGrants = new WeakMap();
    const n = (this.outlivedGrants.get(job) ?? 0) + 1;
    this.outlivedGrants.set(job, n);
    return n >= OUTLIVED_LIMIT ? this.outlivedError(this.clock.now() - sentAt) : null;
  }

  /** The error of a job whose last OUTLIVED_LIMIT grants all came too late; `waited`: how long (ms) the last one took. */
  private outlivedError(waited: number): ValveError {
    return new ValveError(
      'LEASE_LOST',
      `The job was granted a global lease ${OUTLIVED_LIMIT} times in a row, but the store answered later than ` +
        `leaseTtl (${this.ttl} ms) each time (the last answer took ${Math.round(waited)} ms), so no grant could be used. ` +
        "Raise leaseTtl to at least ~3x the store's call timeout, or check the store's latency and the event loop.",
    );
  }

  /** A job started with `holder.heldLease`, granted by a call sent at `sentAt`. */
  track(holder: LeaseHolder, sentAt: number): void {
    const expiry = sentAt + this.ttl;
    holder.leaseExpiry = expiry;
    if (expiry < this.minLeaseExpiry) this.minLeaseExpiry = expiry;
    // The lease is known held from sentAt on, as after a renewal sent then: its first renewal is
    // due leaseTtl / 3 after sentAt, not after the job's start (an answer that came late would
    // leave that renewal too little time before the local expiry), and at once if that is past.
    if (this.renewing) {
      // Not in the renewal in flight: the next one is scheduled from its send time (renewed()).
      if (sentAt < this.untrackedSentAt) this.untrackedSentAt = sentAt;
    } else {
      const due = sentAt + this.ttl / 3;
      if (this.leased.size === 0 || due < this.renewAt) this.renewAt = due;
    }
    this.leased.add(holder);
  }

  /**
   * The job holding a lease settled: its lease is released, even when it was lost (a failed
   * renewal may have left it held on the store; release removes only this token). A lease whose
   * local expiry passed while the job ran to its end (a synchronous stretch the expiry timer
   * could not interrupt) is lost, as the timer would have found it: the job rejects LEASE_LOST.
   */
  settled(holder: LeaseHolder): void {
    if (holder.leaseLost === null && this.leased.has(holder) && holder.leaseExpiry <= this.clock.now()) {
      this.lose(holder, 'expired', undefined);
    }
    this.leased.delete(holder);
    this.releaseLater(holder.heldLease!.token);
  }

  /** When the timer must wake for leases (renewal or expiry); Infinity when nothing is leased. */
  nextDue(): number {
    if (this.leased.size === 0) return Number.POSITIVE_INFINITY;
    // While a renewal is in flight: also when it stops mattering (see onTimer).
    return this.renewing
      ? Math.min(this.minLeaseExpiry, this.renewSentAt + this.ttl)
      : Math.min(this.renewAt, this.minLeaseExpiry);
  }

  /** The timer fired: expires overdue leases and sends a renewal that is due. */
  onTimer(now: number): void {
    if (this.leased.size === 0) return;
    if (this.minLeaseExpiry <= now) this.expire(now);
    if (this.renewing && this.renewSentAt + this.ttl <= now) {
      // A renewal that has not answered in a whole TTL can no longer keep any lease (its answer
      // would count from its send time): given up, so that the leases taken since are renewed.
      // (A custom store may never answer; redisStore's own timeout fails it sooner.)
      this.renewing = false;
      this.renewGen++;
      this.renewAt = now;
    }
    if (!this.renewing && this.renewAt <= now) this.renew();
  }

  private renew(): void {
    const holders = [...this.leased];
    const tokens = holders.map((holder) => holder.heldLease!.token);
    const sentAt = this.clock.now();
    this.renewing = true;
    this.renewSentAt = sentAt;
    this.untrackedSentAt = Number.POSITIVE_INFINITY;
    const gen = ++this.renewGen;
    let result: unknown;
    try {
      result = this.store.renew(this.id, tokens, this.ttl);
    } catch (err) {
      this.renewFailed(holders, sentAt, err);
      return;
    }
    let later: boolean;
    try {
      later = isThenable(result);
    } catch (err) {
      // A `then` getter that throws: a failed renewal, not an uncaught exception.
      this.renewFailed(holders, sentAt, err);
      return;
    }
    if (later) {
      // Promise.resolve: a custom thenable whose then() throws rejects instead (a native
      // promise is used as it is).
      Promise.resolve(result).then(
        (held) => {
          if (gen !== this.renewGen) return;
          this.renewed(holders, sentAt, held);
          this.host.renewalAnswered();
        },
        (err: unknown) => {
          if (gen !== this.renewGen) return;
          this.renewFailed(holders, sentAt, err);
          this.host.renewalAnswered();
        },
      );
    } else {
      this.renewed(holders, sentAt, result);
    }
  }

  private renewed(holders: LeaseHolder[], sentAt: number, held: unknown): void {
    if (!Array.isArray(held)) {
      this.renewFailed(
        holders,
        sentAt,
        new TypeError(`store.renew() returned an invalid result: ${describe(held)}`),
      );
      return;
    }
    this.renewing = false;
    this.renewAt = Math.min(sentAt, this.untrackedSentAt) + this.ttl / 3;
    const expiry = sentAt + this.ttl;
    const now = this.clock.now();
    for (let i = 0; i < holders.length; i++) {
      const holder = holders[i]!;
      // A late answer never restores a lease already given up (or released: the job settled).
      if (holder.leaseLost !== null || !this.leased.has(holder)) continue;
      if (held[i] !== true) this.lose(holder, 'not-held', undefined);
      // The answer came after the lease's conservative expiry (before the timer saw it, e.g.
      // an event loop busy past it): the lease was already lost, a "held" cannot restore it.
      else if (holder.leaseExpiry <= now) this.lose(holder, 'expired', undefined);
      else holder.leaseExpiry = expiry;
    }
    this.recomputeExpiry();
  }

  private renewFailed(holders: LeaseHolder[], sentAt: number, err: unknown): void {
    this.renewing = false;
    this.renewAt = Math.min(sentAt, this.untrackedSentAt) + this.ttl / 3;
    this.host.storeError(err, 'renew', 'lease-lost');
    for (const holder of holders) {
      if (holder.leaseLost === null && this.leased.has(holder)) this.lose(holder, 'renew-failed', err);
    }
    this.recomputeExpiry();
  }

  private expire(now: number): void {
    for (const holder of [...this.leased]) {
      if (holder.leaseExpiry <= now) this.lose(holder, 'expired', undefined);
    }
    this.recomputeExpiry();
  }

  private recomputeExpiry(): void {
    let min = Number.POSITIVE_INFINITY;
    for (const holder of this.leased) if (holder.leaseExpiry < min) min = holder.leaseExpiry;
    this.minLeaseExpiry = min;
    if (this.leased.size === 0) this.renewAt = Number.POSITIVE_INFINITY;
  }

  private lose(holder: LeaseHolder, reason: 'not-held' | 'renew-failed' | 'expired', error: unknown): void {
    this.leased.delete(holder);
    const lease = holder.heldLease!;
    const message =
      reason === 'not-held'
        ? 'The job lost its global lease: the store no longer held it at renewal'
        : reason === 'renew-failed'
          ? 'The job lost its global lease: the renewal failed'
          : 'The job lost its global lease: no renewal succeeded before it expired';
    holder.leaseLost = new ValveError(
      'LEASE_LOST',
      message,
      error === undefined ? undefined : { cause: error },
    );
    this.lostCount++;
    holder.abort(holder.leaseLost);
    this.events.emit(
      'lease-lost',
      error === undefined
        ? { token: lease.token, fence: lease.fence, reason }
        : { token: lease.token, fence: lease.fence, reason, error },
    );
  }

  /** Releases `token` in the next batched call: one store call per tick. */
  releaseLater(token: string): void {
    this.releaseTokens.push(token);
    if (!this.releaseScheduled) {
      this.releaseScheduled = true;
      queueMicrotask(this.flushRelease);
    }
  }

  private readonly flushRelease = (): void => {
    this.releaseScheduled = false;
    const tokens = this.releaseTokens;
    if (tokens.length === 0) return;
    this.releaseTokens = [];
    this.releasing++;
    let result: unknown;
    try {
      result = this.store.release(this.id, tokens);
    } catch (err) {
      this.releaseFailed(err);
      return;
    }
    let later: boolean;
    try {
      later = isThenable(result);
    } catch (err) {
      this.releaseFailed(err);
      return;
    }
    // Promise.resolve: a custom thenable whose then() throws rejects instead.
    if (later) Promise.resolve(result).then(this.released, this.releaseFailed);
    else this.released();
  };

  private readonly released = (): void => {
    this.releasing--;
    this.host.leasesReleased();
  };

  private readonly releaseFailed = (err: unknown): void => {
    this.releasing--;
    this.host.storeError(err, 'release', 'none');
    this.host.releaseFailed();
  };
}
