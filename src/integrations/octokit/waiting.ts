import { onAbort } from '../../any-signal.js';
import { ValveError } from '../../errors.js';
import type { ValveInternals } from '../../feedback-port.js';
import type { Valve } from '../../types.js';
import { internalsOf } from '../../valve.js';

/*
 * The waiting primitives of the plugin: a request's places in the valves it passes (Places), the
 * turns at the lanes' local locks (Turns, TurnLocks), the AbortSignal of a job's grants (Watch),
 * the end of close() without drain (Cut), what the jobs end with (PAUSED, YIELD, AGAIN), and the
 * errors the waits end with (MAX_WAIT, CLOSED). The request flow that uses them is throttle.ts,
 * the waits for pauses are pauses.ts.
 */

/** The valve's scheduler hooks (this package's own valves always have them). */
export function internals(valve: Valve): ValveInternals {
  const found = internalsOf(valve);
  if (found === undefined) throw new TypeError('valve/octokit: a valve of another copy of valve');
  return found;
}

/** Where one request stands in each valve it passes: the valve and its queue position there. */
export class Places {
  private readonly valves: (ValveInternals | undefined)[] = [];
  private readonly sequences: (number | undefined)[] = [];

  /**
   * Runs `job` in `valve` at the request's place there (its first attempt's, for a retry), with
   * the time left until `deadline` (valve clock) as its maxWait: MAX_WAIT at once when none is left.
   */
  run<T>(
    index: number,
    inner: ValveInternals,
    job: (ctx: { signal: AbortSignal }) => T | Promise<T>,
    cost: number,
    signal: AbortSignal | undefined,
    deadline: number,
  ): Promise<T> {
    if (this.valves[index] !== inner) {
      // A valve dropped while idle and made again has its own positions.
      this.valves[index] = inner;
      this.sequences[index] = undefined;
    }
    let maxWait: number | undefined;
    if (deadline !== Number.POSITIVE_INFINITY) {
      maxWait = deadline - inner.clock.now();
      if (!(maxWait > 0)) return Promise.reject(maxWaitError());
    }
    return inner.runAt(
      job,
      maxWait === undefined ? { cost, signal } : { cost, signal, maxWait },
      this.sequences[index],
      (used) => {
        this.sequences[index] ??= used;
      },
    );
  }
}

export function maxWaitError(): ValveError {
  return new ValveError('MAX_WAIT', 'The request did not start within its maxWait');
}

/** close() (without drain, or before the call) ended a request that was not sent. */
export function closedError(): ValveError {
  return new ValveError('CLOSED', 'octokit.throttle.close() was called before the request was sent');
}

/** close() without drain aborted a request in flight (its fetch's signal). */
export function abortedInFlightError(): ValveError {
  return new ValveError(
    'CLOSED',
    'octokit.throttle.close() aborted the request in flight (close({ drain: true }) lets requests in flight end)',
  );
}

/** The reason a grant's wait is aborted with when a lane of its request is paused meanwhile. */
export const PAUSED: unique symbol = Symbol('valve/octokit: paused');

/** What the job in `all` ends with when it gives its turn at its first lane up to a request called before it. */
export const YIELD: unique symbol = Symbol('valve/octokit: a request called earlier waits for this turn');

/** What the job in `all` ends with when a pause came before the request could be sent. */
export const AGAIN: unique symbol = Symbol('valve/octokit: wait for the pause');

/** The latest known pause end (valve clock) among `valves` (from index `from` on). */
export function pauseEnd(valves: readonly ValveInternals[], from = 0): number {
  let end = 0;
  for (let i = from; i < valves.length; i++) {
    const e = valves[i]!.knownPauseEnd();
    if (e > end) end = e;
  }
  return end;
}

/** close() without drain, as the waits outside the valves meet it. */
export class Cut {
  /** Set (CLOSED) by close() without drain: the waits outside the valves end with it. */
  error: ValveError | undefined;
  /** Waits that end when close() without drain is called (one listener each, not one per AbortSignal). */
  readonly cutters = new Set<(reason: unknown) => void>();

  /** close() without drain: sets `error` (once) and ends every wait with it. */
  close(): void {
    if (this.error === undefined) {
      this.error = closedError();
      for (const cutter of [...this.cutters]) cutter(this.error);
    }
  }
}

/**
 * The waits listening to each caller's signal: one 'abort' listener per signal, however many
 * requests share it (a shutdown signal given to every request), shared with the signals of the
 * requests sent (src/any-signal.ts).
 */
export { onAbort };

/**
 * An AbortSignal that aborts when the job's signal does (with its reason) or on abort();
 * dispose() stops listening. The job's signal is its own (one listener, added directly).
 */
export class Watch {
  private readonly controller = new AbortController();
  /** abort(), bound: also what close() without drain calls (Cut.cutters). */
  readonly abort = (reason: unknown): void => {
    if (!this.controller.signal.aborted) this.controller.abort(reason);
  };
  private readonly onAbort = (): void => this.abort(this.source.reason);

  constructor(private readonly source: AbortSignal) {
    if (source.aborted) this.abort(source.reason);
    else source.addEventListener('abort', this.onAbort);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  dispose(): void {
    this.source.removeEventListener('abort', this.onAbort);
  }
}

/** One request waiting for its turn at a Turns lock. */
interface TurnWaiter {
  readonly ticket: number;
  grant(): void;
}

/**
 * A local lock held by one request at a time, handed to the waiting request with the lowest
 * ticket (the order requests were called in: a request that comes back after a pause goes ahead
 * of later ones). Kept by its budget (lanes.ts) while the budget is in use.
 */
export class Turns {
  private held = false;
  private readonly waiters: TurnWaiter[] = [];
  /** The holder's ticket. */
  private holder = 0;
  /** A request with a lower ticket than the holder's waits (a holder that can still give its turn up does). */
  wanted = false;

  /** Held, or waited for. */
  get busy(): boolean {
    return this.held;
  }

  /** Takes the lock if nobody holds it (nobody then waits for it either). */
  tryTake(ticket: number): boolean {
    if (this.held) return false;
    this.held = true;
    this.holder = ticket;
    return true;
  }

  enqueue(waiter: TurnWaiter): void {
    let i = this.waiters.length;
    while (i > 0 && this.waiters[i - 1]!.ticket > waiter.ticket) i--;
    this.waiters.splice(i, 0, waiter);
    if (waiter.ticket < this.holder) this.wanted = true;
  }

  remove(waiter: TurnWaiter): void {
    const i = this.waiters.indexOf(waiter);
    if (i >= 0) this.waiters.splice(i, 1);
  }

  release(): void {
    this.wanted = false;
    const next = this.waiters.shift();
    if (next !== undefined) {
      this.holder = next.ticket;
      next.grant();
      return;
    }
    this.held = false;
  }
}

/** Takes the turns at the lanes' locks (see Throttle.attempt(); the locks are the budgets', lanes.ts). */
export class TurnLocks {
  constructor(private readonly cut: Cut) {}

  /**
   * Takes `lock`: at once (undefined) when free, else a promise that resolves when the request's
   * turn comes, or rejects with the signal's reason, MAX_WAIT at the deadline, or CLOSED on
   * close() without drain (the request then leaves the line).
   */
  turn(
    lock: Turns,
    ticket: number,
    signal: AbortSignal | undefined,
    deadline: number,
    clock: ValveInternals['clock'],
  ): Promise<void> | undefined {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.cut.error !== undefined) return Promise.reject(this.cut.error);
    if (lock.tryTake(ticket)) return undefined;
    const now = clock.now();
    if (deadline <= now) return Promise.reject(maxWaitError());
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const waiter: TurnWaiter = {
        ticket,
        grant: () => {
          if (settled) return;
          settled = true;
          done();
          resolve();
        },
      };
      const fail = (reason: unknown) => {
        if (settled) return;
        settled = true;
        lock.remove(waiter);
        done();
        reject(reason);
      };
      let off: (() => void) | undefined;
      const timer =
        deadline === Number.POSITIVE_INFINITY
          ? undefined
          : clock.setTimeout(() => fail(maxWaitError()), Math.max(0, deadline - now));
      const done = () => {
        if (timer !== undefined) clock.clearTimeout(timer);
        off?.();
        this.cut.cutters.delete(fail);
      };
      lock.enqueue(waiter);
      if (signal !== undefined) off = onAbort(signal, fail);
      this.cut.cutters.add(fail);
    });
  }
}
