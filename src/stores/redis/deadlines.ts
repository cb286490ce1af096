/**
 * The Redis calls of one store in flight: valve's own deadline on each, with one timer per store
 * however many calls are in flight, the script cache's recovery (NOSCRIPT) and the reading of
 * the reply, all on one object per call.
 *
 * Every call of a store has the same timeout, so deadlines come in the order the calls were
 * sent: the calls in flight are a list in that order (a call leaves it when it settles) and the
 * one timer is set for the oldest. A call whose deadline passed is rejected only after the event
 * loop has read what the sockets hold (the verdict waits for a setImmediate, which runs after the
 * poll phase): a process too busy to read its replies for a while (thousands of valves answered
 * at once) must not declare timed out the answers already waiting in its socket buffer, retry
 * them, and fall further behind.
 */
import { type CommandAdapter, isNoScript, replyNumber, replyString } from './adapter.js';
import type { LuaScript } from './scripts.generated.js';

/** Reads a script's reply into what the store method returns (throws on an unexpected reply). */
export type ReadReply = (reply: unknown, call: Pending) => unknown;

/** How a caller of dispatch() hears the outcome. */
export type Settle = (value: unknown) => void;

const NO_KEYS: readonly string[] = [];

/**
 * Errors meaning the server did not run the command (a cluster slot being migrated, a slot
 * moved, the cluster down): the client may send it again, which the call does after
 * RETRY_DELAY while its deadline allows.
 */
const NOT_RUN = /^(?:TRYAGAIN|CLUSTERDOWN|MOVED|ASK)\b/;
/** The wait before a call refused with one of NOT_RUN's errors is sent again (ms). */
export const RETRY_DELAY = 50;
/**
 * The scripts sent again after a NOT_RUN error: those whose order with the id's later calls
 * does not matter. A pause or resume sent again could land after a later resume or pause of the
 * id (the id paused after resume() resolved), and a fleet window's ticket or report after later
 * ones: those fail as any store error does.
 */
const RESENT = new Set(['acquire', 'acquire-many', 'renew', 'release', 'probe', 'status']);

/** True for an error meaning the command did not run (see NOT_RUN). */
export function notRun(err: unknown): boolean {
  return err instanceof Error && NOT_RUN.test(err.message);
}

/** What a late acquire-many answer needs of each request it carried. */
export interface LateRequest {
  readonly id: string;
  readonly leased: boolean;
}

/** The lease tokens of an acquire.lua reply (none for anything else). */
export function leaseTokens(reply: unknown): string[] {
  if (!Array.isArray(reply) || reply.length < 6) return [];
  const granted = replyNumber(reply[0], 'acquire');
  const tokens: string[] = [];
  for (let i = 0; i < granted && 6 + 2 * i < reply.length; i++) {
    tokens.push(replyString(reply[6 + 2 * i], 'acquire'));
  }
  return tokens;
}

function resend(call: Pending): void {
  call.resend();
}

/** One call in flight. */
export class Pending {
  /** Set once the call settled or timed out; a later outcome is ignored. */
  done = false;
  /** A NOSCRIPT was answered and the script is being loaded (once per call). */
  private recovering = false;
  /** Neighbours in the list of calls in flight (by deadline). */
  prev: Pending | null = null;
  next: Pending | null = null;
  resolve: ((value: unknown) => void) | null = null;
  reject: ((err: unknown) => void) | null = null;
  /** The call's keys (the first numKeys) and arguments, kept for a retry until the command is answered. */
  all: readonly string[];
  /** An acquire-many call: its requests, whose leases a late answer gives back (see Deadlines.late). */
  late: readonly LateRequest[] | null = null;

  constructor(
    private readonly list: Deadlines,
    /** When the call times out (ms, performance.now()). */
    readonly deadline: number,
    readonly script: LuaScript,
    readonly id: string,
    private readonly numKeys: number,
    all: readonly string[],
    private readonly read: ReadReply | null,
    /** For `read`: acquire asked for leases, sent a rule-set record, and sent a turn (its reply ends with the ticket). */
    readonly leased: boolean,
    readonly recorded: boolean,
    readonly turned: boolean,
    /** Requests the call carries (acquire-many.lua carries several), counted in Deadlines.load. */
    readonly weight: number,
  ) {
    this.all = all;
  }

  /** Settles with the command's answer (read by `read`), unless it timed out first. */
  readonly ok = (value: unknown): void => {
    this.all = NO_KEYS;
    this.list.answeredAt = performance.now();
    if (this.done) {
      // Too late: the caller was told it failed. The leases it created would hold their slots
      // until their TTL, so they are given back.
      if (this.leased || this.late !== null) this.list.lateAnswer(this, value);
      return;
    }
    const resolve = this.resolve!;
    const reject = this.reject!;
    this.settle();
    if (this.read === null) {
      resolve(value);
      return;
    }
    let out: unknown;
    try {
      out = this.read(value, this);
    } catch (err) {
      reject(err);
      return;
    }
    resolve(out);
  };

  /**
   * Settles with the command's failure, unless it timed out first. A NOSCRIPT loads the script
   * and runs the call (once), an error meaning the command did not run (TRYAGAIN during a slot
   * migration...) sends it again after RETRY_DELAY, both only while the call is not done: once
   * valve gave up on a call, it never sends it again.
   */
  readonly fail = (err: unknown): void => {
    if (!this.done) {
      if (!this.recovering && isNoScript(err)) {
        this.recovering = true;
        this.list.cmd.recover(this.script, this.numKeys, this.all, this).then(this.ok, this.fail);
        return;
      }
      // Only a cluster client's: a standalone client pointed at one node of a cluster can never
      // follow a MOVED, so its answer is final.
      if (
        this.list.cmd.cluster &&
        notRun(err) &&
        RESENT.has(this.script.name) &&
        performance.now() + RETRY_DELAY < this.deadline
      ) {
        setTimeout(resend, RETRY_DELAY, this).unref?.();
        return;
      }
    }
    this.all = NO_KEYS;
    if (this.done) return;
    const reject = this.reject!;
    this.settle();
    reject(err);
  };

  /** Sends the call again (see fail()), unless it is done meanwhile. */
  resend(): void {
    if (this.done) {
      this.all = NO_KEYS;
      return;
    }
    let command: Promise<unknown>;
    try {
      command = this.list.cmd.call(this.script, this.numKeys, this.all, this);
    } catch (err) {
      this.fail(err);
      return;
    }
    command.then(this.ok, this.fail);
  }

  /** Done (answered or timed out): leaves the list and lets go of the caller's promise. */
  settle(): void {
    this.done = true;
    this.list.unlink(this);
    this.resolve = null;
    this.reject = null;
    this.list.load -= this.weight;
    this.list.settled?.();
  }
}

export class Deadlines {
  /** Calls in flight, oldest first. */
  private head: Pending | null = null;
  private tail: Pending | null = null;
  /** The one timer, set for a deadline no later than the head's; null when none is set. */
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** A verdict is queued (setImmediate) for the calls whose deadline passed. */
  private verdictQueued = false;
  /** Requests in flight (a call's weight: acquire-many.lua carries several). */
  load = 0;
  /** When the server last answered a call (performance.now()), even one past its deadline. */
  answeredAt = Number.NEGATIVE_INFINITY;
  /** Told after any call settled (answered, failed or timed out). */
  settled: (() => void) | null = null;
  /** Told after calls were rejected for their deadline. */
  timedOut: (() => void) | null = null;
  /** Gives back (releases) the leases of an acquire answered after its deadline: id, tokens. */
  releaseLate: ((id: string, tokens: string[]) => void) | null = null;

  constructor(
    /** The command connection. */
    readonly cmd: CommandAdapter,
    /** Every call's timeout, ms. */
    private readonly timeout: number,
    /** The rejection of a call past its deadline. */
    private readonly timeoutError: (script: string, id: string) => Error,
  ) {}

  /**
   * Sends `script` (its keys are the first `numKeys` of `all`) for `id` under the deadline;
   * `read` turns the reply into the result (null: the reply as it is).
   */
  send(
    script: LuaScript,
    id: string,
    numKeys: number,
    all: readonly string[],
    read: ReadReply | null = null,
  ): Promise<unknown> {
    return new Promise<unknown>((resolve, reject) => {
      this.dispatch(script, id, numKeys, all, read, false, false, false, 1, resolve, reject);
    });
  }

  /**
   * send(), settling through `resolve` and `reject` instead of a promise of its own; `leased`,
   * `recorded` and `turned` are for `read` (see Pending), `weight` the requests it carries.
   * Returns the call.
   */
  dispatch(
    script: LuaScript,
    id: string,
    numKeys: number,
    all: readonly string[],
    read: ReadReply | null,
    leased: boolean,
    recorded: boolean,
    turned: boolean,
    weight: number,
    resolve: Settle,
    reject: Settle,
  ): Pending {
    const call = new Pending(
      this,
      performance.now() + this.timeout,
      script,
      id,
      numKeys,
      all,
      read,
      leased,
      recorded,
      turned,
      weight,
    );
    call.resolve = resolve;
    call.reject = reject;
    this.load += weight;
    if (this.tail === null) this.head = call;
    else {
      this.tail.next = call;
      call.prev = this.tail;
    }
    this.tail = call;
    if (this.timer === null && !this.verdictQueued) this.arm();
    let command: Promise<unknown>;
    try {
      command = this.cmd.call(script, numKeys, all, call);
    } catch (err) {
      call.fail(err);
      return call;
    }
    command.then(call.ok, call.fail);
    return call;
  }

  /**
   * An acquire's answer came after its deadline: the leases it granted are released in the
   * background (errors ignored: unreleased, they expire after their TTL as before).
   */
  lateAnswer(call: Pending, value: unknown): void {
    const release = this.releaseLate;
    if (release === null) return;
    try {
      if (call.late === null) {
        const tokens = leaseTokens(value);
        if (tokens.length > 0) release(call.id, tokens);
        return;
      }
      if (!Array.isArray(value)) return;
      for (let i = 0; i < call.late.length && i < value.length; i++) {
        const request = call.late[i]!;
        const tokens = request.leased ? leaseTokens(value[i]) : [];
        if (tokens.length > 0) release(request.id, tokens);
      }
    } catch {
      // An unexpected reply: its leases expire after their TTL.
    }
  }

  /** Removes a settled call from the list. */
  unlink(call: Pending): void {
    const { prev, next } = call;
    if (prev === null) {
      if (this.head === call) this.head = next;
    } else prev.next = next;
    if (next === null) {
      if (this.tail === call) this.tail = prev;
    } else next.prev = prev;
    call.prev = null;
    call.next = null;
  }

  /** Sets the timer for the oldest call in flight, if any. */
  private arm(): void {
    const head = this.head;
    if (head === null) return;
    this.timer = setTimeout(this.fired, Math.max(1, head.deadline - performance.now()));
    this.timer.unref?.();
  }

  private readonly fired = (): void => {
    this.timer = null;
    this.verdictQueued = true;
    setImmediate(this.verdict);
  };

  /** Rejects the calls past their deadline that are still unanswered once the sockets were read. */
  private readonly verdict = (): void => {
    this.verdictQueued = false;
    const now = performance.now();
    let head = this.head;
    let rejected = false;
    while (head !== null && head.deadline <= now) {
      const reject = head.reject!;
      head.settle(); // leaves the list: the head moves on
      reject(this.timeoutError(head.script.name, head.id));
      rejected = true;
      head = this.head;
    }
    this.arm();
    if (rejected) this.timedOut?.();
  };
}
