import { checkAcquireAnswer } from './answers.js';
import type { Clock } from './clock.js';
import { ValveError } from './errors.js';
import type { Emitter, StoreErrorContext, StoreOperation } from './events.js';
import type { Job, Jobs } from './job.js';
import type { Leases } from './leases.js';
import { type Call, Line } from './line.js';
import type { NormalizedOptions, StoreErrorMode } from './options.js';
import { joinsLine, Pace, sharpen, spinHelps } from './pace.js';
import { PauseGate } from './pause-gate.js';
import type { Pauses } from './pauses.js';
import { Pump } from './pump.js';
import type { StoreRule } from './rules/rule.js';
import { RuleSet, type RulesCarry } from './rulesets.js';
import type { AcquireResult, Lease, Store } from './stores/store.js';
import { Timer } from './timer.js';
import type { Waiting } from './waiting.js';
import { Wakeups } from './wakeups.js';

/*
 * The admission room: the store calls that ask for the start of waiting jobs (taken from the
 * queue room, waiting.ts, into the in-flight line, line.ts), the store's answers and the
 * onStoreError modes, when to ask again, the store's wake-ups (wakeups.ts) and the one timer
 * (timer.ts). See docs/architecture.md, "The scheduler".
 *
 * Jobs never start synchronously inside run(): admission happens in a microtask, so many
 * run() calls in one tick cost one store call per batch. Synchronous stores (memory) are
 * called without a promise in between.
 */

/** What the admission room may call above it (wired by valve.ts). */
export interface AdmissionHost {
  /** Counts and emits a 'store-error'. */
  storeError(err: unknown, operation: StoreOperation, action: StoreErrorContext['action']): void;
  /** A store answer was processed: a closing valve may be done. */
  checkClosed(): void;
}

export class Admission {
  /** Where the budget lives: every acquisition goes to it. */
  private readonly store: Store;
  /** The valve's clock (local time, timers). */
  private readonly clock: Clock;
  /** Local slots (Infinity when unlimited): running jobs plus jobs in line never exceed it. */
  private readonly limit: number;
  /** Global concurrency: every granted job comes with a lease. */
  private readonly global: boolean;
  /** onStoreError: what a failed acquisition does to the jobs it carried and to those queued. */
  private readonly mode: StoreErrorMode;
  /** The store calls in flight and their jobs. */
  private readonly line: Line;
  /** When admission rounds run. */
  private readonly pump: Pump;
  /** The one timer: the next admission, maxWait deadline, lease renewal or expiry. */
  private readonly timer: Timer;
  /** The store's wake-ups (subscribed before the first store call). */
  private readonly wakeups: Wakeups;
  /** When to ask the store next, and for how many jobs. */
  private readonly pace: Pace;
  /** The answer being processed (or last processed): its call's send time (local clock). */
  private answerSentAt = 0;
  /** The answer being processed (or last processed) came synchronously. */
  private answerWasSync = false;
  /** A job was enqueued since the last 'idle' event: the next idle moment emits one. */
  private workSinceIdle = false;
  /** Jobs may be taken from the queue: false once the valve closed without drain. */
  private admitting = true;
  /**
   * Bumped by every release of a slot (this valve's release call, a 'release' wake-up): a
   * refusal on concurrency answered to a call sent before was decided before the release.
   */
  private releases = 0;
  /** Until when the known pause holds the next store call back. */
  private readonly gate: PauseGate;
  /** The rules sent, their changes and the id's rule-set record (rulesets.ts). */
  private readonly ruleSet: RuleSet;
  /**
   * The ticket this valve holds in the id's line (0: none), from the last answer that carried
   * one: sent with every acquisition, so that a store keeping a line (docs/architecture.md,
   * "Turns") refuses the callers behind this one while it is its turn, and tells it when its
   * turn comes (the answer's retryAfter, which the pace follows as any other).
   */
  private turn = 0;

  /** precision: 'spin': rate waits under rules that cannot absorb a late start use the clock's precise timer. */
  private readonly spin: boolean;
  /** After setRules() with calls in flight: their jobs not granted are checked against this cost once back in the queue. */
  private costCheck: ((job: Job) => Error | undefined) | undefined;

  constructor(
    o: NormalizedOptions,
    store: Store,
    /** The queue room: jobs are taken from it and put back into it. */
    private readonly waiting: Waiting,
    /** The job room: counts of pending and running jobs, deadlines, job ends. */
    private readonly jobs: Jobs,
    /** The known pause: no acquisition before its end; every answer updates it. */
    private readonly pauses: Pauses,
    /** The leases room, for the timer (renewals, expiries). */
    private readonly leases: Leases,
    /** Emits 'idle'. */
    private readonly events: Emitter,
    /** The valve above. */
    private readonly host: AdmissionHost,
  ) {
    this.store = store;
    this.clock = o.clock;
    this.limit = o.limit;
    this.global = o.global;
    this.mode = o.onStoreError;
    const lease = o.global ? { limit: o.limit, ttl: o.leaseTtl } : undefined;
    const settled = (call: Call, ok: boolean, value: unknown): void => this.callSettled(call, ok, value);
    // The clock ends a rule change's transition.
    this.ruleSet = new RuleSet(o.rules, o.recordTtl, o.clock, o.rulesCarry);
    this.line = new Line(o.id, o.rules, lease, jobs, leases, settled);
    this.pump = new Pump(
      () => this.admit(),
      () => this.pumped(),
    );
    this.timer = new Timer(o.clock, this.onTimer);
    this.wakeups = new Wakeups(o.id, store, pauses, {
      listening: () => this.admitting,
      released: () => this.unblock('concurrency'),
      woken: () => this.schedulePump(),
      confirmed: () => {
        this.recheckStore();
        this.schedulePump();
      },
      unconfirmed: () => {
        this.pace.unconfirmed(this.clock.now());
        this.schedulePump();
      },
      storeError: host.storeError,
    });
    this.gate = new PauseGate(pauses, this.wakeups);
    this.spin = o.precision === 'spin';
    this.pace = new Pace(o.batch, this.spin && spinHelps(o.rules), this.wakeups);
    sharpen(this.clock, this.spin, o.rules);
    this.pace.turnRules = joinsLine(o.rules) ? o.rules : null;
  }

  /** The last acquisition failed and none has been answered since: wrapFetch asks no fleet ticket. */
  get storeFailing(): boolean {
    return this.pace.backingOff;
  }

  /** Store calls in flight. */
  get inFlight(): number {
    return this.line.inFlight;
  }

  /** A job joined the queue: admission looks (in a microtask), and the next idle moment emits 'idle'. */
  jobQueued(): void {
    this.workSinceIdle = true;
    this.schedulePump();
  }

  /** The queue has a new head of `cost`: a cheaper one ends a rate wait (Pace.newHead); with a call in flight, its answer looks. */
  newHead(cost: number): void {
    if (this.line.inFlight === 0 && this.pace.newHead(cost)) this.schedulePump();
  }

  /** A wait for `reason` ends at once (a release freed slots; the pause was deleted). */
  unblock(reason: 'pause' | 'concurrency'): void {
    if (reason === 'concurrency') this.releases++;
    this.pace.unblock(reason);
  }

  /**
   * A wake-up this valve could not trust (see Pauses.heard): with jobs queued, the next store
   * call goes out now, whatever the waits say (a rate refusal's included); its answer tells.
   */
  askStore(): void {
    if (this.waiting.count === 0) return;
    this.recheckStore();
    this.pace.unblock('rate');
    this.schedulePump();
  }

  /** Wake-ups may have been missed: the next store call goes out whatever the cached pause or a wait for a wake-up says. */
  private recheckStore(): void {
    this.gate.recheck = true;
    this.pace.unblock('pause');
    this.pace.unblock('concurrency');
  }

  /**
   * valve.setRules(): later calls carry `rules` (the first one converting the store's state);
   * waiting jobs that `tooCostly` refuses end with its error, now or when their call returns.
   */
  setRules(rules: readonly StoreRule[], tooCostly: (job: Job) => Error | undefined): void {
    this.ruleSet.set(rules);
    this.pace.precise = this.spin && spinHelps(rules);
    sharpen(this.clock, this.spin, rules);
    this.pace.turnRules = joinsLine(rules) ? rules : null;
    // Out of the line: a ticket held from before is not waited for.
    if (this.pace.turnRules === null) this.turn = 0;
    this.waiting.endWhere(tooCostly);
    this.costCheck = this.line.inFlight > 0 ? tooCostly : undefined;
    this.schedulePump();
  }

  /** What a valve group's next valve of this key takes over of the rule changes (RuleSet.carry()). */
  rulesCarry(): RulesCarry | undefined {
    return this.ruleSet.carry();
  }

  /** close() without drain: no more jobs are taken; queued and in-flight jobs end with `error`. */
  cancel(error: ValveError): void {
    this.admitting = false;
    this.waiting.endAll(error);
    // Jobs of the calls in flight, or of a batch being started (a job that closes the valve).
    this.line.endAll(error);
  }

  /** The valve is closed and done: the timer stops and the store subscription ends. */
  shutDown(): void {
    this.timer.clear();
    this.wakeups.stop();
  }

  // ---------------------------------------------------------------- the pump

  /** Admission looks again, in a microtask (see Pump). */
  schedulePump(): void {
    this.pump.schedule();
  }

  /** Admission looks again now (after an asynchronous renewal answered). */
  runPump(): void {
    this.pump.run();
  }

  /**
   * The admission rounds are done: the timer is armed and 'idle' emitted if due. A valve with
   * nothing queued, in flight, running or being released holds nothing in its store (its
   * subscription ends; the next acquisition takes a new one), so an unreferenced idle valve
   * can be garbage-collected.
   */
  private pumped(): void {
    this.arm();
    if (this.jobs.pending === 0 && this.jobs.runningCount === 0 && this.line.inFlight === 0) {
      if (this.leases.idle) this.wakeups.stop();
      if (this.workSinceIdle) {
        this.workSinceIdle = false;
        this.events.emit('idle');
      }
    }
  }

  /** One admission round. Returns true when it made synchronous progress and another round may help. */
  private admit(): boolean {
    const waiting = this.waiting;
    if (waiting.count === 0) return false;
    if (!this.admitting) return false;
    const line = this.line;
    const piped = line.inFlight > 0;
    const pace = this.pace;
    // No second call while the store is failing or a rule change waits for its conversion.
    if (piped && !line.mayPipeline(pace.failing || this.ruleSet.unconverted)) return false;
    // The jobs in line may all start: leave room for them.
    const free = this.limit - this.jobs.runningCount - line.length;
    if (free <= 0) return false;
    // Wake-ups are followed from the first store call while there is work.
    if (this.wakeups.ensure()) this.recheckStore();
    const now = this.clock.now();
    if (now < pace.wakeAt || now < this.gate.end()) return false;
    // onStoreError 'open': jobs start without the store until openUntil, but never inside a
    // known pause (the gate lets the store be asked during one, not jobs start open); arm()
    // wakes admission at the earlier of the two ends.
    if (pace.openUntil > now && (piped || now < this.pauses.until)) return false;
    const call = line.idleCall();
    // A second call carries only jobs of the first call's cost (see Line.mayPipeline).
    const firstCost = piped ? line.sentCall().uniform : Number.NaN;
    const max = Math.min(free, pace.ask);
    const costs = call.costs;
    let n = 0;
    let uniform = Number.NaN;
    while (n < max) {
      const job = waiting.take(now, firstCost);
      if (job === undefined) break;
      line.add(job, piped);
      costs[n] = job.cost;
      if (n === 0) uniform = job.cost;
      else if (job.cost !== uniform) uniform = Number.NaN;
      n++;
    }
    // Nothing taken: another round would take nothing either (never loop on `count`).
    if (n === 0) return false;
    if (piped) line.join();
    call.request.count = n;
    call.uniform = uniform;
    if (pace.openUntil > now) {
      this.startInLine(Number.POSITIVE_INFINITY, undefined, now);
      return true;
    }
    this.ruleSet.fill(call.request, now);
    // The line of turns (docs/architecture.md, "Turns"), under rules that absorb a late turn
    // (joinsLine). At most one call in flight takes part: two would carry the same ticket (or
    // none), and two refusals would take two tickets, one of which nobody comes for (a turn
    // of the line left unused: 16 processes used 37 % of the limit so).
    const lined = this.pace.turnRules !== null && (!piped || line.sentCall().request.turn === undefined);
    call.request.turn = lined ? this.turn : undefined;
    line.send(call, now, this.pauses.raiseEpoch, this.pauses.resumeEpoch);
    call.releaseEpoch = this.releases;
    this.gate.sent(now);
    // Answered now (a synchronous store): processed in this round, without another pump.
    if (call.ask(this.store, this.settledNow)) return true;
    // Another round may send a second call while this one travels.
    return line.mayPipeline(pace.failing || this.ruleSet.unconverted);
  }

  /** Starts up to `count` jobs from the front of the line; with no call left in flight, the rest go back to the queue. */
  private startInLine(count: number, leases: readonly Lease[] | undefined, now: number): void {
    this.line.start(count, leases, this.answerSentAt, now);
    if (this.line.inFlight === 0) {
      this.line.requeue(this.waiting);
      if (this.costCheck !== undefined) {
        this.waiting.endWhere(this.costCheck);
        this.costCheck = undefined;
      }
    }
  }

  // ---------------------------------------------------------------- store answers

  /** A store call settled synchronously, inside admit(): the round goes on after it. */
  private readonly settledNow = (call: Call, ok: boolean, value: unknown): void =>
    this.callSettled(call, ok, value, false);

  /** A store call settled. Answers are used as they come: grants go to the front of the line. */
  private callSettled(call: Call, ok: boolean, value: unknown, thenPump = true): void {
    if (!this.line.answered(call)) return;
    this.answerSentAt = call.sentAt;
    this.answerWasSync = call.sync;
    // Jobs started below run synchronously and may call back into the valve: a pump they ask
    // for waits until this answer is processed (the line is not changed mid-processing).
    const outer = this.pump.hold();
    try {
      if (ok) this.acquired(call, value as AcquireResult);
      else this.acquireFailed(value);
    } finally {
      this.pump.unhold(outer);
    }
    if (thenPump || (outer && this.pump.deferred)) this.pump.run();
  }

  private acquired(call: Call, r: AcquireResult): void {
    const n = call.request.count;
    const invalid = checkAcquireAnswer(r, n, this.global);
    if (invalid !== undefined) {
      this.acquireFailed(invalid);
      return;
    }
    const now = this.clock.now();
    const granted = r.granted;
    // The ticket held after this call (a store without a line answers none). The answer to a
    // call that took no part in the line leaves the ticket as it is, and the wait for its turn.
    const lined = call.request.turn !== undefined;
    if (lined) this.turn = r.turn ?? 0;
    const turnAt = !lined && this.turn > 0 ? this.pace.wakeAt : 0;
    const turnAsk = this.pace.ask;
    this.pace.storeAnswered();
    const mismatch = this.ruleSet.answered(call.request, r, call.request.id);
    if (mismatch !== undefined) this.events.emit('rule-mismatch', mismatch);
    // The store's view of the shared pause.
    const sentAt = this.answerSentAt;
    const resumedSince = this.pauses.answered(r, sentAt, now, call.pauseEpoch, call.resumeEpoch);
    this.startInLine(granted, r.leases, now);
    this.line.recordAnswer(granted === n);
    this.pace.granted(r, granted, n, now, sentAt, this.answerWasSync, resumedSince, call.costs[granted]!);
    // During a rule change's transition a refusal on rate may be the old rules' (a cost above
    // an old rule's burst is charged a wait past the transition): never wait past its end,
    // when the next call goes with the new rules alone.
    // Only for such a job: a wait the new rules set is followed as the store told it.
    if (granted < n && r.blocked === 'rate' && this.ruleSet.oldRulesCannotAdmit(call.costs[granted]!)) {
      this.pace.capRate(this.ruleSet.transitionEnd);
    }
    // The answer ended a rule change: a refusal on rate may be the old rules' alone.
    if (this.ruleSet.ended && granted < n && r.blocked === 'rate') this.pace.unblock('rate');
    if (turnAt > 0) this.pace.keepTurn(turnAt, turnAsk);
    // Refused on concurrency, but a slot was released since the call was sent: the refusal
    // may predate it (its wake-up came first), so ask again at once.
    if (r.blocked === 'concurrency' && granted < n && call.releaseEpoch !== this.releases) {
      this.pace.unblock('concurrency');
    }
    // The wait is for the first job refused: a cheaper job may head the queue now (see newHead()).
    if (granted < n) this.newHead(this.waiting.head()?.cost ?? Number.NaN);
    this.host.checkClosed();
  }

  private acquireFailed(err: unknown): void {
    const now = this.clock.now();
    this.line.recordAnswer(false);
    const mode = this.mode;
    this.pace.failed(err, mode, now);
    const share = this.line.failedShare();
    if (mode === 'open' && this.pauses.until <= now) {
      this.startInLine(share, undefined, now);
    } else if (mode === 'open') {
      // A pause known here (applied or learnt while the call travelled) holds these jobs as it
      // holds the queue: they go back to it, and start open once it ends.
      if (this.line.inFlight === 0) this.line.requeue(this.waiting);
    } else if (mode === 'throw') {
      const error = new ValveError('STORE_UNAVAILABLE', 'The store failed (onStoreError: throw)', {
        cause: err,
      });
      this.line.endTail(share, error);
      this.waiting.endAll(error);
    } else if (this.line.inFlight === 0) {
      this.line.requeue(this.waiting);
    }
    this.host.storeError(err, 'acquire', mode);
    this.host.checkClosed();
  }

  /** The error of a job that reached its maxWait before starting. */
  expiryError(): ValveError {
    return this.pace.expiryError();
  }

  // ---------------------------------------------------------------- the timer, wake-ups

  /** Sets the one timer to the earliest of: next admission, earliest maxWait, lease renewal or expiry. */
  arm(): void {
    let next = Number.POSITIVE_INFINITY;
    if (
      this.waiting.count > 0 &&
      this.line.inFlight === 0 &&
      this.jobs.runningCount < this.limit &&
      this.admitting
    ) {
      next = Math.max(this.pace.wakeAt, this.gate.end(), this.gate.openHeld(this.pace.openUntil));
    }
    const deadline = this.jobs.nextDeadline();
    if (deadline < next) next = deadline;
    const lease = this.leases.nextDue();
    if (lease < next) next = lease;
    const precise = this.pace.preciseWake(next) && this.clock.setPreciseTimeout !== undefined;
    this.timer.wakeAt(next, precise);
  }

  private readonly onTimer = (): void => {
    const now = this.clock.now();
    this.waiting.expireDue(now);
    this.leases.onTimer(now);
    this.pump.run();
  };
}
