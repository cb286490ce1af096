import type { Context, Job } from './job.js';

/*
 * The callers' signals: one 'abort' listener per signal per valve, whatever the number of jobs
 * that share it. Each signal a live job was given has one SignalWatch (found through a WeakMap)
 * listing its jobs, queued or running, each with its context once started. A job joins and
 * leaves its watch in O(1); the last one out removes the listener, so a long-lived signal keeps
 * neither the valve nor a listener once its jobs are done. Owned by the queue room (waiting.ts);
 * the job room tells a watch when one of its jobs starts or finishes.
 */

/** Who handles a caller's abort for a job: the queue room, which knows where the job waits. */
export interface AbortHandler {
  /** `ctx`: the running job's context, or null when it has not started. */
  abortJob(job: Job, reason: unknown, ctx: Context | null): void;
}

/** The one listener on a caller's signal, with the live jobs it was given to (an object listener: no closure). */
export class SignalWatch {
  /** The live jobs given this signal → their context once started (null while waiting). */
  private readonly jobs = new Map<Job, Context | null>();

  constructor(
    /** The caller's signal, listened to while some job in `jobs` is live. */
    private readonly signal: AbortSignal,
    /** Ends or aborts each job, wherever it is. */
    private readonly handler: AbortHandler,
    /** The registry this watch is filed in; it leaves it with its last job. */
    private readonly registry: Signals,
  ) {
    signal.addEventListener('abort', this);
  }

  /** A new job shares this signal. */
  add(job: Job): void {
    this.jobs.set(job, null);
  }

  /** The job started: an abort now aborts its context. */
  started(job: Job, ctx: Context): void {
    if (this.jobs.has(job)) this.jobs.set(job, ctx);
  }

  /** The job settled or ended: it no longer listens. The last job out removes the listener. */
  remove(job: Job): void {
    const jobs = this.jobs;
    if (!jobs.delete(job) || jobs.size > 0) return;
    this.unlisten();
  }

  /** Stops listening; a caller's signal whose removeEventListener throws is left to itself. */
  private unlisten(): void {
    this.registry.forget(this.signal, this);
    try {
      this.signal.removeEventListener('abort', this);
    } catch {
      // Not valve's to report: the job settles as it would, the watch is forgotten.
    }
  }

  handleEvent(): void {
    const reason = this.signal.reason;
    this.unlisten();
    // A snapshot: ending a job changes the map, and a job's own listeners may run valve code.
    const entries = [...this.jobs];
    this.jobs.clear();
    for (const [job, ctx] of entries) {
      job.signalWatch = null;
      this.handler.abortJob(job, reason, ctx);
    }
  }
}

/** The watches of one valve, by signal. */
export class Signals {
  private readonly watches = new WeakMap<AbortSignal, SignalWatch>();

  constructor(private readonly handler: AbortHandler) {}

  /** `job` listens to `signal` (not aborted): through the signal's one watch, created if needed. */
  watch(job: Job, signal: AbortSignal): void {
    let watch = this.watches.get(signal);
    if (watch === undefined) {
      watch = new SignalWatch(signal, this.handler, this);
      this.watches.set(signal, watch);
    }
    watch.add(job);
    job.signalWatch = watch;
  }

  /** A watch with no job left (or whose signal aborted) leaves the registry. */
  forget(signal: AbortSignal, watch: SignalWatch): void {
    if (this.watches.get(signal) === watch) this.watches.delete(signal);
  }
}
