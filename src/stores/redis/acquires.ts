/**
 * How a store's acquire calls reach Redis: in the order they were made, a bounded number in
 * flight, and (on a standalone server) several valves' calls in one script call.
 *
 * - **Across ids.** A valve group with thousands of keys, each with a job or two, makes one
 *   acquire call per job: batching per id cannot help. The calls made in the same turn of the
 *   event loop (the answers read from the socket at once start jobs, whose successors are
 *   queued at once) go out together as acquire-many.lua, one EVALSHA and one TIME for up to
 *   MAX_PER_CALL of them, each request exactly the acquire.lua call it would have been. Not on
 *   a cluster, where each id's keys live in their own slot: there each request is its own call.
 * - **In flight.** At most MAX_IN_FLIGHT requests are in flight; the rest wait here, in order,
 *   and their deadline starts when they are sent. A process with more calls than it can read
 *   answers for (10,000 keys, each with a call in flight) would otherwise find answers waiting
 *   in its socket past their deadline, time them out (the server did answer), retry them, and
 *   fall further behind. A request that waited here as long as the timeout when a call in flight
 *   times out (the server is not answering) is rejected with the same error, unsent.
 */
import type { AcquireResult } from '../store.js';
import type { Deadlines, Pending } from './deadlines.js';
import { ACQUIRE, ACQUIRE_MANY } from './scripts.generated.js';

/** Requests in flight at most, per store. */
export const MAX_IN_FLIGHT = 1024;
/** Requests per acquire-many.lua call at most. */
export const MAX_PER_CALL = 64;
/** A request with more keys and arguments than this (a batch of mixed costs) goes alone. */
const MAX_ARGS_BATCHED = 64;

/** Reads one acquire.lua reply (store.ts). */
export type ReadAcquire = (
  reply: unknown,
  flags: { readonly leased: boolean; readonly recorded: boolean; readonly turned: boolean },
) => AcquireResult;

/** One acquire call not answered yet. */
class Request {
  next: Request | null = null;
  resolve: ((value: AcquireResult) => void) | null = null;
  reject: ((err: unknown) => void) | null = null;
  constructor(
    readonly id: string,
    readonly numKeys: number,
    readonly all: readonly string[],
    readonly leased: boolean,
    readonly recorded: boolean,
    readonly turned: boolean,
    /** When it was queued (performance.now()). */
    readonly at: number,
  ) {}
}

export class Acquires {
  /** Requests not sent yet, oldest first. */
  private head: Request | null = null;
  private tail: Request | null = null;
  /** A flush is scheduled (process.nextTick). */
  private scheduled = false;

  constructor(
    private readonly deadlines: Deadlines,
    /** Several ids per script call (a standalone server). */
    private readonly many: boolean,
    private readonly timeout: number,
    private readonly read: ReadAcquire,
    /** The error of a request past its deadline: sent and unanswered, or never sent. */
    private readonly timeoutError: (id: string, sent: boolean) => Error,
  ) {
    deadlines.settled = () => {
      if (this.head !== null && !this.scheduled) this.schedule();
    };
    deadlines.timedOut = () => this.expire();
  }

  /** Queues one acquire.lua call (its keys are the first `numKeys` of `all`). */
  send(
    id: string,
    numKeys: number,
    all: readonly string[],
    leased: boolean,
    recorded: boolean,
    turned: boolean,
  ): Promise<AcquireResult> {
    const request = new Request(id, numKeys, all, leased, recorded, turned, performance.now());
    const promise = new Promise<AcquireResult>((resolve, reject) => {
      request.resolve = resolve;
      request.reject = reject;
    });
    if (this.tail === null) this.head = request;
    else this.tail.next = request;
    this.tail = request;
    if (!this.scheduled) this.schedule();
    return promise;
  }

  private schedule(): void {
    this.scheduled = true;
    // After the microtasks of this turn: every valve answered in it has made its next call.
    process.nextTick(this.flush);
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const deadlines = this.deadlines;
    while (this.head !== null && deadlines.load < MAX_IN_FLIGHT) {
      const first = this.head;
      let count = 1;
      if (this.many && first.all.length <= MAX_ARGS_BATCHED) {
        const most = Math.min(MAX_PER_CALL, MAX_IN_FLIGHT - deadlines.load);
        for (let r = first.next; r !== null && count < most && r.all.length <= MAX_ARGS_BATCHED; r = r.next)
          count++;
      }
      if (count === 1) {
        this.head = first.next;
        if (this.head === null) this.tail = null;
        first.next = null;
        const { resolve, reject } = first;
        first.resolve = null;
        first.reject = null;
        deadlines.dispatch(
          ACQUIRE,
          first.id,
          first.numKeys,
          first.all,
          this.readOne,
          first.leased,
          first.recorded,
          first.turned,
          1,
          resolve as (value: unknown) => void,
          reject!,
        );
      } else {
        this.sendMany(count);
      }
    }
  };

  private readonly readOne = (reply: unknown, call: Pending): unknown => this.read(reply, call);

  /** Sends the first `count` queued requests as one acquire-many.lua call. */
  private sendMany(count: number): void {
    const requests = new Array<Request>(count);
    let keys = 0;
    let size = 0;
    let r = this.head!;
    for (let i = 0; i < count; i++) {
      requests[i] = r;
      keys += r.numKeys;
      size += r.all.length;
      const next = r.next;
      r.next = null;
      if (i === count - 1) {
        this.head = next;
        if (next === null) this.tail = null;
      } else r = next!;
    }
    const all = new Array<string>(size + 1 + 2 * count);
    let k = 0;
    for (let i = 0; i < count; i++) {
      const req = requests[i]!;
      for (let j = 0; j < req.numKeys; j++) all[k++] = req.all[j]!;
    }
    all[k++] = String(count);
    for (let i = 0; i < count; i++) {
      const req = requests[i]!;
      all[k++] = String(req.numKeys);
      all[k++] = String(req.all.length - req.numKeys);
    }
    for (let i = 0; i < count; i++) {
      const req = requests[i]!;
      for (let j = req.numKeys; j < req.all.length; j++) all[k++] = req.all[j]!;
    }
    this.deadlines.dispatch(
      ACQUIRE_MANY,
      requests[0]!.id,
      keys,
      all,
      null,
      false,
      false,
      false,
      count,
      (value) => this.answered(requests, value),
      (err) => this.failed(requests, err),
    );
  }

  /** An acquire-many.lua reply: each request gets its own answer (or error). */
  private answered(requests: readonly Request[], value: unknown): void {
    const replies = Array.isArray(value) && value.length === requests.length ? value : undefined;
    for (let i = 0; i < requests.length; i++) {
      const req = requests[i]!;
      const resolve = req.resolve!;
      const reject = req.reject!;
      req.resolve = null;
      req.reject = null;
      if (replies === undefined) {
        reject(new TypeError(`valve: unexpected Redis reply for acquire-many: ${String(value)}`));
        continue;
      }
      const reply = replies[i];
      if (reply instanceof Error) {
        reject(reply);
        continue;
      }
      let result: AcquireResult;
      try {
        result = this.read(reply, req);
      } catch (err) {
        reject(err);
        continue;
      }
      resolve(result);
    }
  }

  /** An acquire-many.lua call failed or timed out: so did each of its requests. */
  private failed(requests: readonly Request[], err: unknown): void {
    const timedOut = err instanceof Error && (err as { code?: unknown }).code === 'VALVE_REDIS_TIMEOUT';
    for (const req of requests) {
      const reject = req.reject!;
      req.resolve = null;
      req.reject = null;
      reject(timedOut ? this.timeoutError(req.id, true) : err);
    }
  }

  /** A call in flight timed out: requests queued at least as long as the timeout fail too, unsent. */
  private expire(): void {
    const limit = performance.now() - this.timeout;
    while (this.head !== null && this.head.at <= limit) {
      const req = this.head;
      this.head = req.next;
      if (this.head === null) this.tail = null;
      req.next = null;
      const reject = req.reject!;
      req.resolve = null;
      req.reject = null;
      reject(this.timeoutError(req.id, false));
    }
  }
}
