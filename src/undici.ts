/**
 * `valve/undici`: an undici interceptor. Every request through a dispatcher composed with it
 * goes through a valve (or a group's valve chosen per request): each attempt is a job, every
 * answer is observed (a rate-limit header pauses the id in every process), and a 429 (or a 503
 * with Retry-After) is retried at the request's original queue position, exactly as
 * `valve.wrapFetch()` does. Node's global `fetch` goes through it after `setGlobalDispatcher`.
 *
 * ```ts
 * import { Agent, setGlobalDispatcher } from 'undici';
 * import { valveInterceptor } from 'valve/undici';
 *
 * setGlobalDispatcher(new Agent().compose(valveInterceptor({ valve })));
 * ```
 *
 * Uses undici's handler API of version 7 (`onRequestStart`, `onResponseStart`, …), which
 * `Dispatcher.compose()` of undici 7 hands every interceptor, whatever handler the caller gave.
 */
import type { Dispatcher } from 'undici';
import { describe } from './duration.js';
import { type Outgoing, throughValve, type ValveTarget } from './integrations/source.js';
import {
  Attempt,
  isAsyncIterable,
  OuterController,
  readBody,
  replayable,
  type UndiciAttempt,
} from './integrations/undici-handlers.js';

type DispatchOptions = Dispatcher.DispatchOptions;
type DispatchHandler = Dispatcher.DispatchHandler;
type Dispatch = Dispatcher.Dispatch;

/** Options of {@link valveInterceptor}: `{ valve }` or `{ group, key }`, and wrapFetch's options. */
export interface ValveInterceptorOptions extends ValveTarget<DispatchOptions> {
  /**
   * Which requests go through the valve (default: all). The others are dispatched untouched.
   * Upgrades and CONNECT requests (WebSockets, proxies' tunnels) never go through it.
   */
  match?: (request: DispatchOptions) => boolean;
  /**
   * Bytes of a streamed request body (a stream, an async iterable: every body `fetch()` sends)
   * read into memory before the request is queued, so that a retry can send it again. A longer
   * body is sent once, as it streams (its 429 is observed and returned). Default 1 MiB; 0 never buffers.
   */
  maxBufferedBody?: number;
}

interface Pending {
  readonly outer: OuterController;
  readonly handler: DispatchHandler;
  /** The next dispatch of the composed dispatcher this request came through. */
  readonly dispatch: Dispatch;
}

/**
 * The value of a request header in undici's dispatch options (headers given as an object, a
 * flat `[name, value, …]` array or an iterable of pairs), or undefined. Repeated headers are
 * joined with ", ". Case-insensitive. For `key` functions: one budget per credential (keep the
 * credential itself out of the key, which is a store id: use a digest or an account name).
 */
export function requestHeader(request: DispatchOptions, name: string): string | undefined {
  const headers = request.headers as unknown;
  if (headers === null || headers === undefined) return undefined;
  const wanted = name.toLowerCase();
  const found: string[] = [];
  const add = (k: unknown, v: unknown) => {
    if (String(k).toLowerCase() !== wanted || v === undefined || v === null) return;
    if (Array.isArray(v)) for (const x of v) found.push(String(x));
    else found.push(String(v));
  };
  if (Array.isArray(headers)) {
    if (headers.length > 0 && Array.isArray(headers[0])) for (const [k, v] of headers) add(k, v);
    else for (let i = 0; i + 1 < headers.length; i += 2) add(headers[i], headers[i + 1]);
  } else if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    for (const pair of headers as Iterable<[unknown, unknown]>) add(pair[0], pair[1]);
  } else if (typeof headers === 'object') {
    for (const k of Object.keys(headers)) add(k, (headers as Record<string, unknown>)[k]);
  }
  return found.length === 0 ? undefined : found.join(', ');
}

/** `13, 13`: one length repeated (RFC 9110 §8.6 lets a recipient collapse it to one). */
const REPEATED_LENGTH = /^\s*(\d+)(?:\s*,\s*\1)+\s*$/;

/**
 * Node 20's bundled fetch sends `content-length: 13, 13` when the caller set the header itself
 * (stripe-node's fetch client does), which undici 7 refuses ('invalid content-length header').
 * Collapses one repeated length to a single value, as RFC 9110 allows; anything else is left
 * for undici to judge. Headers as an object (fetch's form) or a flat array.
 */
function withSingleContentLength(request: DispatchOptions): DispatchOptions {
  const headers = request.headers as unknown;
  if (headers === null || typeof headers !== 'object') return request;
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) {
      const value = headers[i + 1];
      if (String(headers[i]).toLowerCase() !== 'content-length' || typeof value !== 'string') continue;
      const repeated = REPEATED_LENGTH.exec(value);
      if (repeated === null) continue;
      const copy = headers.slice();
      copy[i + 1] = repeated[1];
      return { ...request, headers: copy as string[] };
    }
    return request;
  }
  if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') return request;
  const record = headers as Record<string, unknown>;
  for (const name of Object.keys(record)) {
    const value = record[name];
    if (name.toLowerCase() !== 'content-length' || typeof value !== 'string') continue;
    const repeated = REPEATED_LENGTH.exec(value);
    if (repeated === null) return request;
    return { ...request, headers: { ...record, [name]: repeated[1] } as Record<string, string> };
  }
  return request;
}

function hrefOf(request: DispatchOptions): string {
  const origin = request.origin === undefined ? '' : String(request.origin).replace(/\/$/, '');
  return `${origin}${request.path}`;
}

/**
 * An undici interceptor (`dispatcher.compose(valveInterceptor({ valve }))`) that sends every
 * request through `valve`, or through `group.valve(key(request))`. Throws TypeError/RangeError
 * for bad options, at once.
 *
 * - A request waits in the valve's queue before it is dispatched; aborting it there (a fetch
 *   signal, `request({ signal })`) rejects at once and nothing is sent.
 * - Its answer is observed; a 429 (or 503 with Retry-After) is retried up to `retries` times at
 *   the original position, its body discarded once the retry is sent; then the last answer is
 *   handed over as is. A retry never sent (maxWait, close()) hands over the 429 it had. While
 *   held, at most 64 KiB of its body is read (HELD_BODY_LIMIT); the rest waits on the connection.
 * - A streamed body (a stream, an async iterable: every `fetch()` body) is read into memory
 *   first, up to `maxBufferedBody` bytes, so that a retry can send it again; a longer one is sent
 *   once, as it streams: its 429 is observed and returned, not retried.
 */
export function valveInterceptor(options: ValveInterceptorOptions): Dispatcher.DispatcherComposeInterceptor {
  const { match, maxBufferedBody, ...target } = (options ?? {}) as ValveInterceptorOptions;
  if (match !== undefined && typeof match !== 'function') {
    throw new TypeError(
      `Expected \`match\` to be a function of the request returning a boolean, got ${describe(match)}`,
    );
  }
  const maxBuffered = maxBufferedBody ?? 1_048_576;
  if (typeof maxBuffered !== 'number') {
    throw new TypeError(
      `Expected \`maxBufferedBody\` to be a non-negative integer (bytes), got ${describe(maxBuffered)}`,
    );
  }
  if (!Number.isSafeInteger(maxBuffered) || maxBuffered < 0) {
    throw new RangeError(
      `Expected \`maxBufferedBody\` to be a non-negative integer (bytes), got ${String(maxBuffered)}`,
    );
  }
  /** Each request's dispatch, controller and caller handler, read by `send` (wrapFetch passes only the request). */
  const pending = new WeakMap<Outgoing<DispatchOptions>, Pending>();
  const send = (
    outgoing: Outgoing<DispatchOptions>,
    init: { signal: AbortSignal },
  ): Promise<UndiciAttempt> => {
    const { outer, handler, dispatch } = pending.get(outgoing)!;
    // The attempt follows init.signal (the caller's or the valve's) until its answer is settled.
    const attempt = new Attempt(outer, handler, init.signal);
    try {
      dispatch(outgoing.request, attempt);
    } catch (err) {
      attempt.unwatch();
      return Promise.reject(err);
    }
    return attempt.response;
  };
  const wrapped = throughValve<DispatchOptions, UndiciAttempt>(
    options === null || typeof options !== 'object' ? (options as never) : target,
    'valveInterceptor()',
    send,
    ['match', 'maxBufferedBody'],
  );

  return (dispatch: Dispatch): Dispatch =>
    (request: DispatchOptions, handler: DispatchHandler): boolean => {
      request = withSingleContentLength(request);
      if (request.upgrade || request.method === 'CONNECT' || (match !== undefined && !match(request))) {
        return dispatch(request, handler);
      }
      const outer = new OuterController();
      // The caller gets its controller now: an abort while queued reaches the valve.
      handler.onRequestStart?.(outer, {});
      const fail = (err: unknown) => {
        if (outer.current === null) handler.onResponseError?.(outer, err as Error);
      };
      if (outer.aborted) {
        fail(outer.reason);
        return true;
      }
      const queue = (req: DispatchOptions, again: boolean) => {
        const outgoing: Outgoing<DispatchOptions> = { href: hrefOf(req), request: req };
        pending.set(outgoing, { outer, handler, dispatch });
        const through = again ? wrapped.replayable : wrapped.once;
        through(outgoing, { signal: outer.abortController.signal }).then(
          (answer) => answer.attempt.release(),
          fail,
        );
      };
      const body: unknown = request.body;
      if (replayable(body) || maxBuffered === 0 || !isAsyncIterable(body)) {
        queue(request, replayable(body));
      } else {
        // A streamed body (every fetch() body): read it first, so that a retry can send it again.
        readBody(body, maxBuffered, outer.abortController.signal).then(
          (read) => queue({ ...request, body: read.body as DispatchOptions['body'] }, read.whole),
          fail,
        );
      }
      return true;
    };
}
