import { INFLIGHT, type Job, type Jobs, ranksAhead } from './job.js';
import type { Leases } from './leases.js';
import { isThenable } from './maybe-promise.js';
import type { StoreRule } from './rules/rule.js';
import {
  ACQUIRE_WITH,
  type AcquireRequest,
  type AcquireResult,
  type AcquireWith,
  type Lease,
  type Store,
} from './stores/store.js';
import type { Waiting } from './waiting.js';

/*
 * The in-flight line: a valve's two store calls and the jobs they carry, and when a second call
 * may be pipelined behind the first. Owned by the admission room (admission.ts), which sends the
 * calls and handles their answers; the line starts granted jobs through the job room and
 * releases the leases of jobs cancelled in flight. See docs/architecture.md, "Pipelining".
 */

// Store call states.
const CALL_IDLE = 0;
const CALL_SENT = 1;

/** The request of one store call (an AcquireRequest whose arrays are reused). */
interface CallRequest {
  id: string;
  rules: readonly StoreRule[];
  costs: number[];
  count: number;
  lease: { limit: number; ttl: number } | undefined;
  /** A rule change in progress (filled by rulesets.ts before each send). */
  previous: readonly StoreRule[] | undefined;
  previousSince: readonly number[] | undefined;
  convert: boolean | undefined;
  record: string | undefined;
  recordTtl: number | undefined;
  /**
   * The ticket the valve holds in the id's line (0: none), from its last answer (see
   * Admission.turn); undefined: the valve takes no part in the line.
   */
  turn: number | undefined;
}

/**
 * One store call: its request and when it was sent. A valve owns two, so that a second call can
 * be in flight while the first one travels (see Line.mayPipeline). The jobs of every call in
 * flight wait in one line.
 */
export class Call {
  /** The costs of the call's jobs (request.costs); the first request.count entries are this call's. */
  readonly costs: number[] = [];
  /** What is sent: the same object for every call of this record. */
  readonly request: CallRequest;
  /** CALL_IDLE, or CALL_SENT from the send until its answer is taken (Line.answered). */
  state = CALL_IDLE;
  /** Local-clock send time. */
  sentAt = 0;
  /** The pause's raise epoch when sent (see Pauses). */
  pauseEpoch = 0;
  /** The pause's resume epoch when sent (see Pauses). */
  resumeEpoch = 0;
  /** Admission's release epoch when sent: a refusal on concurrency older than a release is stale. */
  releaseEpoch = 0;
  /** Answered synchronously (the store's hint counts from about now). */
  sync = false;
  /** The cost every job of this call has, or NaN when they differ. */
  uniform = Number.NaN;
  /** The call's promise callbacks (two per call record, none per call). */
  readonly onAnswer: (result: AcquireResult) => void;
  readonly onFail: (err: unknown) => void;

  constructor(
    id: string,
    rules: readonly StoreRule[],
    lease: { limit: number; ttl: number } | undefined,
    settled: (call: Call, ok: boolean, value: unknown) => void,
  ) {
    this.request = {
      id,
      rules,
      costs: this.costs,
      count: 0,
      lease,
      previous: undefined,
      previousSince: undefined,
      convert: undefined,
      record: undefined,
      recordTtl: undefined,
      turn: undefined,
    };
    this.onAnswer = (result) => settled(this, true, result);
    this.onFail = (err) => settled(this, false, err);
  }

  /**
   * Sends the request to `store`: through its callbacks form when it has one (see
   * ACQUIRE_WITH: no promise per call), else acquire(). Returns true when the call settled
   * synchronously (an answer or a throw, handed to `settledNow`), false when it settles later
   * through onAnswer/onFail, as `.then(onAnswer, onFail)` would.
   */
  ask(store: Store, settledNow: (call: Call, ok: boolean, value: unknown) => void): boolean {
    const request = this.request as AcquireRequest;
    const acquireWith = (store.acquire as { [ACQUIRE_WITH]?: AcquireWith })[ACQUIRE_WITH];
    if (acquireWith !== undefined) {
      this.sync = false;
      acquireWith.call(store, request, this.onAnswer, this.onFail);
      return false;
    }
    let result: AcquireResult | PromiseLike<AcquireResult>;
    try {
      result = store.acquire(request);
    } catch (err) {
      this.sync = true;
      settledNow(this, false, err);
      return true;
    }
    if (isThenable(result)) {
      this.sync = false;
      try {
        result.then(this.onAnswer, this.onFail);
      } catch (err) {
        settledNow(this, false, err);
        return true;
      }
      return false;
    }
    this.sync = true;
    settledNow(this, true, result);
    return true;
  }
}

export class Line {
  /** The two store calls; at most both are in flight. */
  private readonly calls: readonly [Call, Call];
  /** Calls in CALL_SENT state: 0, 1 or 2. */
  private sent = 0;
  /**
   * The jobs of every call in flight, in queue order (entries[head..]; slots before head are
   * emptied). Grants from any answer go to the front of the line: with pipelining both calls
   * carry jobs of one cost, so any of them may use any grant, and a job the first call could
   * not get keeps its place ahead of the second call's. When no call is left in flight, jobs
   * still in line go back to the queue (requeue).
   */
  private entries: (Job | undefined)[] = [];
  /** Index of the line's front in `entries`. */
  private head = 0;
  /**
   * End of the line in `entries` (slots from it on are empty). The arrays here keep their
   * length and are emptied slot by slot: setting an array's length to 0 drops its storage in
   * V8, and the next job would allocate it again (a valve group's key empties its line at
   * every answer).
   */
  private end = 0;
  /** A pipelined call's jobs, in queue order, until join() merges them into the line. Empty between rounds. */
  private incoming: (Job | undefined)[] = [];
  /** Jobs in `incoming`. */
  private incomingCount = 0;
  /** The array join() merges into, then swapped with `entries`. Every slot empty between merges. */
  private mergeBuffer: (Job | undefined)[] = [];
  /** The last answer granted every job it was asked for (the rules are not binding). */
  private lastFull = false;

  /** Global concurrency: leases go with the call that got them, so no second call is sent. */
  private readonly global: boolean;

  /** `lease`: the lease request of every call, with global concurrency. */
  constructor(
    id: string,
    rules: readonly StoreRule[],
    lease: { limit: number; ttl: number } | undefined,
    /** Starts granted jobs, ends those cut from the line. */
    private readonly jobs: Jobs,
    /** Releases the lease of a job cancelled in flight. */
    private readonly leases: Leases,
    settled: (call: Call, ok: boolean, value: unknown) => void,
  ) {
    this.global = lease !== undefined;
    this.calls = [new Call(id, rules, lease, settled), new Call(id, rules, lease, settled)];
  }

  /** Store calls in flight. */
  get inFlight(): number {
    return this.sent;
  }

  /** Jobs in line (they may all start). */
  get length(): number {
    return this.end - this.head;
  }

  /** The call to fill next: one that is not in flight. */
  idleCall(): Call {
    return this.calls[0].state === CALL_IDLE ? this.calls[0] : this.calls[1];
  }

  /** The call in flight, when exactly one is. */
  sentCall(): Call {
    return this.calls[0].state === CALL_SENT ? this.calls[0] : this.calls[1];
  }

  /** Adds a new call's job, in queue order: to the line itself, or (pipelined) to a buffer that join() merges. */
  add(job: Job, piped: boolean): void {
    if (piped) this.incoming[this.incomingCount++] = job;
    else this.entries[this.end++] = job;
  }

  /**
   * Whether a second store call may be sent while one is in flight: only when the store is
   * asynchronous, its last answer granted everything (the rules are not binding), nothing
   * holds it back (`held`: the store is failing, or a rule change waits for its conversion:
   * a call answered while the one that asked for it fails would spend the new rules
   * unconverted), there is no global concurrency (leases go with the call that got them), and
   * the call in flight asked for jobs of one cost. Two calls in flight halve the round trips a
   * saturated valve waits for.
   */
  mayPipeline(held: boolean): boolean {
    if (this.sent !== 1 || !this.lastFull || this.global || held) return false;
    const first = this.sentCall();
    return !first.sync && !Number.isNaN(first.uniform);
  }

  /** Records whether the answer being processed granted every job it was asked for. */
  recordAnswer(full: boolean): void {
    this.lastFull = full;
  }

  /** A pipelined call's jobs (the `incoming` buffer, in queue order) join the line, merged by rank. */
  join(): void {
    const line = this.entries;
    const incoming = this.incoming;
    const n = this.incomingCount;
    const end = this.end;
    if (end === this.head || !ranksAhead(incoming[0]!, line[end - 1]!)) {
      // The common case: nothing newer ranks ahead of the jobs already in line.
      for (let i = 0; i < n; i++) line[this.end++] = incoming[i];
    } else {
      const merged = this.mergeBuffer;
      let k = 0;
      let i = this.head;
      let j = 0;
      while (i < end || j < n) {
        if (j >= n || (i < end && !ranksAhead(incoming[j]!, line[i]!))) {
          merged[k++] = line[i++];
        } else {
          merged[k++] = incoming[j++];
        }
      }
      for (let x = this.head; x < end; x++) line[x] = undefined;
      this.mergeBuffer = line;
      this.entries = merged;
      this.head = 0;
      this.end = k;
    }
    for (let i = 0; i < n; i++) incoming[i] = undefined;
    this.incomingCount = 0;
  }

  /** Marks `call` sent at `now`, remembering the pause epochs of that moment. */
  send(call: Call, now: number, pauseEpoch: number, resumeEpoch: number): void {
    call.state = CALL_SENT;
    call.sentAt = now;
    call.pauseEpoch = pauseEpoch;
    call.resumeEpoch = resumeEpoch;
    this.sent++;
  }

  /** Takes a call's answer: false when it was already taken (a call settles once). */
  answered(call: Call): boolean {
    if (call.state !== CALL_SENT) return false;
    call.state = CALL_IDLE;
    this.sent--;
    return true;
  }

  /**
   * Starts up to `count` jobs from the front of the line (Infinity: all), the k-th with
   * leases[k], granted by a call sent at `sentAt`. A job cancelled in flight spends its grant
   * (and its lease is released).
   *
   * A job is never started on a lease already expired as this process sees it (sentAt +
   * leaseTtl, checked on the clock before each start: the answer came late, or a job started
   * before it ran long): the store may have given that slot to another process. Then this and
   * every later grant of the answer (same send time) are given up: their leases are released,
   * their jobs stay in line and go back to the queue at their place (requeue; with global
   * concurrency no other call is in flight), to be asked for again. Their rate budget stays
   * spent, as for a job cancelled in flight. A job given up so OUTLIVED_LIMIT times in a row
   * ends with LEASE_LOST (left in line: requeue skips it).
   */
  start(count: number, leases: readonly Lease[] | undefined, sentAt: number, now: number): void {
    const line = this.entries;
    for (let k = 0; k < count && this.head < this.end; k++) {
      const job = line[this.head]!;
      const lease = leases?.[k];
      if (lease !== undefined && this.leases.outlived(sentAt)) {
        const last = Math.min(count, k + this.end - this.head);
        for (let j = k; j < last; j++) {
          this.leases.releaseLater(leases![j]!.token);
          // A job whose grants keep coming too late ends (the store answers later than leaseTtl).
          const late = line[this.head + j - k]!;
          const error = late.state === INFLIGHT ? this.leases.grantOutlived(late, sentAt) : null;
          if (error !== null) this.jobs.end(late, error);
        }
        return;
      }
      line[this.head++] = undefined;
      if (job.state === INFLIGHT) this.jobs.start(job, lease, sentAt, now);
      else if (lease !== undefined) this.leases.releaseLater(lease.token); // cancelled in flight: lease freed
    }
    // Every slot empty: the line starts again from the front of its array.
    if (this.head === this.end) this.head = this.end = 0;
  }

  /** Jobs left in line go back to the queue, last first (each insert then lands at its front). */
  requeue(waiting: Waiting): void {
    const line = this.entries;
    for (let i = this.end - 1; i >= this.head; i--) {
      const job = line[i]!;
      line[i] = undefined;
      if (job.state !== INFLIGHT) continue; // ended meanwhile (cancelled, expired, closed)
      waiting.putBack(job);
    }
    this.head = 0;
    this.end = 0;
  }

  /** The failed call's share of the line: the jobs a call still in flight cannot grant. */
  failedShare(): number {
    const other = this.sent > 0 ? this.sentCall() : null;
    return this.length - (other === null ? 0 : other.request.count);
  }

  /** onStoreError 'throw': the last `share` jobs of the line end with `error`. */
  endTail(share: number, error: unknown): void {
    const line = this.entries;
    const end = this.end;
    const keep = end - share;
    for (let i = keep; i < end; i++) {
      const job = line[i]!;
      if (job.state === INFLIGHT) this.jobs.end(job, error);
    }
    for (let i = keep; i < end; i++) line[i] = undefined;
    this.end = keep;
    if (keep === this.head) {
      this.head = 0;
      this.end = 0;
    }
  }

  /** close() without drain: the jobs of the calls in flight, or of a batch being started, end with `error`. */
  endAll(error: unknown): void {
    const line = this.entries;
    for (let i = this.head; i < this.end; i++) {
      const job = line[i];
      if (job !== undefined && job.state === INFLIGHT) this.jobs.end(job, error);
    }
  }
}
