import { type Clock, sharpenWakeups, systemClock } from './clock.js';
import { ValveError } from './errors.js';
import type { StoreErrorMode } from './options.js';
import type { StoreRule } from './rules/rule.js';
import type { AcquireResult } from './stores/store.js';
import { PAUSE_RECHECK, PAUSE_TRUST, type Wakeups } from './wakeups.js';

/*
 * The pace of admission: when the valve may ask the store next, and for how many jobs, from the
 * store's last answer (a refusal's hint, the adaptive batch) or failure (the backoff, the
 * onStoreError mode's state). Owned by the admission room, which reads it before each store call.
 */

/** Why the last acquisition stopped short. */
type Blocked = 'pause' | 'rate' | 'concurrency' | 'error' | null;

const STORE_BACKOFF_MIN = 100;
const STORE_BACKOFF_MAX = 5000;
/**
 * While nothing is granted, store calls are at least this far apart (ms, send to send): a store
 * answering "0 granted, retry now" (or corrupt state read as a negative wait) costs at most
 * about one call per millisecond per valve, never a loop.
 */
const MIN_EMPTY_CALL_GAP = 1;

/**
 * Where a synchronous store's hint counts from on this valve's clock: the store's own `now`
 * when it lies between the send and the answer (give or take the half µs the store rounds its
 * clock by: its slot opens at a whole µs on that rounded clock, so a timer at its hint is
 * never early), else the answer's time (a store on another clock).
 */
function syncBase(storeNow: number, sentAt: number, now: number): number {
  return storeNow >= sentAt - 0.001 && storeNow <= now ? storeNow : now;
}

/**
 * The most jobs (of cost 1) that `rules` can grant at once `waitMs` after a refusal: under each
 * rule, one plus those its emission interval refills meanwhile, at most its burst. A valve
 * holding a ticket of the store's line asks for that many at its turn, so that one call takes
 * the whole turn (the store grants what fits and gives the rest of the call a new ticket).
 */
function turnJobs(rules: readonly StoreRule[], waitMs: number): number {
  let jobs = Number.POSITIVE_INFINITY;
  for (const rule of rules) {
    const fit = Math.min(rule.burst, Math.floor((waitMs * 1000) / rule.emissionUs) + 1);
    if (fit < jobs) jobs = fit;
  }
  return jobs;
}

/**
 * How late (µs) a start may come under `rule` without costing it rate. GCRA: its burst
 * tolerance, (burst − 1) × emission interval, within which the bucket's state is ahead of the
 * clock and a late start takes the same slot. A window rule can start its whole limit at once,
 * so it counts with its interval: a fixed window started late by less than its interval still
 * starts its whole limit in that window, and a sliding window loses at most the lateness once
 * per interval (a unit comes back that much later: 0.1 % of a 1 s window for a start 1 ms late).
 */
function lateStartTolerance(rule: StoreRule): number {
  return rule.algorithm === 'gcra' ? (rule.burst - 1) * rule.emissionUs : rule.intervalUs;
}

/**
 * Whether a precise timer buys rate under `rules`: some rule tolerates less than 2 ms of
 * lateness (lateStartTolerance: a GCRA rule's burst tolerance, a window rule's interval), so a
 * start a timer tick late is lost for good instead of being absorbed.
 */
export function spinHelps(rules: readonly StoreRule[]): boolean {
  return rules.some((rule) => lateStartTolerance(rule) < 2000);
}

/**
 * precision 'timer' on the real clock, under a rule that cannot absorb a late start: rate waits
 * end on plain timers, so this thread's wake-ups are made as exact as Linux allows (clock.ts,
 * sharpenWakeups). 'spin' ends them on event-loop turns instead.
 */
export function sharpen(clock: Clock, spin: boolean, rules: readonly StoreRule[]): void {
  if (!spin && clock === systemClock && spinHelps(rules)) sharpenWakeups();
}

/**
 * Whether a valve takes part in the store's line of turns (docs/architecture.md, "Turns") under
 * `rules`: when every rule is GCRA (the stores keep a line only then) and can absorb a turn
 * taken a timer tick late (the opposite of spinHelps). There the line cuts the store calls to
 * about one per turn and loses nothing to a late wake-up. Under a rule that cannot (burst 1 at
 * 2,000/s), each slot would depend on one caller waking within tens of µs, and callers racing
 * for it use more of the limit (bench/results/shared-limit-turns.md).
 */
export function joinsLine(rules: readonly StoreRule[]): boolean {
  return rules.length > 0 && rules.every((rule) => rule.algorithm === 'gcra') && !spinHelps(rules);
}

export class Pace {
  /**
   * Jobs to ask for in the next store call: `batch`, or after a rate refusal one more than the
   * store last granted (at least 2), doubling back up to `batch` with every call granted in full.
   */
  private askFor: number;
  /** No acquisition before this (local clock); 0 when nothing holds admission back. */
  private nextAt = 0;
  /** Why the last acquisition stopped short, or null; a wake-up for that reason clears it with nextAt. */
  private blocked: Blocked = null;
  /** The last acquisition failed under onStoreError 'wait': expiring jobs reject STORE_UNAVAILABLE. */
  private storeFailing = false;
  /** The error of the last failed acquisition while storeFailing, else undefined. */
  private lastStoreError: unknown = undefined;
  /** The rate wait set by the last answer may use the clock's precise timer (see granted()). */
  private preciseRate = false;
  /** The current store backoff (ms): 0 after a success, else 100 doubling up to 5000. */
  private backoff = 0;
  /** onStoreError 'open': until then (local clock) jobs start without asking the store. */
  private openUntilAt = 0;
  /** When the last call that granted nothing was sent (local clock). */
  private lastEmptyAt = Number.NEGATIVE_INFINITY;
  /** The cost of the job the rate wait is for (the first job the store refused, or a cheaper head since). */
  private rateCost = Number.POSITIVE_INFINITY;

  constructor(
    /** The most jobs one store call asks for. */
    private readonly batch: number,
    /**
     * precision: 'spin', and some rule cannot absorb a late start (spinHelps: a GCRA burst
     * tolerance or a window's interval under 2 ms): a rate wait uses the clock's precise timer
     * (see granted()), since with burst 1 every late wake-up pushes all later starts back.
     * False by default: plain timers only, no store call before the hint. Changes with
     * setRules().
     */
    public precise: boolean,
    /** Tells how long to wait for a release (polling or notified). */
    private readonly wakeups: Wakeups,
  ) {
    this.askFor = batch;
  }

  /**
   * The rules, when the valve takes part in the store's line of turns (Admission), else null.
   * Changes with setRules().
   */
  turnRules: readonly StoreRule[] | null = null;

  /** Jobs to ask for in the next store call. */
  get ask(): number {
    return this.askFor;
  }

  /** No acquisition before this (local clock). */
  get wakeAt(): number {
    return this.nextAt;
  }

  /** onStoreError 'open': jobs start without the store until then (local clock). */
  get openUntil(): number {
    return this.openUntilAt;
  }

  /** The store is failing (onStoreError 'wait'). */
  get failing(): boolean {
    return this.storeFailing;
  }

  /** The last acquisition failed, in any mode, and none has been answered since (the backoff runs). */
  get backingOff(): boolean {
    return this.backoff > 0;
  }

  /** Whether the timer set for `next` needs the clock's precise timer (the rate wait set by the last answer, see granted()). */
  preciseWake(next: number): boolean {
    return this.preciseRate && this.blocked === 'rate' && next === this.nextAt;
  }

  /**
   * The valve holds a ticket whose turn is at `at` (local clock), to ask then for `ask` jobs, as
   * told by the answer to another call: an answer to a call that took no part in the line
   * changes neither (a call before the turn would be refused behind the head).
   */
  keepTurn(at: number, ask: number): void {
    if (this.nextAt < at) {
      this.nextAt = at;
      this.blocked = 'rate';
      this.preciseRate = false;
    }
    if (this.askFor < ask) this.askFor = ask;
  }

  /**
   * A wait for `reason` ends at once (a release freed slots; the pause was deleted; a rule
   * change ended with a refusal that may be the old rules' alone).
   */
  unblock(reason: 'pause' | 'concurrency' | 'rate'): void {
    if (this.blocked === reason) {
      this.blocked = null;
      this.nextAt = 0;
    }
  }

  /**
   * A rate wait ends by `at` at the latest (local clock): a rule change's transition ends
   * there, and the wait may have been the old rules' alone. Still no empty call sooner than
   * MIN_EMPTY_CALL_GAP after the last one.
   */
  capRate(at: number): void {
    if (this.blocked !== 'rate') return;
    const end = Math.max(at, this.lastEmptyAt + MIN_EMPTY_CALL_GAP);
    if (this.nextAt > end) {
      this.nextAt = end;
      this.preciseRate = false;
    }
  }

  /**
   * The queue has a new head, of `cost` (the head left, or a job now stands before it). A rate
   * wait is the store's for the cost of the job it refused: a cheaper head may fit sooner, so the
   * wait ends (still no empty call sooner than MIN_EMPTY_CALL_GAP after the last one); one of
   * equal or higher cost cannot fit sooner under any rule, and the wait stands. True when the
   * wait was cut short (the timer needs arming again).
   */
  newHead(cost: number): boolean {
    if (this.blocked !== 'rate' || !(cost < this.rateCost)) return false;
    this.rateCost = cost;
    const end = this.lastEmptyAt + MIN_EMPTY_CALL_GAP;
    if (this.nextAt <= end) return false;
    this.nextAt = end;
    this.preciseRate = false;
    return true;
  }

  /** Wake-ups stopped being delivered: a wait that counted on one becomes a poll. */
  unconfirmed(now: number): void {
    if (this.blocked === 'concurrency') {
      this.nextAt = Math.min(this.nextAt, now + this.wakeups.pollDelay(0));
    } else if (this.blocked === 'pause') {
      this.nextAt = Math.min(this.nextAt, now + PAUSE_RECHECK);
    }
  }

  /** The store answered: it is not failing. */
  storeAnswered(): void {
    this.storeFailing = false;
    this.lastStoreError = undefined;
    this.backoff = 0;
  }

  /**
   * The store granted `granted` of the `n` jobs asked for, in an answer `r` to a call sent at
   * `sentAt` (synchronously when `sync`); `resumedSince`: the pause was deleted since it was sent;
   * `refusedCost`: the cost of the first job refused (when granted < n).
   */
  granted(
    r: AcquireResult,
    granted: number,
    n: number,
    now: number,
    sentAt: number,
    sync: boolean,
    resumedSince: boolean,
    refusedCost: number,
  ): void {
    this.preciseRate = false;
    if (granted === n) {
      this.blocked = null;
      this.nextAt = 0;
      if (this.askFor < this.batch) this.askFor = Math.min(this.batch, this.askFor * 2);
      return;
    }
    // A checked answer (answers.ts): a finite hint ≥ 0.
    const hint = r.retryAfter;
    if (r.blocked === 'concurrency') {
      this.blocked = 'concurrency';
      this.nextAt = now + this.wakeups.pollDelay(hint);
    } else if (r.blocked === 'pause' && resumedSince) {
      // Refused for a pause that resume() has since deleted: ask again at once.
      this.blocked = null;
      this.nextAt = now;
    } else {
      this.blocked = r.blocked === 'pause' ? 'pause' : 'rate';
      this.rateCost = refusedCost;
      // An asynchronous store's hint counts from about when it ran, mid-flight: sleep for
      // the hint minus the acquisition's elapsed time, so the next call arrives on time. A
      // synchronous store's hint counts from its own now, a few µs after sentAt: when that now
      // is on this valve's clock (between the send and the answer), the wait ends as the slot
      // opens on it, however long the answer took to process (a process descheduled meanwhile
      // does not lose that time as well).
      this.nextAt = (sync ? syncBase(r.now, sentAt, now) : sentAt) + hint;
      // Unconfirmed wake-ups may miss the resume: recheck the pause at least once a second
      // (confirmed ones, at least every PAUSE_TRUST).
      if (this.blocked === 'pause') {
        this.nextAt = Math.min(this.nextAt, now + (this.wakeups.polling ? PAUSE_RECHECK : PAUSE_TRUST));
      }
    }
    // Never ask again at the same instant for nothing (a zero hint, or one lost in float
    // rounding), but don't oversleep a short hint either: at 1000/s a slot is 1 ms.
    if (granted === 0 && this.nextAt <= now) {
      this.nextAt = now + (this.blocked === null ? 0.01 : Math.max(hint, 0.01));
    }
    if (this.blocked === 'rate') {
      // The rule binds: ask for one more job than it just granted (at least 2, at most batch),
      // so that a refused call does not take a whole batch out of the queue and put it back,
      // while a partial answer still carries the wait for the next job.
      // Holding a ticket of the store's line, it asks at its turn for all the turn may grant.
      const turn = (r.turn ?? 0) > 0 && this.turnRules !== null ? turnJobs(this.turnRules, hint) : 0;
      this.askFor = Math.min(this.batch, Math.max(2, granted + 1, turn));
      // precision 'spin': a rule that cannot absorb a late start waits for its slot on the
      // clock's precise timer: after a synchronous answer always; after an asynchronous one
      // when less than a timer tick (1 ms) is left, so that a store a round trip away is not
      // asked a whole tick late (the call, sent at sentAt + hint, reaches the store about when
      // the slot opens). Longer waits on a network store use plain timers: its jitter
      // dominates, and a spinning process would take CPU from a local Redis. By default
      // (precise false) every rate wait is one plain timer to the hint.
      this.preciseRate = this.precise && (sync || this.nextAt - now < 1);
    }
    // Nothing granted: the next call waits at least MIN_EMPTY_CALL_GAP after this one was sent,
    // on a plain timer (a partial grant is never held back). Except (the store's line, see
    // docs/architecture.md, "Turns") when the answer leaves this valve holding a ticket and its
    // previous empty call is at least that gap old: its turn came a little before the slot
    // opened (the callers before it were late), and the hint is the exact wait for the slot, which
    // is kept for it. So still at most two empty calls per MIN_EMPTY_CALL_GAP.
    if (granted === 0) {
      const turn = (r.turn ?? 0) > 0 && sentAt - this.lastEmptyAt >= MIN_EMPTY_CALL_GAP;
      this.lastEmptyAt = sentAt;
      if (!turn && this.nextAt < sentAt + MIN_EMPTY_CALL_GAP) {
        this.nextAt = sentAt + MIN_EMPTY_CALL_GAP;
        this.preciseRate = false;
      }
    }
  }

  /** A store call failed (threw, rejected or answered nonsense): the backoff grows; `mode` decides what waits. */
  failed(err: unknown, mode: StoreErrorMode, now: number): void {
    this.backoff = this.backoff === 0 ? STORE_BACKOFF_MIN : Math.min(this.backoff * 2, STORE_BACKOFF_MAX);
    if (mode === 'open') {
      this.openUntilAt = now + this.backoff;
    } else if (mode === 'wait') {
      this.storeFailing = true;
      this.lastStoreError = err;
      this.blocked = 'error';
      // Exponential backoff with jitter: half fixed, half random.
      this.nextAt = now + this.backoff / 2 + (Math.random() * this.backoff) / 2;
    }
  }

  /** The error of a job that reached its maxWait before starting. */
  expiryError(): ValveError {
    return this.storeFailing
      ? new ValveError('STORE_UNAVAILABLE', 'The store is unavailable and the job reached its maxWait', {
          cause: this.lastStoreError,
        })
      : new ValveError('MAX_WAIT', 'The job did not start within its maxWait');
  }
}
