import { anySignal } from '../any-signal.js';
import { describe } from '../duration.js';
import { ValveError } from '../errors.js';
import type { FetchRetryEvent } from '../events.js';
import type { ValveInternals } from '../feedback-port.js';
import { reportTicket, takeTicket } from './fleet.js';
import { type FleetObservation, observe } from './observe.js';
import { feedbackState } from './state.js';
import type { FeedbackReading } from './types.js';

/** Any fetch implementation: Node's global fetch, undici's fetch, or a compatible function. */
// biome-ignore lint/suspicious/noExplicitAny: fetch implementations (global, undici) differ in their argument types
export type FetchLike = (input: any, init?: any) => Promise<any>;

export interface WrapFetchOptions<I = string | URL | Request, N = RequestInit> {
  /** Retries after a 429 (or a 503 with Retry-After), each at the request's original queue position. Default 3. */
  retries?: number;
  /** Cost of each attempt in units: a positive integer, or a function of the request returning one (called once per call). Default 1. */
  cost?: number | ((input: I, init: N | undefined) => number);
  /** Queue priority of every attempt (higher starts first). Default 0. */
  priority?: number;
}

interface BodyPlan {
  /** Whether a retry can send the same body again. */
  readonly replayable: boolean;
  /** The arguments of one attempt. */
  args(): [unknown, Record<string, unknown> | undefined];
}

function checkOptions(options: WrapFetchOptions<unknown, unknown> | undefined): void {
  if (options === undefined) return;
  if (options === null || typeof options !== 'object') {
    throw new TypeError(
      `Expected wrapFetch() \`options\` to be an object like { retries: 3, cost: 1, priority: 0 }, got ${describe(options)}`,
    );
  }
  for (const key of Object.keys(options)) {
    if (key !== 'retries' && key !== 'cost' && key !== 'priority') {
      throw new TypeError(
        `Unknown option \`${key}\`; wrapFetch() takes \`retries\`, \`cost\` and \`priority\``,
      );
    }
  }
  const { retries, cost, priority } = options;
  if (retries !== undefined) {
    const expected = 'Expected `retries` to be a non-negative integer, got';
    if (typeof retries !== 'number') throw new TypeError(`${expected} ${describe(retries)}`);
    if (!Number.isInteger(retries) || retries < 0) throw new RangeError(`${expected} ${String(retries)}`);
  }
  if (cost !== undefined && typeof cost !== 'function') {
    const expected = 'Expected `cost` to be a positive integer or a function of the request, got';
    if (typeof cost !== 'number') throw new TypeError(`${expected} ${describe(cost)}`);
    if (!isCost(cost)) throw new RangeError(`${expected} ${String(cost)}`);
  }
  if (priority !== undefined) {
    const expected = 'Expected `priority` to be a finite number, got';
    if (typeof priority !== 'number') throw new TypeError(`${expected} ${describe(priority)}`);
    if (!Number.isFinite(priority)) throw new RangeError(`${expected} ${String(priority)}`);
  }
}

/** Costs are whole units: a positive integer. */
function isCost(value: number): boolean {
  return Number.isInteger(value) && value > 0;
}

/** The cost a cost function returned, checked like the `cost` option (throws TypeError/RangeError). */
function checkedCost(value: unknown): number {
  const expected = 'Expected `cost` (returned by the cost function) to be a positive integer, got';
  if (typeof value !== 'number') throw new TypeError(`${expected} ${describe(value)}`);
  if (!isCost(value)) throw new RangeError(`${expected} ${String(value)}`);
  return value;
}

function tag(value: unknown): string {
  return Object.prototype.toString.call(value);
}

/** Bodies fetch reads without consuming them, so the same object can be sent again. */
function isReplayableBody(body: unknown): boolean {
  if (body === undefined || body === null) return true;
  if (typeof body === 'string') return true;
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return true;
  if (typeof SharedArrayBuffer !== 'undefined' && body instanceof SharedArrayBuffer) return true;
  const t = tag(body);
  return (
    t === '[object URLSearchParams]' ||
    t === '[object Blob]' ||
    t === '[object File]' ||
    t === '[object FormData]'
  );
}

interface RequestLike {
  readonly url: string;
  readonly body: unknown;
  readonly bodyUsed: boolean;
  readonly signal?: AbortSignal | null;
  clone(): RequestLike;
}

function isRequestLike(input: unknown): input is RequestLike {
  if (input === null || typeof input !== 'object') return false;
  const r = input as Partial<RequestLike>;
  return typeof r.url === 'string' && typeof r.clone === 'function' && 'bodyUsed' in r && 'method' in r;
}

function planBody(input: unknown, init: Record<string, unknown> | undefined): BodyPlan {
  const initBody = init?.body;
  if (initBody !== undefined && initBody !== null) {
    // init.body replaces a Request's own body, which stays unread.
    return { replayable: isReplayableBody(initBody), args: () => [input, init] };
  }
  if (isRequestLike(input) && input.body !== null && input.body !== undefined) {
    if (input.bodyUsed) return { replayable: false, args: () => [input, init] };
    // Keep the caller's Request unread and send a clone on every attempt.
    const template = input;
    return { replayable: true, args: () => [template.clone(), init] };
  }
  return { replayable: true, args: () => [input, init] };
}

function urlOf(input: unknown): string {
  if (typeof input === 'string') return input;
  if (isRequestLike(input)) return input.url;
  if (input !== null && typeof input === 'object' && typeof (input as URL).href === 'string') {
    return (input as URL).href;
  }
  return String(input);
}

/** The signal fetch itself would honour: init.signal when given (null means none), else the Request's. */
function callerSignal(input: unknown, init: Record<string, unknown> | undefined): AbortSignal | undefined {
  if (init && 'signal' in init && init.signal !== undefined)
    return (init.signal as AbortSignal | null) ?? undefined;
  if (isRequestLike(input)) return input.signal ?? undefined;
  return undefined;
}

/**
 * An abort for a retry waiting in the valve's queue: aborted by the valve's close() while
 * `waiting()` (the retry has not started), never after. `done()` stops listening.
 */
function closeAbort(valve: ValveInternals, waiting: () => boolean): { signal: AbortSignal; done(): void } {
  const controller = new AbortController();
  const waiters = valve.closeWaiters;
  const onClose = () => {
    if (waiting())
      controller.abort(new ValveError('CLOSED', 'The valve was closed before the retry was sent'));
  };
  waiters?.add(onClose);
  return { signal: controller.signal, done: () => waiters?.delete(onClose) };
}

/** Whether a response carries Retry-After or retry-after-ms (a 503 is retried only then). */
function hasRetryAfter(response: unknown): boolean {
  try {
    const headers = (response as { headers?: { has?: (name: string) => boolean } }).headers;
    if (typeof headers?.has !== 'function') return false;
    return headers.has('retry-after') || headers.has('retry-after-ms') || headers.has('x-ms-retry-after-ms');
  } catch {
    return false;
  }
}

/** What a retry's job returns when it sent nothing (the valve was closed before it started). */
const NOT_SENT: unique symbol = Symbol('not sent');

/** Discards a response body that will not be returned, so its connection is released. */
function discard(response: unknown): void {
  try {
    const body = (response as { body?: { cancel?: () => Promise<void>; locked?: boolean } | null }).body;
    if (body && typeof body.cancel === 'function' && body.locked !== true) {
      body.cancel().catch(() => {});
    }
  } catch {
    // A body that cannot be cancelled is left to the garbage collector.
  }
}

/**
 * Wraps a fetch so that each attempt runs as one job of the valve, its response is
 * observed (a pause is written for any usable rate-limit header), and a 429 (or a 503
 * with Retry-After) is retried up to `retries` times at the call's original queue
 * position: every attempt reuses the sequence number of the first, so a retry goes
 * ahead of requests that arrived after it. The 429 is kept, body unread, until its
 * retry is sent (its body is cancelled then). When retries run out, the body cannot be
 * sent again (a stream, a used Request), or a retry is never sent (maxWait, close(), a
 * store failure: anything but the caller's abort), the last response is returned as
 * fetch would return it: no throw. With a fleet window, an attempt granted by the valve may
 * still wait in its job for a ticket (or through a pause written after its grant); that wait
 * ends at the attempt's maxWait too (from when it was queued): the request is never sent, a
 * first attempt rejects MAX_WAIT, a retry returns the answer it had (the grant stays spent).
 *
 * The caller's signal (init.signal, else the Request's) is honoured while queued (the
 * call rejects with its reason) and while running (passed to fetch, combined with the
 * job's own signal). Emits 'retry' ({ attempt, status, waitMs, url, source }).
 */
/**
 * Checks wrapFetch()'s arguments (TypeError/RangeError naming the option) and returns the fetch
 * to wrap; a valve group checks them once this way, before any valve exists.
 */
export function checkWrapFetch<F extends FetchLike>(fetchFn: F | undefined, options: unknown): F {
  const fn = (fetchFn ?? globalThis.fetch) as F | undefined;
  if (typeof fn !== 'function') {
    throw new TypeError(`Expected \`fetch\` to be a function, got ${describe(fn)}`);
  }
  checkOptions(options as WrapFetchOptions<unknown, unknown> | undefined);
  return fn;
}

export function wrapFetch<F extends FetchLike = typeof fetch>(
  valve: ValveInternals,
  fetchFn?: F,
  options?: WrapFetchOptions<Parameters<F>[0], Parameters<F>[1]>,
  tooCostly?: (cost: number) => RangeError | undefined,
): F {
  const fn = checkWrapFetch(fetchFn, options);
  const retries = options?.retries ?? 3;
  const costOption = options?.cost ?? 1;
  // A fixed cost the valve's current rules can never admit is refused now, as valve.wrap() does
  // (each call checks again: setRules() may change them; a cost function is checked per call).
  if (typeof costOption === 'number') {
    const error = tooCostly?.(costOption);
    if (error !== undefined) throw error;
  }
  const priority = options?.priority ?? 0;
  const state = feedbackState(valve);
  const fleet = valve.window;

  const wrapped = async (input: Parameters<F>[0], init?: Parameters<F>[1]): Promise<unknown> => {
    const initRecord =
      init === null || typeof init !== 'object' ? undefined : (init as Record<string, unknown>);
    const signal = callerSignal(input, initRecord);
    if (signal?.aborted) throw signal.reason;
    const cost = typeof costOption === 'function' ? checkedCost(costOption(input, init)) : costOption;
    const plan: BodyPlan =
      retries === 0 ? { replayable: false, args: () => [input, initRecord] } : planBody(input, initRecord);

    let sequence: number | undefined;
    // The last retryable answer while its retry waits: kept whole (body unread) until the retry
    // is sent, and returned as the call's answer if the retry never is (close(), maxWait, …).
    let last: unknown;
    for (let attempt = 0; ; attempt++) {
      // The pause the fleet's record wrote for this attempt's answer (fleet window only).
      let fleetWait: number | undefined;
      let result: { response: unknown; reading: FeedbackReading | undefined } | typeof NOT_SENT;
      // A retry still waiting when close() is called (draining or not) ends then, not when its
      // turn would have come: it is never sent, and the call returns the answer it has.
      let started = false;
      const closing = last === undefined ? undefined : closeAbort(valve, () => !started);
      // When this attempt was queued: one that waited long was held back by the fleet's limits.
      // Its wait for a ticket ends where the queue's wait would have: at its maxWait (MAX_WAIT).
      const queuedAt = fleet === undefined ? 0 : valve.clock.now();
      const deadline = queuedAt + valve.maxWait;
      try {
        result = await valve.runAt(
          async ({ signal: jobSignal }) => {
            started = true;
            // After close() (draining or not) no retry is sent: the answer we have is returned.
            if (last !== undefined && valve.isClosed()) return NOT_SENT;
            const attemptSignal = anySignal(jobSignal, signal);
            // With a fleet window (a store that keeps one), a ticket first (feedback/fleet.ts).
            const ticket =
              fleet === undefined
                ? undefined
                : await takeTicket(valve, fleet, attemptSignal, queuedAt, deadline);
            const seen: FleetObservation | undefined =
              ticket === undefined ? undefined : { window: undefined };
            try {
              if (last !== undefined) {
                // The ticket is reported unanswered (finally below).
                if (valve.isClosed()) return NOT_SENT;
                // The retry is sent now: the answer it replaces is freed.
                discard(last);
                last = undefined;
              }
              const [attemptInput, attemptInit] = plan.args();
              const n = state.begin();
              try {
                const sentAt = ticket === undefined ? 0 : valve.clock.now();
                const response = await fn(attemptInput, { ...attemptInit, signal: attemptSignal });
                // How long the provider takes to answer decides how long a probe holds the
                // others (feedback/fleet.ts, probeTtl); its 429s and 503s come back fast.
                const status = (response as { status?: unknown } | null)?.status;
                if (ticket !== undefined && status !== 429 && status !== 503) {
                  state.noteAnswer(valve.clock.now() - sentAt);
                }
                const reading =
                  response !== null && typeof response === 'object'
                    ? observe(valve, response, n, seen)
                    : undefined;
                return { response, reading };
              } finally {
                state.end(n);
              }
            } finally {
              if (ticket !== undefined) fleetWait = await reportTicket(valve, fleet!, ticket, seen);
            }
          },
          { cost, priority, signal: closing === undefined ? signal : anySignal(closing.signal, signal) },
          sequence,
          (used) => {
            sequence ??= used;
          },
        );
      } catch (err) {
        if (last === undefined) throw err;
        // The retry was never sent. Unless the caller aborted, the call's answer is the one it
        // has (a CLOSED or MAX_WAIT is for a request that never started, and this one did).
        if (signal?.aborted) {
          discard(last);
          throw err;
        }
        return last;
      } finally {
        closing?.done();
      }
      if (result === NOT_SENT) return last;
      const { response, reading } = result;
      const status = (response as { status?: unknown } | null)?.status;
      const retryable =
        status === 429 || (status === 503 && reading !== undefined && hasRetryAfter(response));
      // After close() (draining or not) no new attempt starts: the answer goes to the caller
      // as fetch would return it, never a CLOSED for a request that was sent.
      if (!retryable || attempt >= retries || !plan.replayable || valve.isClosed()) return response;
      last = response;
      const event: FetchRetryEvent = {
        attempt: attempt + 1,
        status,
        waitMs: fleetWait ?? reading?.waitMs ?? 0,
        url: urlOf(input),
        source: reading?.source,
      };
      valve.emit('retry', event);
    }
  };
  return wrapped as unknown as F;
}
