import { type Context, INFLIGHT, isQueued, type Job, type Jobs, QUEUED, RUNNING } from './job.js';
import { JobQueue } from './queue.js';
import { type AbortHandler, Signals } from './signals.js';

/*
 * The queue room: the jobs waiting for their start, in queue order (queue.ts), how many of them
 * are live, the one listener on each caller's signal (signals.ts), and the end of a job that is cancelled
 * or expires before it starts. The valve puts jobs in; the admission room takes them out for a
 * store call and puts back those the store did not grant.
 */

/** What the queue room may call above it (wired by valve.ts). */
export interface WaitingHost {
  /** A job left the queue or the line without starting: admission looks again. */
  jobLeft(): void;
  /**
   * The queue has a new head, of `cost`: the head left (cancelled, expired, ended by a rule
   * change), or a job now stands before it (a higher priority, a retry's earlier place).
   */
  newHead(cost: number): void;
  /** The error a job gets when it reaches its maxWait before starting (MAX_WAIT, or STORE_UNAVAILABLE while the store fails). */
  expiryError(): unknown;
}

export class Waiting implements AbortHandler {
  /** Waiting jobs by (priority, seq); cancelled ones stay until skipped or compacted. */
  private readonly queue = new JobQueue<Job>(isQueued);
  /** Live (QUEUED) jobs in the queue: not cancelled, not taken for a store call. */
  private live = 0;
  /** The callers' signals: one listener per signal, whatever the number of its jobs. */
  private readonly signals = new Signals(this);

  constructor(
    /** Ends the jobs that leave without starting; knows their deadlines. */
    private readonly jobs: Jobs,
    /** The valve above. */
    private readonly host: WaitingHost,
  ) {}

  /** Live jobs waiting in the queue. */
  get count(): number {
    return this.live;
  }

  /**
   * Queues a new job (at its place by sequence when `retry`), listening to its caller's signal.
   * Returns false when the signal refused the listener (its addEventListener threw): the job
   * then ends with that error, never queued.
   */
  enqueue(job: Job, signal: AbortSignal | null, retry: boolean): boolean {
    if (signal !== null) {
      try {
        this.signals.watch(job, signal);
      } catch (err) {
        this.jobs.end(job, err);
        return false;
      }
    }
    const first = this.live === 0;
    this.live++;
    if (retry) this.queue.insert(job);
    else this.queue.push(job);
    if (first || this.head() === job) this.host.newHead(job.cost);
    return true;
  }

  /** The live job at the head of the queue (the cancelled ones before it are dropped), or undefined. */
  head(): Job | undefined {
    const queue = this.queue;
    for (let job = queue.peek(); job !== undefined; job = queue.peek()) {
      if (job.state === QUEUED) return job;
      queue.shift();
    }
    return undefined;
  }

  /** The head left the queue: the next live job, if any, is the new head. */
  private headLeft(): void {
    const head = this.head();
    if (head !== undefined) this.host.newHead(head.cost);
  }

  /**
   * Takes the next live job from the queue's head for a store call (it is then INFLIGHT), or
   * undefined when there is none. With `cost` (not NaN), stops instead at a live job of another
   * cost. Jobs past their deadline (`now`) end on the way.
   */
  take(now: number, cost: number): Job | undefined {
    const queue = this.queue;
    for (;;) {
      if (!Number.isNaN(cost)) {
        const next = queue.peek();
        if (next === undefined || (next.state === QUEUED && next.cost !== cost)) return undefined;
      }
      const job = queue.shift();
      if (job === undefined) return undefined;
      if (job.state !== QUEUED) continue; // cancelled: skipped lazily
      this.live--;
      if (job.heapIndex >= 0 && job.deadline <= now) {
        this.jobs.end(job, this.host.expiryError());
        continue;
      }
      job.state = INFLIGHT;
      return job;
    }
  }

  /** A job taken for a store call and not granted goes back to its place (in front of later ones). */
  putBack(job: Job): void {
    job.state = QUEUED;
    this.live++;
    this.queue.insert(job);
  }

  /** The caller's signal aborted (`ctx`: the job's context once started). */
  abortJob(job: Job, reason: unknown, ctx: Context | null): void {
    if (job.state === QUEUED) {
      const wasHead = this.head() === job;
      this.live--;
      this.jobs.end(job, reason);
      this.queue.dropped();
      if (wasHead) this.headLeft();
      this.host.jobLeft();
    } else if (job.state === INFLIGHT) {
      // Its grant, if any, is spent; it will not run.
      this.jobs.end(job, reason);
      this.host.jobLeft();
    } else if (job.state === RUNNING) {
      this.jobs.abortRunning(ctx, reason);
    }
  }

  /** Ends every job whose maxWait deadline passed at `now`, queued or in flight. */
  expireDue(now: number): void {
    let headLeft = false;
    for (let job = this.jobs.due(now); job !== undefined; job = this.jobs.due(now)) {
      if (job.state === QUEUED) {
        if (this.head() === job) headLeft = true;
        this.live--;
        this.jobs.end(job, this.host.expiryError());
        this.queue.dropped();
      } else this.jobs.end(job, this.host.expiryError());
    }
    if (headLeft) this.headLeft();
  }

  /** Every queued job for which `refuse` returns an error ends with it; the others keep their places. */
  endWhere(refuse: (job: Job) => Error | undefined): void {
    if (this.live === 0) return;
    const queue = this.queue;
    const head = this.head();
    for (const job of queue.drain()) {
      if (job.state !== QUEUED) continue;
      const error = refuse(job);
      if (error === undefined) queue.push(job);
      else {
        this.live--;
        this.jobs.end(job, error);
      }
    }
    if (head?.state !== QUEUED) this.headLeft();
  }

  /** Every queued job ends with `error` (close() without drain; onStoreError 'throw'). */
  endAll(error: unknown): void {
    for (const job of this.queue.drain()) {
      if (job.state === QUEUED) {
        this.live--;
        this.jobs.end(job, error);
      }
    }
  }
}
