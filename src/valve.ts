import { Admission } from './admission.js';
import { describe } from './duration.js';
import { ValveError } from './errors.js';
import { Emitter, EVENT_NAMES, type ValveEventName, type ValveListener } from './events.js';
import { type FetchLike, type WrapFetchOptions, wrapFetch } from './feedback/fetch.js';
import { observe } from './feedback/observe.js';
import type { FeedbackReading } from './feedback/types.js';
import { type ValveInternals, windowOf } from './feedback-port.js';
import { type AnyJob, capture, Job, Jobs, TimedJob } from './job.js';
import { Leases } from './leases.js';
import { OBSERVE, type ValveObserver } from './observer.js';
import { type NormalizedOptions, normalizeOptions, normalizeRules, type ValveOptions } from './options.js';
import { Pauses } from './pauses.js';
import type { Rule } from './rules/rule.js';
import type { RulesCarry } from './rulesets.js';
import { RunArgs, readCloseOptions, readRunOptions } from './run-options.js';
import { memoryStore } from './stores/memory.js';
import type { JobContext, RunOptions, Valve, ValveStats } from './types.js';
import { Waiting } from './waiting.js';

export type { JobContext, JobLease, RunOptions, Valve, ValveStats } from './types.js';

/*
 * The façade: createValve(), the public methods, enqueue and close. It builds the rooms and
 * wires them; each room owns its state and reaches the others only through what it is handed
 * here. See docs/architecture.md, "The scheduler".
 *
 *   waiting.ts    the queue room: jobs waiting for their start, their abort listeners
 *   admission.ts  store calls and their answers, with line.ts (the in-flight line, pipelining),
 *                 pace.ts (when to ask again), pump.ts, wakeups.ts and timer.ts (the one timer)
 *   job.ts        the job record, its context, start, settle, end
 *   leases.ts     global-concurrency leases: renewal, expiry, release
 *   pauses.ts     the local view of the shared pause
 *   run-options.ts  run()'s per-call options, checked
 *
 * Decisions worth knowing (stated in the user docs):
 * - run() never throws: bad arguments, QUEUE_FULL, CLOSED and an aborted signal reject.
 * - Jobs never start synchronously inside run() (see admission.ts).
 * - A listener that throws is caught and reported through process.emitWarning (events.ts).
 * - A lost global lease is still released when its job settles (see leases.ts).
 * - An idle valve holds nothing in its store: close() is needed only to end work in progress.
 * - Retries from wrapFetch (runAt with an earlier sequence) are not subject to maxQueue.
 * - A pause is applied locally at once and then written to the store (see pauses.ts).
 */

/**
 * What the feedback module is handed, for the integrations bundled in this package
 * (src/integrations/): not exported from the package root. Undefined for an object that is not
 * a valve made by this copy of createValve().
 */
export function internalsOf(valve: Valve): ValveInternals | undefined {
  return valve instanceof ValveImpl ? valve.internals : undefined;
}

class ValveImpl implements Valve {
  declare readonly id: string; // own, enumerable, not writable: defined in the constructor
  /** The largest cost any job may have under the current rules (Infinity without rules). */
  private maxCost: number;
  /** The rule that sets maxCost and its option path (for the message), undefined without rules. */
  private maxCostRule: NormalizedOptions['maxCostRule'];
  private maxCostPath: string;
  /** Pending jobs (queued or in flight) beyond which run() rejects QUEUE_FULL. */
  private readonly maxQueue: number;
  /** The default maxWait of a job (ms, or Infinity). */
  private readonly maxWait: number;
  /** The valve's clock (maxWait deadlines, stats). */
  private readonly clock: NormalizedOptions['clock'];

  /** The valve's listeners; every room emits through it. */
  private readonly events = new Emitter();
  // The rooms (see the top of this file). Each is built once, in the constructor.
  private readonly leases: Leases;
  private readonly jobs: Jobs;
  private readonly pauses: Pauses;
  private readonly waiting: Waiting;
  private readonly admission: Admission;
  /** What the feedback module is handed (observe, wrapFetch, and internalsOf() for integrations). */
  readonly internals: ValveInternals;

  /** Scratch for run()'s checked options, read right after each check. */
  private readonly runArgs = new RunArgs();
  /** The next call-order number: every sequence below it was given to a job. */
  private seq = 0;
  /** Store calls that threw or rejected (only grows). */
  private storeErrors = 0;
  /** close() was called (stays true). */
  private closed = false;
  /** close({ drain: true }) is letting queued jobs run; a later close() without drain clears it. */
  private draining = false;
  /** The promise every close() returns, and what resolves it (null before close(), and once done). */
  private closePromise: Promise<void> | null = null;
  private closeResolve: ((value: PromiseLike<void>) => void) | null = null;
  private readonly closeWaiters = new Set<() => void>(); // called, emptied, by the first close()

  constructor(o: NormalizedOptions) {
    Object.defineProperty(this, 'id', { value: o.id, enumerable: true });
    this.maxCost = o.maxCost;
    this.maxCostRule = o.maxCostRule;
    this.maxCostPath = o.maxCostPath;
    this.maxQueue = o.maxQueue;
    this.maxWait = o.maxWait;
    this.clock = o.clock;
    const store = o.store ?? memoryStore({ clock: o.clock });
    const events = this.events;
    const storeError = this.reportStoreError;
    // The rooms, bottom up. Their hosts call back into the rooms above through this façade.
    this.leases = new Leases(o.id, store, o.clock, o.leaseTtl, events, {
      storeError,
      leasesReleased: () => {
        this.admission.unblock('concurrency');
        this.admission.schedulePump();
        this.checkClosed();
      },
      releaseFailed: () => {
        this.admission.schedulePump(); // an idle valve lets go of its store
        this.checkClosed();
      },
      renewalAnswered: () => this.admission.runPump(),
    });
    this.jobs = new Jobs(this.leases, {
      jobSettled: () => {
        this.admission.schedulePump();
        if (this.closed) this.checkClosed();
      },
      jobEnded: () => {
        if (this.closed) this.checkClosed();
      },
    });
    this.pauses = new Pauses(o.id, store, o.clock, events, {
      storeError,
      pauseChanged: () => this.admission.schedulePump(),
      askStore: () => this.admission.askStore(),
      pauseDeleted: () => this.admission.unblock('pause'),
    });
    this.waiting = new Waiting(this.jobs, {
      jobLeft: () => this.admission.schedulePump(),
      newHead: (cost) => this.admission.newHead(cost),
      expiryError: () => this.admission.expiryError(),
    });
    this.admission = new Admission(o, store, this.waiting, this.jobs, this.pauses, this.leases, events, {
      storeError,
      checkClosed: () => this.checkClosed(),
    });
    this.internals = {
      id: o.id,
      clock: o.clock,
      feedback: o.feedback,
      maxWait: o.maxWait,
      runAt: (job, options, sequence, onSequence) =>
        this.runAt(job as AnyJob, options, sequence, onSequence) as Promise<never>,
      // observe() reaches the pause directly: feedback → pauses → store.
      pauseInBackground: (ms, source, detail) => this.pauses.pauseInBackground(ms, source, detail),
      knownPauseEnd: () => this.pauses.until,
      pauseCarrier: this.pauses,
      rulesCarry: () => this.admission.rulesCarry(),
      pauseWaiters: this.pauses.waiters,
      isClosed: () => this.closed,
      closeWaiters: this.closeWaiters,
      emit: (event, payload) => {
        if (event !== 'error') events.emit(event, payload);
      },
      storeError, // wrapFetch's fleet window calls (operation 'window')
      storeFailing: () => this.admission.storeFailing,
      ...(typeof store.windowSend === 'function' && typeof store.windowReport === 'function'
        ? { window: windowOf(store, o.id) }
        : {}),
    };
  }

  // ---------------------------------------------------------------- public API

  run<T>(job: (ctx: JobContext) => T | PromiseLike<T>, options?: RunOptions): Promise<Awaited<T>> {
    return this.runAt(job as AnyJob, options, undefined, undefined) as Promise<Awaited<T>>;
  }

  wrap<A extends unknown[], R>(
    fn: (...args: A) => R | PromiseLike<R>,
    options?: RunOptions,
  ): (...args: A) => Promise<Awaited<R>> {
    if (typeof fn !== 'function') {
      throw new TypeError(`Expected \`fn\` to be a function, got ${describe(fn)}`);
    }
    if (options !== undefined) {
      // Checked now, like wrapFetch()'s (each call checks them again: they may be getters).
      const args = new RunArgs();
      const error = readRunOptions(options, this.maxWait, args);
      if (error !== undefined) throw error;
      // A cost the current rules can never admit (setRules() may change them: each call checks again).
      if (args.cost > this.maxCost) throw this.tooCostly(args.cost)!;
    }
    return (...args: A) => this.run(() => fn(...args), options) as Promise<Awaited<R>>;
  }

  wrapFetch<F extends FetchLike = typeof fetch>(
    fetchFn?: F,
    options?: WrapFetchOptions<Parameters<F>[0], Parameters<F>[1]>,
  ): F {
    return wrapFetch(this.internals, fetchFn, options, this.tooCostly);
  }

  observe(input: unknown): FeedbackReading | undefined {
    return observe(this.internals, input);
  }

  setRules(rules: Rule | readonly Rule[]): Promise<void> {
    let next: ReturnType<typeof normalizeRules>;
    try {
      next = normalizeRules(rules);
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.closed) return Promise.reject(new ValveError('CLOSED', 'The valve is closed'));
    this.maxCost = next.maxCost;
    this.maxCostRule = next.maxCostRule;
    this.maxCostPath = next.maxCostPath;
    // Waiting jobs the new rules can never admit end now (or once their store call returns).
    this.admission.setRules(next.rules, (job) => this.tooCostly(job.cost));
    return Promise.resolve();
  }

  pause(duration: number | string | { until: Date | number }): Promise<void> {
    return this.pauses.pause(duration);
  }

  resume(): Promise<void> {
    return this.pauses.resume();
  }

  stats(): ValveStats {
    const now = this.clock.now();
    const jobs = this.jobs;
    const pausedUntil = this.pauses.until;
    return {
      queued: jobs.pending,
      running: jobs.runningCount,
      pausedUntil: pausedUntil > now ? pausedUntil : null,
      pausedBy: pausedUntil > now ? this.pauses.origin : null,
      started: jobs.started,
      succeeded: jobs.succeeded,
      failed: jobs.failed,
      rejected: jobs.rejected,
      storeErrors: this.storeErrors,
      leasesLost: this.leases.leasesLost,
      closed: this.closed,
    };
  }

  on<E extends ValveEventName>(event: E, listener: ValveListener<E>): this {
    checkListener(event, listener);
    this.events.on(event, listener as (...args: unknown[]) => void);
    return this;
  }

  once<E extends ValveEventName>(event: E, listener: ValveListener<E>): this {
    checkListener(event, listener);
    this.events.once(event, listener as (...args: unknown[]) => void);
    return this;
  }

  off<E extends ValveEventName>(event: E, listener: ValveListener<E>): this {
    checkListener(event, listener);
    this.events.off(event, listener as (...args: unknown[]) => void);
    return this;
  }

  close(options?: { drain?: boolean }): Promise<void> {
    const drain = readCloseOptions(options);
    if (drain instanceof TypeError) return Promise.reject(drain);
    if (this.closePromise !== null) {
      // A later close() without drain cuts a draining close short.
      if (!drain && this.draining) {
        this.draining = false;
        this.cancelAll();
      }
      return this.closePromise;
    }
    this.closed = true;
    this.draining = drain;
    this.closePromise = new Promise<void>((resolve) => {
      this.closeResolve = resolve;
    });
    for (const waiter of this.closeWaiters) waiter();
    this.closeWaiters.clear();
    if (!drain) this.cancelAll();
    else this.admission.schedulePump();
    this.checkClosed();
    return this.closePromise;
  }

  /** valve/otel's hook (see observer.ts): sets the one observer (null: none), returns the previous one. */
  [OBSERVE](observer: ValveObserver | null): ValveObserver | null {
    const previous = this.jobs.observer;
    this.jobs.observer = observer;
    return previous;
  }

  // ---------------------------------------------------------------- enqueue

  runAt(
    fn: AnyJob,
    options: RunOptions | undefined,
    sequence: number | undefined,
    onSequence: ((sequence: number) => void) | undefined,
  ): Promise<unknown> {
    const jobs = this.jobs;
    if (typeof fn !== 'function') {
      return jobs.refuse(new TypeError(`Expected \`job\` to be a function, got ${describe(fn)}`));
    }
    let cost = 1;
    let priority = 0;
    let signal: AbortSignal | null = null;
    let maxWait = this.maxWait;
    if (options !== undefined) {
      const args = this.runArgs;
      let error: unknown;
      try {
        error = readRunOptions(options, maxWait, args);
      } catch (err) {
        // A getter that throws, a revoked Proxy: run() never throws.
        args.signal = null;
        return jobs.refuse(err);
      }
      if (error !== undefined) return jobs.refuse(error);
      cost = args.cost;
      priority = args.priority;
      signal = args.signal;
      maxWait = args.maxWait;
      args.signal = null; // hold no caller's signal between calls
    }
    if (cost > this.maxCost) return jobs.refuse(this.tooCostly(cost)!);
    if (this.closed) return jobs.refuse(new ValveError('CLOSED', 'The valve is closed'));
    if (signal?.aborted) return jobs.refuse(signal.reason);
    const retry =
      sequence !== undefined && Number.isSafeInteger(sequence) && sequence >= 0 && sequence < this.seq;
    if (!retry && jobs.pending >= this.maxQueue) {
      return jobs.refuse(
        new ValveError(
          'QUEUE_FULL',
          `The queue is full: ${this.maxQueue} jobs are already waiting (maxQueue)`,
        ),
      );
    }
    const seq = retry ? sequence : this.seq++;
    const deadline = maxWait === Number.POSITIVE_INFINITY ? 0 : this.clock.now() + maxWait;
    const promise = new Promise(capture);
    const job =
      jobs.observer === null
        ? new Job(fn, cost, priority, seq, deadline)
        : new TimedJob(fn, cost, priority, seq, deadline, this.clock.now());
    if (onSequence !== undefined) onSequence(seq);
    jobs.add(job);
    if (this.waiting.enqueue(job, signal, retry)) this.admission.jobQueued();
    return promise;
  }

  /** The RangeError of a cost the current rules can never admit, naming the rule; undefined for one they can. */
  private readonly tooCostly = (cost: number): RangeError | undefined => {
    if (!(cost > this.maxCost)) return undefined;
    const rule = this.maxCostRule!;
    return new RangeError(
      `Expected \`cost\` to be at most ${rule.maxCost} (the largest cost rule \`${this.maxCostPath}\`, ${rule.label}, can ever admit), got ${cost}`,
    );
  };

  // ---------------------------------------------------------------- store errors, close

  private readonly reportStoreError: ValveInternals['storeError'] = (err, operation, action) => {
    this.storeErrors++;
    // emit2: a store that fails with undefined (Promise.reject()) still gives the context.
    this.events.emit2('store-error', err, { operation, id: this.id, action });
  };

  /** close() without drain: queued and in-flight jobs reject CLOSED; running jobs see ctx.signal abort. */
  private cancelAll(): void {
    // The errors (and their stack traces) only when some job receives them: a valve group
    // closes every valve it evicts, idle ones.
    const jobs = this.jobs;
    this.admission.cancel(
      jobs.pending > 0
        ? new ValveError('CLOSED', 'The valve was closed before the job started')
        : NOTHING_PENDING,
    );
    if (jobs.runningCount > 0)
      jobs.abortAll(new ValveError('CLOSED', 'The valve was closed while the job ran'));
    this.admission.arm();
    // The queue emptied: 'idle' once nothing runs or travels (admission reports it).
    this.admission.schedulePump();
  }

  /** Resolves close() once nothing is queued, running, in flight or being released. */
  private checkClosed(): void {
    if (
      this.closeResolve === null ||
      this.jobs.pending !== 0 ||
      this.jobs.runningCount !== 0 ||
      this.admission.inFlight !== 0 ||
      !this.leases.idle
    ) {
      return;
    }
    const resolve = this.closeResolve;
    this.closeResolve = null;
    this.admission.shutDown();
    // Through a settled promise, as jobs reject (job.ts rejectWith: two microtask steps), so
    // that the handlers of every job's promise run before `await close()` goes on.
    resolve(SETTLED);
    this.jobs.observer?.closed?.(); // valve/otel lets go of the closed valve (observer.ts)
  }
}

const SETTLED = Promise.resolve();

/** Handed to admission.cancel() by a valve closed with nothing pending: no job ever receives it. */
const NOTHING_PENDING = new ValveError('CLOSED', 'The valve was closed before the job started');

function checkListener(event: unknown, listener: unknown): void {
  if (typeof event !== 'string' || !EVENT_NAMES.has(event)) {
    throw new TypeError(
      `Expected \`event\` to be one of ${[...EVENT_NAMES].map((e) => `'${e}'`).join(', ')}, got ${describe(event)}${
        event === 'error' ? " (valve has no 'error' event; store failures are 'store-error')" : ''
      }`,
    );
  }
  if (typeof listener !== 'function') {
    throw new TypeError(`Expected \`listener\` to be a function, got ${describe(listener)}`);
  }
}

/**
 * Creates a valve: a local queue that starts jobs only when the store grants them.
 * Throws TypeError/RangeError synchronously for invalid options.
 */
export function createValve(options: ValveOptions): Valve {
  return new ValveImpl(normalizeOptions(options));
}

/** createValve() for a group's key: record kept ≥ `recordTtl` ms; goes on from `rulesCarry`. */
export function createGroupValve(options: ValveOptions, recordTtl: number, rulesCarry?: RulesCarry): Valve {
  return new ValveImpl({ ...normalizeOptions(options), recordTtl, rulesCarry });
}
