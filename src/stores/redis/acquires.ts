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
 *   fall further behind. When a call in flight times out and the server has answered nothing
 *   for as long as the timeout, the requests that waited here that long are rejected with the
 *   same error, unsent.
 */
import type { AcquireResult } from '../store.js';
import { small } from './acquire-call.js';
import type { Deadlines, Pending } from './deadlines.js';
import { ACQUIRE, ACQUIRE_MANY } from './scripts.generated.js';

/** Requests in flight at most, per store. */
export const MAX_IN_FLIGHT = 1024;
/** Requests per acquire-many.lua call at most. */
export const MAX_PER_CALL = 64;

/**
 * "-1:" to "-64:" (no ticket) and "+1:" to "+64:" (ticket 0): the start of a short-form run's
 * string, by its shape's index (several shapes per call are rare).
 */
const NEGATED: readonly string[] = Array.from({ length: MAX_PER_CALL + 1 }, (_, i) => `-${i}:`);
const PLUSSED: readonly string[] = Array.from({ length: MAX_PER_CALL + 1 }, (_, i) => `+${i}:`);

/**
 * Whether request `r` is sent in acquire-many.lua's short form: no ticket, or ticket 0 (taking
 * part in the line without holding a ticket: every call of a valve under rules that absorb a
 * late start, until one is refused).
 */
const isShort = (r: Request): boolean => (r.ticket === '' || r.ticket === '0') && r.shape!.shortKeys !== null;

/** A short-form request's keys. */
const shortKeysOf = (r: Request): readonly string[] =>
  r.ticket === '' ? r.shape!.shortKeys! : r.shape!.shortLinedKeys!;

/** Whether short-form request `r` goes in the same run as `prev` (null: none before). */
const sameRun = (prev: Request | null, r: Request): boolean =>
  prev !== null &&
  prev.shape!.specKey === r.shape!.specKey &&
  prev.count === r.count &&
  prev.cost === r.cost &&
  prev.ticket === r.ticket;

/** What stays the same across a valve's acquire calls (store.ts builds it once per valve). */
export interface CallShape {
  /** acquire.lua's KEYS. */
  readonly keys: readonly string[];
  /** ARGV[3..5]: the number of rules, the lease limit and the lease TTL. */
  readonly head: readonly string[];
  /** Three arguments per rule. */
  readonly ruleArgs: readonly string[];
  /** The record argument and its TTL. */
  readonly tail: readonly string[];
  /** head, ruleArgs and tail: what acquire-many.lua receives once per call as a shape. */
  readonly spec: readonly string[];
  /** spec joined: the same for every valve with the same rules, lease and record. */
  readonly specKey: string;
  /**
   * The keys of acquire-many.lua's short form (the pause, one per rule, the record), for a
   * shape without leases whose rules are GCRA and fixed windows only; null otherwise.
   */
  readonly shortKeys: readonly string[] | null;
  /** shortKeys and the line's key: the short form's keys with ticket 0. */
  readonly shortLinedKeys: readonly string[] | null;
}

/** Reads one acquire.lua reply (store.ts). */
export type ReadAcquire = (
  reply: unknown,
  flags: { readonly leased: boolean; readonly recorded: boolean; readonly turned: boolean },
) => AcquireResult;

/**
 * One acquire call not answered yet: its whole keys and arguments (`all`), or (a request that
 * may go with others) its shape and the four strings of its own.
 */
class Request {
  next: Request | null = null;
  resolve: ((value: AcquireResult) => void) | null = null;
  reject: ((err: unknown) => void) | null = null;
  constructor(
    readonly id: string,
    readonly all: readonly string[] | null,
    readonly numKeys: number,
    readonly shape: CallShape | null,
    /** ARGV[2], ARGV[6], ARGV[7+3m] and ARGV[t+2] of acquire.lua (with a shape). */
    readonly count: string,
    readonly nonce: string,
    readonly cost: string,
    readonly ticket: string,
    readonly leased: boolean,
    readonly recorded: boolean,
    readonly turned: boolean,
    /** When it was queued (performance.now()). */
    readonly at: number,
  ) {}
}

/**
 * Hands one request its answer or error. The callbacks run the caller's code (a valve starts its
 * jobs in them): one that throws must not keep the requests after it unanswered, so the error is
 * thrown again on its own, as a promise's reaction would have left it unhandled.
 */
function deliver<T>(settle: (value: T) => void, value: T): void {
  try {
    settle(value);
  } catch (err) {
    queueMicrotask(() => {
      throw err;
    });
  }
}

export class Acquires {
  /** Requests not sent yet, oldest first. */
  private head: Request | null = null;
  private tail: Request | null = null;
  /** A flush is scheduled (process.nextTick). */
  private scheduled = false;
  /** Scratch for sendMany(): the shapes of the call being built, by specKey (1-based), in order. */
  private readonly specs = new Map<string, number>();
  private readonly specList: (readonly string[])[] = [];

  constructor(
    private readonly deadlines: Deadlines,
    /** Several ids per script call (a standalone server). */
    readonly many: boolean,
    private readonly timeout: number,
    /** acquire.lua's ARGV[1] (the store's test clock, or ''), read when a call is sent. */
    private readonly clockArg: () => string,
    private readonly read: ReadAcquire,
    /** The error of a request past its deadline: sent and unanswered, or never sent. */
    private readonly timeoutError: (id: string, sent: boolean) => Error,
  ) {
    deadlines.settled = () => {
      if (this.head !== null && !this.scheduled) this.schedule();
    };
    deadlines.timedOut = () => this.expire();
  }

  /**
   * Queues one acquire.lua call (its keys are the first `numKeys` of `all`); its answer or error
   * goes to `onAnswer` or `onFail`, never synchronously.
   */
  send(
    id: string,
    numKeys: number,
    all: readonly string[],
    leased: boolean,
    recorded: boolean,
    turned: boolean,
    onAnswer: (value: AcquireResult) => void,
    onFail: (err: unknown) => void,
  ): void {
    this.queue(
      new Request(id, all, numKeys, null, '', '', '', '', leased, recorded, turned, performance.now()),
      onAnswer,
      onFail,
    );
  }

  /**
   * Queues one acquire.lua call of jobs that all cost `cost`, converting nothing: its keys and
   * arguments are `shape`'s and these strings, and it may go with others (`many`).
   */
  sendShaped(
    id: string,
    shape: CallShape,
    count: string,
    nonce: string,
    cost: string,
    ticket: string,
    leased: boolean,
    recorded: boolean,
    turned: boolean,
    onAnswer: (value: AcquireResult) => void,
    onFail: (err: unknown) => void,
  ): void {
    this.queue(
      new Request(
        id,
        null,
        shape.keys.length,
        shape,
        count,
        nonce,
        cost,
        ticket,
        leased,
        recorded,
        turned,
        performance.now(),
      ),
      onAnswer,
      onFail,
    );
  }

  private queue(
    request: Request,
    onAnswer: (value: AcquireResult) => void,
    onFail: (err: unknown) => void,
  ): void {
    request.resolve = onAnswer;
    request.reject = onFail;
    if (this.tail === null) this.head = request;
    else this.tail.next = request;
    this.tail = request;
    if (!this.scheduled) this.schedule();
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
      if (this.many && first.shape !== null) {
        const most = Math.min(MAX_PER_CALL, MAX_IN_FLIGHT - deadlines.load);
        for (let r = first.next; r !== null && count < most && r.shape !== null; r = r.next) count++;
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
          first.all ?? this.allOf(first),
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

  /** A shaped request's acquire.lua keys and arguments, whole. */
  private allOf(r: Request): string[] {
    const { keys, head, ruleArgs, tail } = r.shape!;
    const all = new Array<string>(keys.length + 11 + ruleArgs.length);
    let k = 0;
    for (let i = 0; i < keys.length; i++) all[k++] = keys[i]!;
    all[k++] = this.clockArg();
    all[k++] = r.count;
    all[k++] = head[0]!;
    all[k++] = head[1]!;
    all[k++] = head[2]!;
    all[k++] = r.nonce;
    for (let i = 0; i < ruleArgs.length; i++) all[k++] = ruleArgs[i]!;
    all[k++] = r.cost;
    all[k++] = tail[0]!;
    all[k++] = tail[1]!;
    all[k++] = r.ticket;
    all[k++] = '';
    return all;
  }

  /** Sends the first `count` queued requests (all shaped) as one acquire-many.lua call. */
  private sendMany(count: number): void {
    const requests = new Array<Request>(count);
    const specs = this.specs;
    let keys = 0;
    let args = 0;
    let specArgs = 0;
    let r = this.head!;
    let prev: Request | null = null;
    for (let i = 0; i < count; i++) {
      requests[i] = r;
      const shape = r.shape!;
      if (isShort(r)) {
        keys += shortKeysOf(r).length;
        // One string per run of short-form requests alike (shape, n and cost).
        if (!sameRun(prev, r)) args += 1;
        prev = r;
      } else {
        keys += shape.keys.length;
        args += 5;
        prev = null;
      }
      if (!specs.has(shape.specKey)) {
        specs.set(shape.specKey, specs.size + 1);
        this.specList.push(shape.spec);
        specArgs += 1 + shape.spec.length;
      }
      const next = r.next;
      r.next = null;
      if (i === count - 1) {
        this.head = next;
        if (next === null) this.tail = null;
      } else r = next!;
    }
    const all = new Array<string>(keys + 3 + specArgs + args);
    let k = 0;
    for (let i = 0; i < count; i++) {
      const req = requests[i]!;
      const shape = req.shape!;
      const shapeKeys = isShort(req) ? shortKeysOf(req) : shape.keys;
      for (let j = 0; j < shapeKeys.length; j++) all[k++] = shapeKeys[j]!;
    }
    all[k++] = this.clockArg();
    all[k++] = String(count);
    all[k++] = String(specs.size);
    for (const spec of this.specList) {
      all[k++] = String(spec.length);
      for (let j = 0; j < spec.length; j++) all[k++] = spec[j]!;
    }
    for (let i = 0; i < count; ) {
      const req = requests[i]!;
      const index = specs.get(req.shape!.specKey)!;
      if (isShort(req)) {
        // The short form: a run of requests alike, "-<shape index>:<n>:<cost>:<requests>" ('+'
        // with ticket 0).
        let end = i + 1;
        while (end < count && isShort(requests[end]!) && sameRun(requests[end - 1]!, requests[end]!)) end++;
        const start = req.ticket === '' ? (NEGATED[index] ?? `-${index}:`) : (PLUSSED[index] ?? `+${index}:`);
        all[k++] = `${start}${req.count}:${req.cost}:${end - i}`;
        i = end;
      } else {
        all[k++] = small(index);
        all[k++] = req.count;
        all[k++] = req.nonce;
        all[k++] = req.cost;
        all[k++] = req.ticket;
        i++;
      }
    }
    specs.clear();
    this.specList.length = 0;
    // A late answer gives back the leases of the requests that asked for some (Deadlines.lateAnswer).
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
    ).late = requests;
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
        deliver(reject, new TypeError(`valve: unexpected Redis reply for acquire-many: ${String(value)}`));
        continue;
      }
      const reply = replies[i];
      if (reply instanceof Error) {
        deliver(reject, reply);
        continue;
      }
      if (typeof reply === 'number' && !req.leased) {
        // The short reply (acquire-many.lua): every job granted at `reply` µs (and with ticket
        // 0, no ticket held).
        const granted = Number(req.count);
        const now = reply / 1000;
        deliver(
          resolve,
          req.turned
            ? { granted, retryAfter: 0, blocked: null, pausedUntil: null, now, turn: 0 }
            : { granted, retryAfter: 0, blocked: null, pausedUntil: null, now },
        );
        continue;
      }
      let result: AcquireResult;
      try {
        result = this.read(reply, req);
      } catch (err) {
        deliver(reject, err);
        continue;
      }
      deliver(resolve, result);
    }
  }

  /** An acquire-many.lua call failed or timed out: so did each of its requests. */
  private failed(requests: readonly Request[], err: unknown): void {
    const timedOut = err instanceof Error && (err as { code?: unknown }).code === 'VALVE_REDIS_TIMEOUT';
    for (const req of requests) {
      const reject = req.reject!;
      req.resolve = null;
      req.reject = null;
      deliver(reject, timedOut ? this.timeoutError(req.id, true) : err);
    }
  }

  /**
   * A call in flight timed out. When the server has not answered any call for as long as the
   * timeout, the requests queued at least that long fail too, unsent. A server that answers,
   * however slowly, is not failing: its queue waits its turn (failing it would have every valve
   * retry, and the retries would fill the queue again).
   */
  private expire(): void {
    const now = performance.now();
    const limit = now - this.timeout;
    if (this.deadlines.answeredAt > limit) return;
    while (this.head !== null && this.head.at <= limit) {
      const req = this.head;
      this.head = req.next;
      if (this.head === null) this.tail = null;
      req.next = null;
      const reject = req.reject!;
      req.resolve = null;
      req.reject = null;
      deliver(reject, this.timeoutError(req.id, false));
    }
  }
}
