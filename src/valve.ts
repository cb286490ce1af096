import type { Clock } from './clock.js';
import { describe, parseDuration } from './duration.js';
import { ValveError } from './errors.js';
import {
  Emitter,
  type StoreErrorContext,
  type StoreOperation,
  type ValveEventName,
  type ValveListener,
} from './events.js';
import { type FetchLike, type WrapFetchOptions, wrapFetch } from './feedback/fetch.js';
import { observe } from './feedback/observe.js';
import type { FeedbackSettings, PauseSource, ValveInternals } from './internal.js';
import { type NormalizedOptions, normalizeOptions, type ValveOptions, waitOption } from './options.js';
import { DeadlineHeap, JobQueue } from './queue.js';
import type { StoreRule } from './rules/rule.js';
import { memoryStore } from './stores/memory.js';
import type { AcquireRequest, AcquireResult, Lease, Store, WakeEvent } from './stores/store.js';

/*
 * The scheduler. See docs/architecture.md, "The scheduler".
 *
 * Decisions worth knowing (to be stated in the user docs):
 * - run() never throws: bad arguments (TypeError/RangeError), QUEUE_FULL, CLOSED and an
 *   already-aborted signal all come back as a rejected promise.
 * - Jobs never start synchronously inside run(): admission happens in a microtask, so
 *   many run() calls in one tick cost one store call per batch.
 * - A listener that throws is caught (the valve keeps its state) and reported through
 *   process.emitWarning; see events.ts.
 * - Global leases: a renewal that fails (throws/rejects), answers "not held", or does not
 *   answer before the lease's conservative expiry (send time of the last successful
 *   renewal + leaseTtl, on this process's clock) loses the lease at once: ctx.signal
 *   aborts with a LEASE_LOST ValveError and 'lease-lost' is emitted. A lost lease is not
 *   released by the valve (it expires on the store by its TTL), which keeps the slot
 *   occupied as long as the job may still be running.
 * - Retries from wrapFetch (runAt with an earlier sequence) are not subject to maxQueue.
 * - A pause is applied locally at once (this process stops admitting) and then written to
 *   the store; if the write fails the local pause stays (it only ever delays this process).
 */

/** The context passed to a job. */
export interface JobContext {
  /** Aborts when the caller's signal aborts after the start, on close() without drain, and when the job's global lease is lost. */
  readonly signal: AbortSignal;
  /** With global concurrency: the job's lease. `fence` only grows, for checks in the external system. */
  readonly lease?: JobLease | undefined;
}

/** A global-concurrency lease as a job sees it. */
export interface JobLease {
  readonly token: string;
  readonly fence: number;
}

/** Per-call options of run() and wrap(). */
export interface RunOptions {
  /** Cost units this job spends on every rule. Positive finite number, default 1. */
  cost?: number;
  /** Higher starts first; equal priorities keep call order. Finite number, default 0. */
  priority?: number;
  /** Aborting it before the start rejects the job with `signal.reason`; after the start, it aborts `ctx.signal`. */
  signal?: AbortSignal | undefined;
  /** Milliseconds (or a duration string) this job may wait for its start; overrides the valve's maxWait. */
  maxWait?: number | string;
}

/** A snapshot of the valve's counters. Counters only grow. */
export interface ValveStats {
  /** Jobs waiting for their start (including those whose acquisition is in flight). */
  queued: number;
  /** Jobs started and not yet settled. */
  running: number;
  /** End of the known shared pause (epoch ms, this process's clock), or null. */
  pausedUntil: number | null;
  /** Jobs started. */
  started: number;
  /** Started jobs that fulfilled. */
  succeeded: number;
  /** Started jobs that rejected (including LEASE_LOST). */
  failed: number;
  /** Jobs that ended without starting (bad arguments, QUEUE_FULL, MAX_WAIT, CLOSED, STORE_UNAVAILABLE, aborted). */
  rejected: number;
  /** Store calls that threw or rejected. */
  storeErrors: number;
  /** Global leases lost while their job ran. */
  leasesLost: number;
  /** close() was called. */
  closed: boolean;
}

/** A valve: a local queue in front of a shared budget. */
export interface Valve {
  readonly id: string;
  /** Queues `job`; resolves or rejects with the job's own result, or rejects with a ValveError if it never starts. */
  run<T>(job: (ctx: JobContext) => T | PromiseLike<T>, options?: RunOptions): Promise<Awaited<T>>;
  /** Returns a function whose every call goes through run(). */
  wrap<A extends unknown[], R>(
    fn: (...args: A) => R | PromiseLike<R>,
    options?: RunOptions,
  ): (...args: A) => Promise<Awaited<R>>;
  /** Returns fetch where each attempt is a job; 429s (and 503 with Retry-After) pause the valve and retry. */
  wrapFetch<F extends FetchLike = typeof fetch>(
    fetchFn?: F,
    options?: WrapFetchOptions<Parameters<F>[0], Parameters<F>[1]>,
  ): F;
  /** Reads rate-limit feedback from a response or headers; writes a pause in the background. */
  observe(input: unknown): ReturnType<typeof observe>;
  /** Pauses every valve sharing the id (extend only); resolves once the store recorded it. */
  pause(duration: number | string | { until: Date | number }): Promise<void>;
  /** Deletes the shared pause. */
  resume(): Promise<void>;
  stats(): ValveStats;
  on<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
  once<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
  off<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
  /** Rejects queued jobs with CLOSED (or, with drain, runs them first); resolves when running jobs settled and leases are released. */
  close(options?: { drain?: boolean }): Promise<void>;
}

const EVENT_NAMES = new Set<string>([
  'store-error',
  'pause',
  'resume',
  'lease-lost',
  'retry',
  'feedback-ignored',
  'idle',
]);

// Job states.
const QUEUED = 0;
const INFLIGHT = 1;
const RUNNING = 2;
const DONE = 3;

const STORE_BACKOFF_MIN = 100;
const STORE_BACKOFF_MAX = 5000;
const POLL_MIN = 50;
const POLL_JITTER = 25;
const NOTIFIED_RECHECK = 1000;
/**
 * A sub-millisecond rate wait is spent asking the store again at once only when its round trip
 * took at least this long (ms): a store that answers faster would be asked in a tight loop.
 */
const MIN_POLL_ROUND_TRIP = 0.05;

type AnyJob = (ctx: JobContext) => unknown;

// The promise executor writes here, so creating a job's promise allocates no closure.
// Only `resolve` is kept (a job rejects by resolving with a rejected promise): holding the
// reject function too would cost ~70 bytes per queued job.
let capturedResolve: (value: unknown) => void = () => {};
function capture(resolve: (value: unknown) => void): void {
  capturedResolve = resolve;
}

/** Rejects a job's promise through its resolve function. */
function rejectWith(resolve: (value: unknown) => void, reason: unknown): void {
  resolve(Promise.reject(reason));
}

/** Queue order: higher priority first, then call order. */
function ranksAhead(a: Job, b: Job): boolean {
  return a.priority > b.priority || (a.priority === b.priority && a.seq < b.seq);
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/**
 * What a running job is given, and the valve's per-run state (kept out of the queued
 * Job record so queued jobs stay small). Its AbortController is created only if the job
 * reads `signal`.
 */
class Context implements JobContext {
  private controller: AbortController | null = null;
  private aborted = false;
  private reason: unknown = undefined;
  readonly lease: JobLease | undefined;
  /** @internal Index in the valve's running array. */
  slot = -1;
  /** @internal The store's lease, with global concurrency. */
  held: Lease | null = null;
  /** @internal Local-clock time until which the lease is known held. */
  leaseExpiry = 0;
  /** @internal Set when the lease was lost: the job's promise rejects with it when the callback settles. */
  lost: ValveError | null = null;

  constructor(lease: JobLease | undefined) {
    this.lease = lease;
  }

  get signal(): AbortSignal {
    let controller = this.controller;
    if (controller === null) {
      controller = new AbortController();
      if (this.aborted) controller.abort(this.reason);
      this.controller = controller;
    }
    return controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
  }
}

/** One queued job: the only per-job record while queued (kept small: see the memory budget). */
class Job {
  fn: AnyJob | null;
  readonly cost: number;
  readonly priority: number;
  readonly seq: number;
  /** Local-clock deadline of maxWait, or 0 for none (a small integer keeps the field unboxed). */
  readonly deadline: number;
  heapIndex = -1;
  state = QUEUED;
  /** The abort listener on the caller's signal, when there is one. */
  hook: AbortHook | null = null;
  /** The promise's resolve function; replaced by a no-op once settled, so a skipped record holds nothing. */
  resolve: (value: unknown) => void;

  constructor(fn: AnyJob, cost: number, priority: number, seq: number, deadline: number) {
    this.fn = fn;
    this.cost = cost;
    this.priority = priority;
    this.seq = seq;
    this.deadline = deadline;
    this.resolve = capturedResolve;
  }
}

function isQueued(job: Job): boolean {
  return job.state === QUEUED;
}

const settled = (): void => {};

/** Listens to a caller's signal for one job (an object listener: no closure). */
class AbortHook {
  /** The running job's context, once started. */
  ctx: Context | null = null;

  constructor(
    readonly valve: ValveImpl,
    readonly job: Job,
    readonly signal: AbortSignal,
  ) {}

  handleEvent(): void {
    this.valve.onAbort(this.job, this.signal.reason);
  }

  detach(): void {
    this.signal.removeEventListener('abort', this);
  }
}

/** Why the last acquisition stopped short. */
type Blocked = 'pause' | 'rate' | 'concurrency' | 'error' | null;

// Store call states.
const CALL_IDLE = 0;
const CALL_SENT = 1;

/**
 * One store call: its request and when it was sent. A valve owns two, so that a second call can
 * be in flight while the first one travels (see ValveImpl.mayPipeline). The jobs of every call in
 * flight wait in one line (ValveImpl.line).
 */
class Call {
  readonly costs: number[] = [];
  readonly request: {
    id: string;
    rules: readonly StoreRule[];
    costs: number[];
    count: number;
    lease: { limit: number; ttl: number } | undefined;
  };
  state = CALL_IDLE;
  sentAt = 0;
  pauseEpoch = 0;
  resumeEpoch = 0;
  /** Answered synchronously (the store's hint counts from about now). */
  sync = false;
  /** The cost every job of this call has, or NaN when they differ. */
  uniform = Number.NaN;
  readonly onAnswer: (result: AcquireResult) => void;
  readonly onFail: (err: unknown) => void;

  constructor(
    id: string,
    rules: readonly StoreRule[],
    lease: { limit: number; ttl: number } | undefined,
    settled: (call: Call, ok: boolean, value: unknown) => void,
  ) {
    this.request = { id, rules, costs: this.costs, count: 0, lease };
    this.onAnswer = (result) => settled(this, true, result);
    this.onFail = (err) => settled(this, false, err);
  }
}

class ValveImpl implements Valve {
  readonly id: string;
  private readonly rules: readonly StoreRule[];
  private readonly maxCost: number;
  private readonly maxCostRule: StoreRule | undefined;
  private readonly maxCostPath: string;
  private readonly store: Store;
  private readonly limit: number;
  private readonly global: boolean;
  private readonly leaseTtl: number;
  private readonly maxQueue: number;
  private readonly maxWait: number;
  private readonly batch: number;
  /**
   * Jobs to ask for in the next store call: `batch`, or after a rate refusal one more than the
   * store last granted (at least 2), doubling back up to `batch` with every call granted in full.
   */
  private ask: number;
  private readonly mode: 'wait' | 'throw' | 'open';
  private readonly clock: Clock;
  private readonly feedback: FeedbackSettings;

  private readonly events = new Emitter();
  private readonly queue = new JobQueue<Job>(isQueued);
  private readonly deadlines = new DeadlineHeap<Job>();
  private readonly runningJobs: Context[] = [];
  private readonly internals: ValveInternals;

  private seq = 0;
  /** Live jobs in the queue (not cancelled, not in flight). */
  private waiting = 0;
  /** Jobs not yet started nor ended: waiting + in flight. */
  private pending = 0;

  // Store calls: at most two in flight (see mayPipeline).
  private readonly calls: readonly [Call, Call];
  private inFlight = 0;
  /**
   * The jobs of every call in flight, in queue order (line[lineHead..]). Grants from any answer
   * go to the front of the line: with pipelining both calls carry jobs of one cost, so any of
   * them may use any grant, and a job the first call could not get keeps its place ahead of the
   * second call's. When no call is left in flight, jobs still in line go back to the queue.
   */
  private line: Job[] = [];
  private lineHead = 0;
  /** Buffers for a pipelined call's jobs and for merging them into the line. */
  private incoming: Job[] = [];
  private spare: Job[] = [];
  /** The last answer granted every job it was asked for. */
  private lastFull = false;
  /** The call being processed: when it was sent, and whether it was answered synchronously. */
  private sentAt = 0;
  private syncAnswer = false;
  /**
   * Some rule cannot absorb a late start ((burst − 1) × emission interval under 2 ms), so a
   * rate wait with a synchronous store uses the clock's precise timer: with burst 1 every
   * late wake-up pushes all later starts back. With Redis the network's jitter dominates and
   * plain timers are used (spinning processes would also take CPU from a local Redis).
   */
  private readonly precise: boolean;

  // When the next acquisition may happen (local clock).
  private wakeAt = 0;
  private blocked: Blocked = null;
  /** Known shared pause: end on the local clock (estimate) and as the store reported it. */
  private pauseUntil = 0;
  private storePauseUntil = 0;
  /** Bumped whenever this process raises its known pause; an acquisition sent before cannot clear it. */
  private pauseEpoch = 0;
  private sentPauseEpoch = 0;
  /** This valve's pause writes in flight: their wake-ups are not reported as 'remote' pauses. */
  private ownPauses = 0;
  /** Bumped by resume() and by a 'resume' wake-up: a store answer sent before cannot bring back the pause it deleted. */
  private resumeEpoch = 0;
  private sentResumeEpoch = 0;
  /** Store clock minus local clock, estimated at the last acquisition. */
  private offset = 0;

  // Store failures.
  private failing = false;
  private lastStoreError: unknown = undefined;
  private backoff = 0;
  private openUntil = 0;

  // The one timer.
  private timer: unknown = null;
  private timerAt = Number.POSITIVE_INFINITY;

  // Pumping.
  private pumpScheduled = false;
  private inPump = false;
  private again = false;
  private busy = false;

  // Global leases.
  private readonly leased = new Set<Context>();
  private renewAt = Number.POSITIVE_INFINITY;
  private renewing = false;
  private minLeaseExpiry = Number.POSITIVE_INFINITY;
  private releaseTokens: string[] = [];
  private releaseScheduled = false;
  private releasing = 0;

  // Subscription and close.
  private unsubscribe: (() => void) | null = null;
  private subscribed = false;
  private closed = false;
  private draining = false;
  private closePromise: Promise<void> | null = null;
  private closeResolve: (() => void) | null = null;

  // Counters.
  private started = 0;
  private succeeded = 0;
  private failed = 0;
  private rejected = 0;
  private storeErrors = 0;
  private leasesLost = 0;

  constructor(o: NormalizedOptions) {
    this.id = o.id;
    this.rules = o.rules;
    this.precise = o.rules.some((rule) => (rule.burst - 1) * rule.emissionUs < 2000);
    this.maxCost = o.maxCost;
    this.maxCostRule = o.maxCostRule;
    this.maxCostPath = o.maxCostPath;
    this.clock = o.clock;
    this.store = o.store ?? memoryStore({ clock: o.clock });
    this.limit = o.limit;
    this.global = o.global;
    this.leaseTtl = o.leaseTtl;
    this.maxQueue = o.maxQueue;
    this.maxWait = o.maxWait;
    this.batch = o.batch;
    this.ask = o.batch;
    this.mode = o.onStoreError;
    this.feedback = o.feedback;
    const lease = o.global ? { limit: o.limit, ttl: o.leaseTtl } : undefined;
    const settled = (call: Call, ok: boolean, value: unknown): void => this.callSettled(call, ok, value);
    this.calls = [new Call(o.id, o.rules, lease, settled), new Call(o.id, o.rules, lease, settled)];
    this.internals = {
      id: this.id,
      clock: this.clock,
      feedback: this.feedback,
      runAt: (job, options, sequence, onSequence) =>
        this.runAt(job as AnyJob, options, sequence, onSequence) as Promise<never>,
      pauseInBackground: (ms, source, detail) => this.pauseInBackground(ms, source, detail),
      emit: (event, payload) => {
        if (event !== 'error') this.events.emit(event, payload);
      },
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
    return (...args: A) => this.run(() => fn(...args), options) as Promise<Awaited<R>>;
  }

  wrapFetch<F extends FetchLike = typeof fetch>(
    fetchFn?: F,
    options?: WrapFetchOptions<Parameters<F>[0], Parameters<F>[1]>,
  ): F {
    return wrapFetch(this.internals, fetchFn, options);
  }

  observe(input: unknown): ReturnType<typeof observe> {
    return observe(this.internals, input);
  }

  pause(duration: number | string | { until: Date | number }): Promise<void> {
    let ms: number;
    try {
      ms = this.pauseMs(duration);
    } catch (err) {
      return Promise.reject(err);
    }
    if (ms <= 0) return Promise.resolve();
    return this.writePause(ms, 'manual', undefined, true) as Promise<void>;
  }

  resume(): Promise<void> {
    this.resumeEpoch++;
    this.pauseUntil = 0;
    this.storePauseUntil = 0;
    if (this.blocked === 'pause') {
      this.wakeAt = 0;
      this.blocked = null;
    }
    this.schedulePump();
    let result: unknown;
    try {
      result = this.store.resume(this.id);
    } catch (err) {
      return Promise.reject(this.storeFailure(err, 'resume'));
    }
    if (isThenable(result)) {
      return Promise.resolve(result).then(
        () => this.resumed(),
        (err: unknown) => {
          throw this.storeFailure(err, 'resume');
        },
      );
    }
    this.resumed();
    return Promise.resolve();
  }

  stats(): ValveStats {
    const now = this.clock.now();
    return {
      queued: this.pending,
      running: this.runningJobs.length,
      pausedUntil: this.pauseUntil > now ? this.pauseUntil : null,
      started: this.started,
      succeeded: this.succeeded,
      failed: this.failed,
      rejected: this.rejected,
      storeErrors: this.storeErrors,
      leasesLost: this.leasesLost,
      closed: this.closed,
    };
  }

  on<E extends ValveEventName>(event: E, listener: ValveListener<E>): this {
    this.checkListener(event, listener);
    this.events.on(event, listener as (...args: unknown[]) => void);
    return this;
  }

  once<E extends ValveEventName>(event: E, listener: ValveListener<E>): this {
    this.checkListener(event, listener);
    this.events.once(event, listener as (...args: unknown[]) => void);
    return this;
  }

  off<E extends ValveEventName>(event: E, listener: ValveListener<E>): this {
    this.checkListener(event, listener);
    this.events.off(event, listener as (...args: unknown[]) => void);
    return this;
  }

  close(options?: { drain?: boolean }): Promise<void> {
    let drain = false;
    if (options !== undefined) {
      if (typeof options !== 'object' || options === null) {
        return Promise.reject(
          new TypeError(
            `Expected close() options to be an object like { drain: true }, got ${describe(options)}`,
          ),
        );
      }
      for (const key of Object.keys(options)) {
        if (key !== 'drain') {
          return Promise.reject(new TypeError(`Unknown option \`${key}\`; close() takes \`drain\``));
        }
      }
      if (options.drain !== undefined && typeof options.drain !== 'boolean') {
        return Promise.reject(
          new TypeError(`Expected \`drain\` to be a boolean, got ${describe(options.drain)}`),
        );
      }
      drain = options.drain === true;
    }
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
    if (!drain) this.cancelAll();
    else this.schedulePump();
    this.checkClosed();
    return this.closePromise;
  }

  // ---------------------------------------------------------------- enqueue

  runAt(
    fn: AnyJob,
    options: RunOptions | undefined,
    sequence: number | undefined,
    onSequence: ((sequence: number) => void) | undefined,
  ): Promise<unknown> {
    if (typeof fn !== 'function') {
      return this.rejectNow(new TypeError(`Expected \`job\` to be a function, got ${describe(fn)}`));
    }
    let cost = 1;
    let priority = 0;
    let signal: AbortSignal | null = null;
    let maxWait = this.maxWait;
    if (options !== undefined) {
      if (typeof options !== 'object' || options === null) {
        return this.rejectNow(
          new TypeError(
            `Expected run() options to be an object like { cost: 1, priority: 0 }, got ${describe(options)}`,
          ),
        );
      }
      for (const key in options) {
        if (key !== 'cost' && key !== 'priority' && key !== 'signal' && key !== 'maxWait') {
          return this.rejectNow(
            new TypeError(
              `Unknown option \`${key}\`; run() takes \`cost\`, \`priority\`, \`signal\` and \`maxWait\``,
            ),
          );
        }
      }
      if (options.cost !== undefined) {
        cost = options.cost;
        if (typeof cost !== 'number') {
          return this.rejectNow(
            new TypeError(`Expected \`cost\` to be a positive finite number, got ${describe(cost)}`),
          );
        }
        if (!(cost > 0) || cost === Number.POSITIVE_INFINITY) {
          return this.rejectNow(
            new RangeError(`Expected \`cost\` to be a positive finite number, got ${String(cost)}`),
          );
        }
      }
      if (options.priority !== undefined) {
        priority = options.priority;
        if (typeof priority !== 'number') {
          return this.rejectNow(
            new TypeError(`Expected \`priority\` to be a finite number, got ${describe(priority)}`),
          );
        }
        if (!Number.isFinite(priority)) {
          return this.rejectNow(
            new RangeError(`Expected \`priority\` to be a finite number, got ${String(priority)}`),
          );
        }
        priority += 0; // -0 → 0
      }
      if (options.signal !== undefined) {
        const s = options.signal as unknown;
        if (
          typeof s !== 'object' ||
          s === null ||
          typeof (s as AbortSignal).addEventListener !== 'function' ||
          typeof (s as AbortSignal).aborted !== 'boolean'
        ) {
          return this.rejectNow(
            new TypeError(`Expected \`signal\` to be an AbortSignal, got ${describe(s)}`),
          );
        }
        signal = s as AbortSignal;
      }
      if (options.maxWait !== undefined) {
        try {
          maxWait = waitOption(options.maxWait, 'maxWait');
        } catch (err) {
          return this.rejectNow(err);
        }
      }
    }
    if (cost > this.maxCost) {
      const rule = this.maxCostRule!;
      return this.rejectNow(
        new RangeError(
          `Expected \`cost\` to be at most ${rule.maxCost} (the largest cost rule \`${this.maxCostPath}\`, ${rule.label}, can ever admit), got ${cost}`,
        ),
      );
    }
    if (this.closed) return this.rejectNow(new ValveError('CLOSED', 'The valve is closed'));
    if (signal?.aborted) return this.rejectNow(signal.reason);
    const retry =
      sequence !== undefined && Number.isSafeInteger(sequence) && sequence >= 0 && sequence < this.seq;
    if (!retry && this.pending >= this.maxQueue) {
      return this.rejectNow(
        new ValveError(
          'QUEUE_FULL',
          `The queue is full: ${this.maxQueue} jobs are already waiting (maxQueue)`,
        ),
      );
    }
    const seq = retry ? sequence : this.seq++;
    const deadline = maxWait === Number.POSITIVE_INFINITY ? 0 : this.clock.now() + maxWait;
    const promise = new Promise(capture);
    const job = new Job(fn, cost, priority, seq, deadline);
    if (onSequence !== undefined) onSequence(seq);
    this.pending++;
    this.waiting++;
    if (deadline !== 0) this.deadlines.push(job);
    if (signal !== null) {
      const hook = new AbortHook(this, job, signal);
      job.hook = hook;
      signal.addEventListener('abort', hook);
    }
    if (retry) this.queue.insert(job);
    else this.queue.push(job);
    this.busy = true;
    this.schedulePump();
    return promise;
  }

  private rejectNow(reason: unknown): Promise<never> {
    this.rejected++;
    return Promise.reject(reason);
  }

  // ---------------------------------------------------------------- admission

  private schedulePump(): void {
    if (this.inPump) {
      this.again = true;
      return;
    }
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    queueMicrotask(this.pumpTask);
  }

  private readonly pumpTask = (): void => {
    this.pumpScheduled = false;
    this.pump();
  };

  private pump(): void {
    if (this.inPump) {
      this.again = true;
      return;
    }
    this.inPump = true;
    try {
      do {
        this.again = false;
        while (this.admit()) {
          // Each round is one synchronous store answer or a store-less start.
        }
      } while (this.again);
    } finally {
      this.inPump = false;
    }
    this.arm();
    this.maybeIdle();
  }

  /** One admission round. Returns true when it made synchronous progress and another round may help. */
  private admit(): boolean {
    if (this.waiting === 0) return false;
    if (this.closed && !this.draining) return false;
    const piped = this.inFlight > 0;
    if (piped && !this.mayPipeline()) return false;
    // The jobs in line may all start: leave room for them.
    const free = this.limit - this.runningJobs.length - (this.line.length - this.lineHead);
    if (free <= 0) return false;
    const now = this.clock.now();
    if (now < this.wakeAt || now < this.pauseUntil) return false;
    if (piped && this.openUntil > now) return false;
    const calls = this.calls;
    const call = calls[0].state === CALL_IDLE ? calls[0] : calls[1];
    const first = calls[0].state === CALL_IDLE ? calls[1] : calls[0];
    const max = Math.min(free, this.ask);
    const jobs = piped ? this.incoming : this.line;
    const costs = call.costs;
    let n = 0;
    let uniform = Number.NaN;
    while (n < max) {
      if (piped) {
        // A second call carries only jobs of the first call's cost (see mayPipeline).
        const next = this.queue.peek();
        if (next === undefined || (next.state === QUEUED && next.cost !== first.uniform)) break;
      }
      const job = this.queue.shift();
      if (job === undefined) break;
      if (job.state !== QUEUED) continue; // cancelled: skipped lazily
      this.waiting--;
      if (job.heapIndex >= 0 && job.deadline <= now) {
        this.expire(job);
        continue;
      }
      job.state = INFLIGHT;
      jobs.push(job);
      costs[n] = job.cost;
      if (n === 0) uniform = job.cost;
      else if (job.cost !== uniform) uniform = Number.NaN;
      n++;
    }
    if (n === 0) return !piped && this.waiting > 0;
    if (piped) this.joinLine();
    call.request.count = n;
    call.uniform = uniform;
    if (this.openUntil > now) {
      this.startInLine(Number.POSITIVE_INFINITY, undefined, now);
      return true;
    }
    if (!this.subscribed) this.subscribe();
    call.state = CALL_SENT;
    call.sentAt = now;
    call.pauseEpoch = this.pauseEpoch;
    call.resumeEpoch = this.resumeEpoch;
    this.inFlight++;
    let result: AcquireResult | PromiseLike<AcquireResult>;
    try {
      result = this.store.acquire(call.request as AcquireRequest);
    } catch (err) {
      call.sync = true;
      this.callSettled(call, false, err, false);
      return true;
    }
    if (isThenable(result)) {
      call.sync = false;
      try {
        result.then(call.onAnswer, call.onFail);
      } catch (err) {
        this.callSettled(call, false, err, false);
        return true;
      }
      // Another round may send a second call while this one travels.
      return this.mayPipeline();
    }
    call.sync = true;
    this.callSettled(call, true, result, false);
    return true;
  }

  /** A pipelined call's jobs (this.incoming, in queue order) join the line, merged by rank. */
  private joinLine(): void {
    const line = this.line;
    const incoming = this.incoming;
    if (line.length === this.lineHead || !ranksAhead(incoming[0]!, line[line.length - 1]!)) {
      // The common case: nothing newer ranks ahead of the jobs already in line.
      for (let i = 0; i < incoming.length; i++) line.push(incoming[i]!);
    } else {
      const merged = this.spare;
      let i = this.lineHead;
      let j = 0;
      while (i < line.length || j < incoming.length) {
        if (j >= incoming.length || (i < line.length && !ranksAhead(incoming[j]!, line[i]!))) {
          merged.push(line[i++]!);
        } else {
          merged.push(incoming[j++]!);
        }
      }
      line.length = 0;
      this.spare = line;
      this.line = merged;
      this.lineHead = 0;
    }
    incoming.length = 0;
  }

  /**
   * Whether a second store call may be sent while one is in flight: only when the store is
   * asynchronous, its last answer granted everything (the rules are not binding), nothing is
   * failing, there is no global concurrency (leases go with the call that got them), and the
   * call in flight asked for jobs of one cost. Two calls in flight halve the round trips a
   * saturated valve waits for.
   */
  private mayPipeline(): boolean {
    if (this.inFlight !== 1 || !this.lastFull || this.global || this.failing) return false;
    const first = this.calls[0].state === CALL_SENT ? this.calls[0] : this.calls[1];
    return !first.sync && !Number.isNaN(first.uniform);
  }

  /** A store call settled. Answers are used as they come: grants go to the front of the line. */
  private callSettled(call: Call, ok: boolean, value: unknown, pump = true): void {
    if (call.state !== CALL_SENT) return;
    call.state = CALL_IDLE;
    this.inFlight--;
    this.sentAt = call.sentAt;
    this.sentPauseEpoch = call.pauseEpoch;
    this.sentResumeEpoch = call.resumeEpoch;
    this.syncAnswer = call.sync;
    // Jobs started below run synchronously and may call back into the valve: a pump they ask
    // for waits until this answer is processed (the line is not changed mid-processing).
    const outer = !this.inPump;
    this.inPump = true;
    try {
      if (ok) this.acquired(call, value as AcquireResult);
      else this.acquireFailed(value);
    } finally {
      if (outer) this.inPump = false;
    }
    if (pump || (outer && this.again)) this.pump();
  }

  /**
   * Starts up to `count` jobs from the front of the line (Infinity: all), the k-th with
   * leases[k]. A job cancelled in flight spends its grant (and its lease is released). When no
   * call is left in flight, the jobs still in line go back to the queue.
   */
  private startInLine(count: number, leases: readonly Lease[] | undefined, now: number): void {
    const line = this.line;
    for (let k = 0; k < count && this.lineHead < line.length; k++) {
      const job = line[this.lineHead]!;
      line[this.lineHead++] = undefined as unknown as Job;
      const lease = leases?.[k];
      if (job.state === INFLIGHT) this.start(job, lease, now);
      else if (lease !== undefined) this.releaseLater(lease.token); // cancelled in flight: lease freed
    }
    if (this.inFlight === 0) this.requeueLine();
  }

  /** Jobs left in line go back to the queue, last first (each insert then lands at its front). */
  private requeueLine(): void {
    const line = this.line;
    for (let i = line.length - 1; i >= this.lineHead; i--) {
      const job = line[i]!;
      if (job.state !== INFLIGHT) continue; // ended meanwhile (cancelled, expired, closed)
      job.state = QUEUED;
      this.waiting++;
      this.queue.insert(job);
    }
    line.length = 0;
    this.lineHead = 0;
  }

  private acquired(call: Call, r: AcquireResult): void {
    const n = call.request.count;
    if (
      typeof r !== 'object' ||
      r === null ||
      typeof r.granted !== 'number' ||
      !(r.granted >= 0) ||
      (this.global &&
        r.granted > 0 &&
        (!Array.isArray(r.leases) || r.leases.length < Math.min(Math.floor(r.granted), n)))
    ) {
      this.acquireFailed(new TypeError(`store.acquire() returned an invalid result: ${describe(r)}`));
      return;
    }
    const now = this.clock.now();
    const granted = Math.min(Math.floor(r.granted), n);
    this.failing = false;
    this.lastStoreError = undefined;
    this.backoff = 0;
    if (typeof r.now === 'number' && Number.isFinite(r.now)) this.offset = r.now - (this.sentAt + now) / 2;

    // The store's view of the shared pause.
    // A resume() called while this acquisition was in flight deleted the pause it may report.
    const resumedSince = this.sentResumeEpoch !== this.resumeEpoch;
    if (typeof r.pausedUntil === 'number' && r.pausedUntil > 0) {
      if (!resumedSince) this.learnPause(r.pausedUntil, false);
    } else if (this.pauseUntil !== 0 && this.sentPauseEpoch === this.pauseEpoch) {
      this.pauseUntil = 0;
      this.storePauseUntil = 0;
    }

    this.startInLine(granted, r.leases, now);
    this.lastFull = granted === n;

    if (granted < n) {
      const hint = typeof r.retryAfter === 'number' && r.retryAfter > 0 ? r.retryAfter : 0;
      if (r.blocked === 'concurrency') {
        this.blocked = 'concurrency';
        this.wakeAt = now + this.pollDelay(hint);
      } else if (r.blocked === 'pause' && resumedSince) {
        // Refused for a pause that resume() has since deleted: ask again at once.
        this.blocked = null;
        this.wakeAt = now;
      } else {
        this.blocked = r.blocked === 'pause' ? 'pause' : 'rate';
        // An asynchronous store's hint counts from about when it ran, mid-flight: sleep for
        // the hint minus the acquisition's elapsed time, so the next call arrives on time. A
        // synchronous store's hint counts from its own now, a few µs after sentAt.
        this.wakeAt = (this.syncAnswer ? now : this.sentAt) + hint;
      }
      // Never ask again at the same instant for nothing (a zero hint, or one lost in float
      // rounding), but don't oversleep a short hint either: at 1000/s a slot is 1 ms.
      if (granted === 0 && this.wakeAt <= now) {
        this.wakeAt = now + (this.blocked === null ? 0.01 : Math.max(hint, 0.01));
      }
      if (this.blocked === 'rate') {
        // The rule binds: ask for one more job than it just granted (at least 2, at most batch),
        // so that a refused call does not take a whole batch out of the queue and put it back,
        // while a partial answer still carries the wait for the next job.
        this.ask = Math.min(this.batch, Math.max(2, granted + 1));
        // Less than a timer tick (1 ms) to wait for a rule that cannot absorb a late start, with
        // a store a network round trip away: ask again at once instead of sleeping a whole tick.
        // The round trip is the timer; the call arrives after the slot, by less than one round
        // trip, or is refused again with a shorter wait. Rules with burst tolerance never get here
        // for sub-millisecond waits often, and synchronous stores use the precise timer instead.
        if (
          this.precise &&
          !this.syncAnswer &&
          this.wakeAt - now < 1 &&
          now - this.sentAt >= MIN_POLL_ROUND_TRIP
        ) {
          this.wakeAt = now;
        }
      }
    } else {
      this.blocked = null;
      this.wakeAt = 0;
      if (this.ask < this.batch) this.ask = Math.min(this.batch, this.ask * 2);
    }
    this.checkClosed();
  }

  private pollDelay(hint: number): number {
    if (this.store.notifies === true && this.unsubscribe !== null) {
      return Math.min(NOTIFIED_RECHECK, Math.max(POLL_MIN, hint > 0 ? hint : NOTIFIED_RECHECK));
    }
    return POLL_MIN + Math.random() * POLL_JITTER;
  }

  private acquireFailed(err: unknown): void {
    const now = this.clock.now();
    this.lastFull = false;
    this.backoff = this.backoff === 0 ? STORE_BACKOFF_MIN : Math.min(this.backoff * 2, STORE_BACKOFF_MAX);
    // The failed call's share of the line: what a call still in flight cannot grant.
    const other =
      this.inFlight > 0 ? (this.calls[0].state === CALL_SENT ? this.calls[0] : this.calls[1]) : null;
    const share = this.line.length - this.lineHead - (other === null ? 0 : other.request.count);
    const mode = this.mode;
    if (mode === 'open') {
      this.openUntil = now + this.backoff;
      this.startInLine(share, undefined, now);
    } else if (mode === 'throw') {
      const error = new ValveError('STORE_UNAVAILABLE', 'The store failed (onStoreError: throw)', {
        cause: err,
      });
      const line = this.line;
      const keep = line.length - share;
      for (let i = keep; i < line.length; i++) {
        const job = line[i]!;
        if (job.state === INFLIGHT) this.end(job, error);
      }
      line.length = keep;
      if (keep === this.lineHead) {
        line.length = 0;
        this.lineHead = 0;
      }
      for (const job of this.queue.drain()) {
        if (job.state === QUEUED) {
          this.waiting--;
          this.end(job, error);
        }
      }
    } else {
      this.failing = true;
      this.lastStoreError = err;
      this.blocked = 'error';
      // Exponential backoff with jitter: half fixed, half random.
      this.wakeAt = now + this.backoff / 2 + (Math.random() * this.backoff) / 2;
      if (this.inFlight === 0) this.requeueLine();
    }
    this.reportStoreError(err, 'acquire', mode);
    this.checkClosed();
  }

  // ---------------------------------------------------------------- running jobs

  private start(job: Job, lease: Lease | undefined, now: number): void {
    job.state = RUNNING;
    this.pending--;
    this.started++;
    if (job.heapIndex >= 0) this.deadlines.remove(job);
    let ctx: Context;
    if (lease !== undefined) {
      ctx = new Context({ token: lease.token, fence: lease.fence });
      ctx.held = lease;
      const expiry = this.sentAt + this.leaseTtl;
      ctx.leaseExpiry = expiry;
      if (expiry < this.minLeaseExpiry) this.minLeaseExpiry = expiry;
      if (this.leased.size === 0 && !this.renewing) this.renewAt = now + this.leaseTtl / 3;
      this.leased.add(ctx);
    } else {
      ctx = new Context(undefined);
    }
    const running = this.runningJobs;
    ctx.slot = running.length;
    running.push(ctx);
    if (job.hook !== null) job.hook.ctx = ctx;
    const fn = job.fn!;
    job.fn = null;
    let result: unknown;
    try {
      result = fn(ctx);
    } catch (err) {
      this.finish(job, ctx, false, err);
      return;
    }
    if (isThenable(result)) {
      try {
        result.then(
          (value) => this.finish(job, ctx, true, value),
          (err: unknown) => this.finish(job, ctx, false, err),
        );
      } catch (err) {
        this.finish(job, ctx, false, err);
      }
    } else {
      this.finish(job, ctx, true, result);
    }
  }

  private finish(job: Job, ctx: Context, ok: boolean, value: unknown): void {
    if (job.state !== RUNNING) return;
    job.state = DONE;
    // Swap-remove from the running array.
    const running = this.runningJobs;
    const last = running.pop()!;
    if (last !== ctx) {
      running[ctx.slot] = last;
      last.slot = ctx.slot;
    }
    ctx.slot = -1;
    if (job.hook !== null) {
      job.hook.detach();
      job.hook = null;
    }
    if (ctx.held !== null && ctx.lost === null) {
      this.leased.delete(ctx);
      this.releaseLater(ctx.held.token);
    }
    const resolve = job.resolve;
    job.resolve = settled;
    if (ctx.lost !== null) {
      this.failed++;
      rejectWith(resolve, ctx.lost);
    } else if (ok) {
      this.succeeded++;
      resolve(value);
    } else {
      this.failed++;
      rejectWith(resolve, value);
    }
    this.schedulePump();
    if (this.closed) this.checkClosed();
  }

  /** Ends a job that never started. */
  private end(job: Job, reason: unknown): void {
    job.state = DONE;
    this.pending--;
    this.rejected++;
    if (job.heapIndex >= 0) this.deadlines.remove(job);
    if (job.hook !== null) {
      job.hook.detach();
      job.hook = null;
    }
    job.fn = null;
    const resolve = job.resolve;
    job.resolve = settled;
    rejectWith(resolve, reason);
    if (this.closed) this.checkClosed();
  }

  private expire(job: Job): void {
    const error = this.failing
      ? new ValveError('STORE_UNAVAILABLE', 'The store is unavailable and the job reached its maxWait', {
          cause: this.lastStoreError,
        })
      : new ValveError('MAX_WAIT', 'The job did not start within its maxWait');
    this.end(job, error);
  }

  /** The caller's signal aborted. */
  onAbort(job: Job, reason: unknown): void {
    if (job.state === QUEUED) {
      this.waiting--;
      this.end(job, reason);
      this.queue.dropped();
      this.schedulePump();
    } else if (job.state === INFLIGHT) {
      // Its grant, if any, is spent; it will not run.
      this.end(job, reason);
      this.schedulePump();
    } else if (job.state === RUNNING) {
      job.hook?.ctx?.abort(reason);
    }
  }

  private maybeIdle(): void {
    if (this.busy && this.pending === 0 && this.runningJobs.length === 0 && this.inFlight === 0) {
      this.busy = false;
      this.events.emit('idle');
    }
  }

  // ---------------------------------------------------------------- the timer

  /** Sets the one timer to the earliest of: next admission, earliest maxWait, lease renewal or expiry. */
  private arm(): void {
    let next = Number.POSITIVE_INFINITY;
    if (
      this.waiting > 0 &&
      this.inFlight === 0 &&
      this.runningJobs.length < this.limit &&
      (!this.closed || this.draining)
    ) {
      next = Math.max(this.wakeAt, this.pauseUntil);
    }
    const head = this.deadlines.peek();
    if (head !== undefined && head.deadline < next) next = head.deadline;
    if (this.leased.size > 0) {
      const lease = this.renewing ? this.minLeaseExpiry : Math.min(this.renewAt, this.minLeaseExpiry);
      if (lease < next) next = lease;
    }
    if (next === Number.POSITIVE_INFINITY) {
      if (this.timer !== null) {
        this.clock.clearTimeout(this.timer);
        this.timer = null;
        this.timerAt = Number.POSITIVE_INFINITY;
      }
      return;
    }
    if (this.timer !== null) {
      if (this.timerAt <= next) return; // an earlier wake-up recomputes then
      this.clock.clearTimeout(this.timer);
    }
    const now = this.clock.now();
    const delay = next > now ? next - now : 0;
    this.timerAt = now + delay;
    const precise =
      this.precise &&
      this.syncAnswer &&
      this.blocked === 'rate' &&
      next === this.wakeAt &&
      this.clock.setPreciseTimeout !== undefined;
    this.timer = precise
      ? this.clock.setPreciseTimeout!(this.onTimer, delay)
      : this.clock.setTimeout(this.onTimer, delay);
  }

  private readonly onTimer = (): void => {
    this.timer = null;
    this.timerAt = Number.POSITIVE_INFINITY;
    const now = this.clock.now();
    for (
      let head = this.deadlines.peek();
      head !== undefined && head.deadline <= now;
      head = this.deadlines.peek()
    ) {
      if (head.state === QUEUED) {
        this.waiting--;
        this.expire(head);
        this.queue.dropped();
      } else this.expire(head);
    }
    if (this.leased.size > 0) {
      if (this.minLeaseExpiry <= now) this.expireLeases(now);
      if (!this.renewing && this.renewAt <= now) this.renew();
    }
    this.pump();
  };

  // ---------------------------------------------------------------- pauses

  private pauseMs(duration: unknown): number {
    if (typeof duration === 'number' || typeof duration === 'string') {
      return parseDuration(duration, 'pause');
    }
    if (typeof duration === 'object' && duration !== null && 'until' in duration) {
      const until = (duration as { until: unknown }).until;
      const at = until instanceof Date ? until.getTime() : until;
      if (typeof at !== 'number') {
        throw new TypeError(`Expected \`until\` to be a Date or epoch milliseconds, got ${describe(until)}`);
      }
      if (!Number.isFinite(at)) {
        throw new RangeError(
          `Expected \`until\` to be a valid Date or finite epoch milliseconds, got ${String(until)}`,
        );
      }
      return at - this.clock.now();
    }
    throw new TypeError(
      `Expected pause() to get milliseconds, a duration string such as '30s', or { until: Date | number }, got ${describe(duration)}`,
    );
  }

  private pauseInBackground(ms: number, source: PauseSource, detail: unknown): void {
    if (!(ms > 0) || ms === Number.POSITIVE_INFINITY) return;
    void this.writePause(ms, source, detail, false);
  }

  /** Applies a pause locally at once, then writes it to the store. */
  private writePause(
    ms: number,
    source: PauseSource,
    detail: unknown,
    confirm: boolean,
  ): Promise<void> | undefined {
    const now = this.clock.now();
    if (now + ms > this.pauseUntil) {
      this.pauseUntil = now + ms;
      this.pauseEpoch++;
    }
    this.schedulePump();
    let result: unknown;
    try {
      result = this.store.pause(this.id, ms);
    } catch (err) {
      const error = this.storeFailure(err, 'pause');
      return confirm ? Promise.reject(error) : undefined;
    }
    if (isThenable(result)) {
      this.ownPauses++;
      const epoch = this.resumeEpoch;
      const done = Promise.resolve(result).then(
        (until) => {
          this.ownPauses--;
          // A resume() called after this write deleted the pause: report it, do not keep it.
          this.paused(until, source, detail, this.resumeEpoch === epoch);
        },
        (err: unknown) => {
          this.ownPauses--;
          const error = this.storeFailure(err, 'pause');
          if (confirm) throw error;
        },
      );
      return confirm ? done : undefined;
    }
    this.paused(result, source, detail);
    return confirm ? Promise.resolve() : undefined;
  }

  private paused(until: unknown, source: PauseSource, detail: unknown, learn = true): void {
    if (typeof until !== 'number' || !Number.isFinite(until)) return;
    if (learn) this.learnPause(until, true);
    this.events.emit('pause', detail === undefined ? { until, source } : { until, source, detail });
  }

  /** Records a pause the store reported (store-clock epoch ms). Emits a 'remote' pause event for one this valve did not write. */
  private learnPause(storeUntil: number, own: boolean): void {
    const local = storeUntil - this.offset;
    const isNew = storeUntil > this.storePauseUntil;
    if (isNew) this.storePauseUntil = storeUntil;
    if (local > this.pauseUntil) {
      this.pauseUntil = local;
      this.pauseEpoch++;
    }
    if (!own && isNew && this.ownPauses === 0 && local > this.clock.now()) {
      this.events.emit('pause', { until: storeUntil, source: 'remote' });
    }
  }

  private resumed(): void {
    this.events.emit('resume', { source: 'manual' });
  }

  // ---------------------------------------------------------------- store wake-ups

  private subscribe(): void {
    this.subscribed = true;
    if (typeof this.store.subscribe !== 'function') return;
    try {
      const unsubscribe = this.store.subscribe(this.id, this.onWake);
      if (typeof unsubscribe === 'function') this.unsubscribe = unsubscribe;
    } catch (err) {
      this.reportStoreError(err, 'subscribe', 'none');
    }
  }

  private readonly onWake = (event: WakeEvent): void => {
    if (this.closed && !this.draining) return;
    if (typeof event !== 'object' || event === null) return;
    if (event.type === 'pause') {
      if (typeof event.until === 'number') this.learnPause(event.until, false);
    } else if (event.type === 'resume') {
      // Answers already on the wire may predate this resume: they report, but do not re-cache, a pause.
      this.resumeEpoch++;
      const had = this.pauseUntil > this.clock.now();
      this.pauseUntil = 0;
      this.storePauseUntil = 0;
      if (this.blocked === 'pause') {
        this.blocked = null;
        this.wakeAt = 0;
      }
      if (had) this.events.emit('resume', { source: 'remote' });
    } else if (event.type === 'release') {
      if (this.blocked === 'concurrency') {
        this.blocked = null;
        this.wakeAt = 0;
      }
    }
    this.schedulePump();
  };

  // ---------------------------------------------------------------- leases

  private renew(): void {
    const jobs = [...this.leased];
    const tokens = jobs.map((ctx) => ctx.held!.token);
    const sentAt = this.clock.now();
    this.renewing = true;
    let result: unknown;
    try {
      result = this.store.renew(this.id, tokens, this.leaseTtl);
    } catch (err) {
      this.renewFailed(jobs, sentAt, err);
      return;
    }
    if (isThenable(result)) {
      result.then(
        (held) => {
          this.renewed(jobs, sentAt, held);
          this.pump();
        },
        (err: unknown) => {
          this.renewFailed(jobs, sentAt, err);
          this.pump();
        },
      );
    } else {
      this.renewed(jobs, sentAt, result);
    }
  }

  private renewed(jobs: Context[], sentAt: number, held: unknown): void {
    if (!Array.isArray(held)) {
      this.renewFailed(
        jobs,
        sentAt,
        new TypeError(`store.renew() returned an invalid result: ${describe(held)}`),
      );
      return;
    }
    this.renewing = false;
    this.renewAt = sentAt + this.leaseTtl / 3;
    const expiry = sentAt + this.leaseTtl;
    for (let i = 0; i < jobs.length; i++) {
      const job = jobs[i]!;
      // A late answer never restores a lease already given up (or released: the job settled).
      if (job.lost !== null || !this.leased.has(job)) continue;
      if (held[i] === true) job.leaseExpiry = expiry;
      else this.loseLease(job, 'not-held', undefined);
    }
    this.recomputeLeaseExpiry();
  }

  private renewFailed(jobs: Context[], sentAt: number, err: unknown): void {
    this.renewing = false;
    this.renewAt = sentAt + this.leaseTtl / 3;
    this.reportStoreError(err, 'renew', 'lease-lost');
    for (const job of jobs) {
      if (job.lost === null && this.leased.has(job)) this.loseLease(job, 'renew-failed', err);
    }
    this.recomputeLeaseExpiry();
  }

  private expireLeases(now: number): void {
    for (const job of [...this.leased]) {
      if (job.leaseExpiry <= now) this.loseLease(job, 'expired', undefined);
    }
    this.recomputeLeaseExpiry();
  }

  private recomputeLeaseExpiry(): void {
    let min = Number.POSITIVE_INFINITY;
    for (const job of this.leased) if (job.leaseExpiry < min) min = job.leaseExpiry;
    this.minLeaseExpiry = min;
    if (this.leased.size === 0) this.renewAt = Number.POSITIVE_INFINITY;
  }

  private loseLease(job: Context, reason: 'not-held' | 'renew-failed' | 'expired', error: unknown): void {
    this.leased.delete(job);
    const lease = job.held!;
    const message =
      reason === 'not-held'
        ? 'The job lost its global lease: the store no longer held it at renewal'
        : reason === 'renew-failed'
          ? 'The job lost its global lease: the renewal failed'
          : 'The job lost its global lease: no renewal succeeded before it expired';
    job.lost = new ValveError('LEASE_LOST', message, error === undefined ? undefined : { cause: error });
    this.leasesLost++;
    job.abort(job.lost);
    this.events.emit(
      'lease-lost',
      error === undefined
        ? { token: lease.token, fence: lease.fence, reason }
        : { token: lease.token, fence: lease.fence, reason, error },
    );
  }

  /** Releases leases in one store call per tick. */
  private releaseLater(token: string): void {
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
    if (isThenable(result)) result.then(this.released, this.releaseFailed);
    else this.released();
  };

  private readonly released = (): void => {
    this.releasing--;
    if (this.blocked === 'concurrency') {
      this.blocked = null;
      this.wakeAt = 0;
    }
    this.schedulePump();
    this.checkClosed();
  };

  private readonly releaseFailed = (err: unknown): void => {
    this.releasing--;
    this.reportStoreError(err, 'release', 'none');
    this.checkClosed();
  };

  // ---------------------------------------------------------------- errors, close

  private reportStoreError(
    err: unknown,
    operation: StoreOperation,
    action: StoreErrorContext['action'],
  ): void {
    this.storeErrors++;
    this.events.emit('store-error', err, { operation, id: this.id, action });
  }

  /** Reports a failed pause/resume and returns the error its promise rejects with. */
  private storeFailure(err: unknown, operation: 'pause' | 'resume'): ValveError {
    this.reportStoreError(err, operation, 'none');
    return new ValveError('STORE_UNAVAILABLE', `The store failed to ${operation}`, { cause: err });
  }

  private checkListener(event: unknown, listener: unknown): void {
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

  /** close() without drain: queued and in-flight jobs reject CLOSED; running jobs see ctx.signal abort. */
  private cancelAll(): void {
    const error = new ValveError('CLOSED', 'The valve was closed before the job started');
    for (const job of this.queue.drain()) {
      if (job.state === QUEUED) {
        this.waiting--;
        this.end(job, error);
      }
    }
    // Jobs of the calls in flight, or of a batch being started (a job that closes the valve).
    const line = this.line;
    for (let i = this.lineHead; i < line.length; i++) {
      const job = line[i];
      if (job !== undefined && job.state === INFLIGHT) this.end(job, error);
    }
    const reason = new ValveError('CLOSED', 'The valve was closed while the job ran');
    for (const ctx of [...this.runningJobs]) ctx.abort(reason);
    this.arm();
  }

  private checkClosed(): void {
    if (
      this.closeResolve === null ||
      this.pending !== 0 ||
      this.runningJobs.length !== 0 ||
      this.inFlight !== 0 ||
      this.releasing !== 0 ||
      this.releaseScheduled
    ) {
      return;
    }
    const resolve = this.closeResolve;
    this.closeResolve = null;
    if (this.timer !== null) {
      this.clock.clearTimeout(this.timer);
      this.timer = null;
      this.timerAt = Number.POSITIVE_INFINITY;
    }
    if (this.unsubscribe !== null) {
      const unsubscribe = this.unsubscribe;
      this.unsubscribe = null;
      try {
        unsubscribe();
      } catch (err) {
        this.reportStoreError(err, 'subscribe', 'none');
      }
    }
    resolve();
  }
}

/**
 * Creates a valve: a local queue that starts jobs only when the store grants them.
 * Throws TypeError/RangeError synchronously for invalid options.
 */
export function createValve(options: ValveOptions): Valve {
  return new ValveImpl(normalizeOptions(options));
}
