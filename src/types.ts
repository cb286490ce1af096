import type { PauseCause, ValveEventName, ValveListener } from './events.js';
import type { FetchLike, WrapFetchOptions } from './feedback/fetch.js';
import type { FeedbackReading } from './feedback/types.js';
import type { Rule } from './rules/rule.js';

/*
 * The public types of a valve, apart from the code. Event payloads are in events.ts, options
 * in options.ts, the store contract in stores/store.ts.
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
  /** Cost units this job spends on every rule. A positive integer, default 1. */
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
  /** What produced that pause: its source, and for a pause read from a response the header and its model; null when not paused. */
  pausedBy: PauseCause | null;
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
  observe(input: unknown): FeedbackReading | undefined;
  /** Pauses every valve sharing the id (extend only); resolves once the store recorded it. */
  pause(duration: number | string | { until: Date | number }): Promise<void>;
  /** Deletes the shared pause. */
  resume(): Promise<void>;
  /**
   * Changes the valve's rules (validated like createValve()'s: a bad rule rejects with a
   * TypeError or RangeError). Spent budget carries over; waiting jobs the new rules can never
   * admit reject with a RangeError naming the rule. Resolves at once: the next store call uses them.
   */
  setRules(rules: Rule | readonly Rule[]): Promise<void>;
  stats(): ValveStats;
  on<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
  once<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
  off<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
  /** Rejects queued jobs with CLOSED (or, with drain, runs them first); resolves when running jobs settled and leases are released. */
  close(options?: { drain?: boolean }): Promise<void>;
}
