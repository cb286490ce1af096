import type { ValveError } from './errors.js';
import type { LeaseHolder, Leases } from './leases.js';
import type { ValveObserver } from './observer.js';
import { DeadlineHeap } from './queue.js';
import type { SignalWatch } from './signals.js';
import type { Lease } from './stores/store.js';
import type { JobContext, JobLease } from './types.js';

/*
 * The job room: the per-job record, the running job's context, and a job's start, settle and
 * end. It owns the running jobs, the maxWait deadlines and the job counters; it calls the
 * leases room for a job's lease, and tells the valve (JobsHost) when a job is done.
 */

// Job states: QUEUED → INFLIGHT (its store call is in flight) → RUNNING → DONE; any → DONE.
export const QUEUED = 0;
export const INFLIGHT = 1;
export const RUNNING = 2;
export const DONE = 3;

export type AnyJob = (ctx: JobContext) => unknown;

// The promise executor writes here, so creating a job's promise allocates no closure.
// Only `resolve` is kept (a job rejects by resolving with a rejected promise): holding the
// reject function too would cost ~70 bytes per queued job.
let capturedResolve: (value: unknown) => void = () => {};

/** The executor of a job's promise: `new Promise(capture)`, then `new Job(…)` takes its resolve. */
export function capture(resolve: (value: unknown) => void): void {
  capturedResolve = resolve;
}

/** Rejects a job's promise through its resolve function. */
function rejectWith(resolve: (value: unknown) => void, reason: unknown): void {
  resolve(Promise.reject(reason));
}

const settled = (): void => {};

/** One job: the only per-job record while queued (kept small: see the memory budget). */
export class Job {
  /** The job's function; null once it started or ended. */
  fn: AnyJob | null;
  /** Units spent on every rule (a positive integer). */
  readonly cost: number;
  /** Higher starts first (finite, never -0). */
  readonly priority: number;
  /** Call order: ties within a priority start in this order. */
  readonly seq: number;
  /** Local-clock deadline of maxWait, or 0 for none (a small integer keeps the field unboxed). */
  readonly deadline: number;
  /** Position in the deadline heap, or -1 when not in it (no deadline, started or ended). */
  heapIndex = -1;
  /** QUEUED, INFLIGHT, RUNNING or DONE; only moves forward, except INFLIGHT → QUEUED when not granted. */
  state = QUEUED;
  /** The one listener on the caller's signal (shared by its jobs), while the job is live. */
  signalWatch: SignalWatch | null = null;
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

/**
 * A job queued while its valve had an observer (valve/otel): it also holds when run() queued
 * it. A subclass, so that the jobs of a valve nobody observes stay as small as they were.
 */
export class TimedJob extends Job {
  /** When run() queued it (the valve's clock, ms). */
  readonly queuedAt: number;

  constructor(fn: AnyJob, cost: number, priority: number, seq: number, deadline: number, queuedAt: number) {
    super(fn, cost, priority, seq, deadline);
    this.queuedAt = queuedAt;
  }
}

/** Tells a live (queued) job from a cancelled one, for the queue's compaction. */
export function isQueued(job: Job): boolean {
  return job.state === QUEUED;
}

/** Queue order: higher priority first, then call order. */
export function ranksAhead(a: Job, b: Job): boolean {
  return a.priority > b.priority || (a.priority === b.priority && a.seq < b.seq);
}

/**
 * What a running job is given, and the valve's per-run state (kept out of the queued
 * Job record so queued jobs stay small). Its AbortController is created only if the job
 * reads `signal`.
 */
export class Context implements JobContext, LeaseHolder {
  /** Created on the first read of `signal`; aborted whenever `aborted` is set. */
  private controller: AbortController | null = null;
  /** abort() was called (once true, stays true). */
  private aborted = false;
  /** The first abort's reason. */
  private reason: unknown = undefined;
  /** What the job sees of its lease (token, fence), with global concurrency. */
  readonly lease: JobLease | undefined;
  /** Index in the job room's running array while running, else -1. */
  slot = -1;
  /** The store's lease, with global concurrency. */
  heldLease: Lease | null = null;
  /** Local-clock time until which the lease is known held. */
  leaseExpiry = 0;
  /** Set when the lease was lost: the job's promise rejects with it when the callback settles. */
  leaseLost: ValveError | null = null;

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

/** What the job room may call above it (wired by valve.ts). */
export interface JobsHost {
  /** A running job settled: its slot is free for admission, and a closing valve may be done. */
  jobSettled(): void;
  /** A job ended without starting: a closing valve may be done. */
  jobEnded(): void;
}

export class Jobs {
  /** Contexts of the running jobs, in no order; each one's `slot` is its index. */
  private readonly running: Context[] = [];
  /** Jobs with a maxWait that have neither started nor ended, earliest deadline first. */
  private readonly deadlines = new DeadlineHeap<Job>();
  /** Jobs enqueued that have neither started nor ended (queued or in flight). */
  private pendingCount = 0;
  /** Jobs started (only grows). */
  private startedCount = 0;
  /** Started jobs that fulfilled (only grows). */
  private succeededCount = 0;
  /** Started jobs that rejected, including LEASE_LOST (only grows). */
  private failedCount = 0;
  /** Jobs that ended without starting, including refused calls (only grows). */
  private rejectedCount = 0;
  /** Hears every start and rejection (valve/otel), or null: set through the valve's OBSERVE method. */
  observer: ValveObserver | null = null;

  constructor(
    /** Takes a started job's lease, and releases it when the job settles. */
    private readonly leases: Leases,
    /** The valve above. */
    private readonly host: JobsHost,
  ) {}

  get pending(): number {
    return this.pendingCount;
  }

  get runningCount(): number {
    return this.running.length;
  }

  get started(): number {
    return this.startedCount;
  }

  get succeeded(): number {
    return this.succeededCount;
  }

  get failed(): number {
    return this.failedCount;
  }

  get rejected(): number {
    return this.rejectedCount;
  }

  /** Counts a new job as pending and tracks its deadline. */
  add(job: Job): void {
    this.pendingCount++;
    if (job.deadline !== 0) this.deadlines.push(job);
  }

  /** A call refused before it became a job (bad arguments, QUEUE_FULL, CLOSED, aborted): counted as rejected. */
  refuse(reason: unknown): Promise<never> {
    this.rejectedCount++;
    if (this.observer !== null) this.observer.rejected(reason);
    return Promise.reject(reason);
  }

  /** The earliest maxWait deadline; Infinity when none. */
  nextDeadline(): number {
    const head = this.deadlines.peek();
    return head === undefined ? Number.POSITIVE_INFINITY : head.deadline;
  }

  /** The job whose deadline came first, if it is due at `now`. */
  due(now: number): Job | undefined {
    const head = this.deadlines.peek();
    return head !== undefined && head.deadline <= now ? head : undefined;
  }

  /** Starts a job granted by a store call sent at `sentAt`, with `lease` under global concurrency. */
  start(job: Job, lease: Lease | undefined, sentAt: number, now: number): void {
    job.state = RUNNING;
    this.pendingCount--;
    this.startedCount++;
    if (job.heapIndex >= 0) this.deadlines.remove(job);
    if (this.observer !== null) this.observer.started(job instanceof TimedJob ? job.queuedAt : -1, now);
    let ctx: Context;
    if (lease !== undefined) {
      ctx = new Context({ token: lease.token, fence: lease.fence });
      ctx.heldLease = lease;
      this.leases.track(ctx, sentAt);
    } else {
      ctx = new Context(undefined);
    }
    const running = this.running;
    ctx.slot = running.length;
    running.push(ctx);
    if (job.signalWatch !== null) job.signalWatch.started(job, ctx);
    const fn = job.fn!;
    job.fn = null;
    let result: unknown;
    try {
      result = fn(ctx);
    } catch (err) {
      this.finish(job, ctx, false, err);
      return;
    }
    if (result === null || (typeof result !== 'object' && typeof result !== 'function')) {
      this.finish(job, ctx, true, result);
      return;
    }
    // `then` is read once, inside the try: a getter that throws (or a revoked Proxy) rejects the
    // job with its error, as a promise resolved with that object would.
    try {
      const then = (result as { then?: unknown }).then;
      if (typeof then !== 'function') {
        this.finish(job, ctx, true, result);
        return;
      }
      then.call(
        result,
        (value: unknown) => this.finish(job, ctx, true, value),
        (err: unknown) => this.finish(job, ctx, false, err),
      );
    } catch (err) {
      this.finish(job, ctx, false, err);
    }
  }

  private finish(job: Job, ctx: Context, ok: boolean, value: unknown): void {
    if (job.state !== RUNNING) return;
    job.state = DONE;
    // Swap-remove from the running array.
    const running = this.running;
    const last = running.pop()!;
    if (last !== ctx) {
      running[ctx.slot] = last;
      last.slot = ctx.slot;
    }
    ctx.slot = -1;
    if (job.signalWatch !== null) {
      job.signalWatch.remove(job);
      job.signalWatch = null;
    }
    if (ctx.heldLease !== null) this.leases.settled(ctx);
    const resolve = job.resolve;
    job.resolve = settled;
    if (ctx.leaseLost !== null) {
      this.failedCount++;
      rejectWith(resolve, ctx.leaseLost);
    } else if (ok) {
      this.succeededCount++;
      resolve(value);
    } else {
      this.failedCount++;
      rejectWith(resolve, value);
    }
    this.host.jobSettled();
  }

  /** Ends a job that never started. */
  end(job: Job, reason: unknown): void {
    job.state = DONE;
    this.pendingCount--;
    this.rejectedCount++;
    if (job.heapIndex >= 0) this.deadlines.remove(job);
    if (job.signalWatch !== null) {
      job.signalWatch.remove(job);
      job.signalWatch = null;
    }
    job.fn = null;
    const resolve = job.resolve;
    job.resolve = settled;
    if (this.observer !== null) this.observer.rejected(reason);
    rejectWith(resolve, reason);
    this.host.jobEnded();
  }

  /** The caller's signal aborted after the start: the job's own signal (`ctx`) aborts. */
  abortRunning(ctx: Context | null, reason: unknown): void {
    ctx?.abort(reason);
  }

  /** close() without drain: every running job's signal aborts. */
  abortAll(reason: unknown): void {
    for (const ctx of [...this.running]) ctx.abort(reason);
  }
}
