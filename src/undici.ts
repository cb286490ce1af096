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
import {
  type AttemptResponse,
  headerMap,
  type Outgoing,
  throughValve,
  type ValveTarget,
} from './integrations/source.js';

type DispatchOptions = Dispatcher.DispatchOptions;
type DispatchHandler = Dispatcher.DispatchHandler;
type DispatchController = Dispatcher.DispatchController;
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

/** One attempt's answer as wrapFetch sees it. */
interface UndiciAttempt extends AttemptResponse {
  readonly attempt: Attempt;
}

/**
 * The value of a request header in undici's dispatch options (headers given as an object, a
 * flat `[name, value, …]` array or an iterable of pairs), or undefined. Repeated headers are
 * joined with ", ". Case-insensitive. For keys: `key: (req) => \`openai:${requestHeader(req, 'authorization')}\``.
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

/** Bodies undici sends without consuming them, so a retry can send the same object again. */
function replayable(body: unknown): boolean {
  if (body === undefined || body === null || typeof body === 'string') return true;
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return true;
  const tag = Object.prototype.toString.call(body);
  return tag === '[object Blob]' || tag === '[object File]' || tag === '[object FormData]';
}

function isAsyncIterable(body: unknown): body is AsyncIterable<unknown> {
  return (
    body !== null &&
    typeof body === 'object' &&
    typeof (body as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'
  );
}

/** A streamed body read whole (up to `max` bytes), or, beyond that, a stream of what was read and the rest. */
async function readBody(
  body: AsyncIterable<unknown>,
  max: number,
  signal: AbortSignal,
): Promise<{ body: Buffer | AsyncIterable<unknown>; whole: boolean }> {
  const iterator = body[Symbol.asyncIterator]();
  const chunks: Buffer[] = [];
  let size = 0;
  for (;;) {
    if (signal.aborted) {
      void iterator.return?.()?.catch?.(() => {});
      throw signal.reason;
    }
    const next = await iterator.next();
    if (next.done) return { body: Buffer.concat(chunks), whole: true };
    const chunk = Buffer.isBuffer(next.value)
      ? next.value
      : typeof next.value === 'string'
        ? Buffer.from(next.value)
        : Buffer.from(next.value as Uint8Array);
    chunks.push(chunk);
    size += chunk.length;
    if (size > max) {
      const rest = async function* () {
        yield* chunks;
        for (;;) {
          const more = await iterator.next();
          if (more.done) return;
          yield more.value;
        }
      };
      return { body: rest(), whole: false };
    }
  }
}

function hrefOf(request: DispatchOptions): string {
  const origin = request.origin === undefined ? '' : String(request.origin).replace(/\/$/, '');
  return `${origin}${request.path}`;
}

/**
 * The controller the caller's handler holds for the whole request: it aborts the queued job
 * (before any attempt) or the attempt on the wire, and passes pause/resume to the attempt
 * whose answer the caller reads.
 */
class OuterController implements DispatchController {
  /** The attempt whose response the caller's handler reads (set when it is chosen), else null. */
  current: DispatchController | null = null;
  /** Aborts the queued job and the attempt in flight. */
  readonly abortController = new AbortController();
  #reason: Error | null = null;
  #paused = false;

  get aborted(): boolean {
    return this.#reason !== null;
  }
  get paused(): boolean {
    return this.#paused;
  }
  get reason(): Error | null {
    return this.#reason;
  }
  get rawHeaders() {
    return this.current?.rawHeaders ?? null;
  }
  get rawTrailers() {
    return this.current?.rawTrailers ?? null;
  }
  abort(reason: Error): void {
    if (this.#reason !== null) return;
    this.#reason = reason ?? new Error('aborted');
    this.abortController.abort(this.#reason);
    this.current?.abort(this.#reason);
  }
  pause(): void {
    this.#paused = true;
    this.current?.pause();
  }
  resume(): void {
    this.#paused = false;
    this.current?.resume();
  }
}

/**
 * One attempt on the wire. Its answer resolves `response` at the headers. A retryable answer
 * (429, 503) is held back, body buffered, until wrapFetch decides: retried (discarded) or
 * returned (replayed to the caller). Any other answer is handed to the caller as it streams.
 */
class Attempt implements DispatchHandler {
  controller: DispatchController | null = null;
  /** The caller's handler once this attempt's answer is theirs; null while held or before. */
  private sink: DispatchHandler | null = null;
  private held: Buffer[] = [];
  private trailers: Record<string, string | string[] | undefined> | null = null;
  private error: Error | null = null;
  private headersSeen: {
    status: number;
    headers: Record<string, string | string[] | undefined>;
    message: string | undefined;
  } | null = null;
  private discarded = false;
  private resolve!: (value: UndiciAttempt) => void;
  private reject!: (err: unknown) => void;
  readonly response = new Promise<UndiciAttempt>((resolve, reject) => {
    this.resolve = resolve;
    this.reject = reject;
  });

  constructor(
    private readonly outer: OuterController,
    private readonly handler: DispatchHandler,
    private readonly signal: AbortSignal,
  ) {}

  onRequestStart(controller: DispatchController): void {
    this.controller = controller;
    if (this.signal.aborted) controller.abort(this.signal.reason as Error);
  }

  onResponseStart(
    controller: DispatchController,
    status: number,
    headers: Record<string, string | string[] | undefined>,
    message?: string,
  ): void {
    this.controller = controller;
    const response: UndiciAttempt = {
      status,
      headers: headerMap(headers),
      body: { cancel: () => this.discard() },
      attempt: this,
    };
    if (status === 429 || status === 503) {
      this.headersSeen = { status, headers, message };
    } else {
      this.deliver();
      this.handler.onResponseStart?.(this.outer, status, headers, message);
    }
    this.resolve(response);
  }

  onResponseData(_controller: DispatchController, chunk: Buffer): void {
    if (this.sink) this.sink.onResponseData?.(this.outer, chunk);
    else if (!this.discarded) this.held.push(chunk);
  }

  onResponseEnd(
    _controller: DispatchController,
    trailers: Record<string, string | string[] | undefined>,
  ): void {
    if (this.sink) this.sink.onResponseEnd?.(this.outer, trailers);
    else this.trailers = trailers;
  }

  onResponseError(_controller: DispatchController, err: Error): void {
    if (this.sink) this.sink.onResponseError?.(this.outer, err);
    else if (this.headersSeen === null) this.reject(err);
    else this.error = err;
  }

  /** This attempt's answer goes to the caller from now on. */
  private deliver(): void {
    this.outer.current = this.controller;
    if (this.outer.paused) this.controller?.pause();
    this.sink = this.handler;
  }

  /** wrapFetch returned this held answer: replay what was buffered, then stream the rest. */
  release(): void {
    const seen = this.headersSeen;
    if (seen === null) return;
    this.headersSeen = null;
    this.deliver();
    this.handler.onResponseStart?.(this.outer, seen.status, seen.headers, seen.message);
    for (const chunk of this.held) this.handler.onResponseData?.(this.outer, chunk);
    this.held = [];
    if (this.error) this.handler.onResponseError?.(this.outer, this.error);
    else if (this.trailers) this.handler.onResponseEnd?.(this.outer, this.trailers);
  }

  /** wrapFetch retries: drop the held body (a 429's is small; the connection stays usable). */
  private discard(): Promise<void> {
    this.discarded = true;
    this.held = [];
    return Promise.resolve();
  }
}

/**
 * An undici interceptor (`dispatcher.compose(valveInterceptor({ valve }))`) that sends every
 * request through `valve`, or through `group.valve(key(request))`. Throws TypeError/RangeError
 * for bad options, at once.
 *
 * - A request waits in the valve's queue before it is dispatched; aborting it there (a fetch
 *   signal, `request({ signal })`) rejects at once and nothing is sent.
 * - Its answer is observed; a 429 (or 503 with Retry-After) is retried up to `retries` times at
 *   the original position, its body discarded; then the last answer is handed over as is.
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
    const attempt = new Attempt(outer, handler, init.signal);
    const onAbort = () => attempt.controller?.abort(init.signal.reason as Error);
    init.signal.addEventListener('abort', onAbort, { once: true });
    void attempt.response.then(
      () => init.signal.removeEventListener('abort', onAbort),
      () => init.signal.removeEventListener('abort', onAbort),
    );
    try {
      dispatch(outgoing.request, attempt);
    } catch (err) {
      return Promise.reject(err);
    }
    return attempt.response;
  };
  const wrapped = throughValve<DispatchOptions, UndiciAttempt>(
    options === null || typeof options !== 'object' ? (options as never) : target,
    'valveInterceptor()',
    send,
  );

  return (dispatch: Dispatch): Dispatch =>
    (request: DispatchOptions, handler: DispatchHandler): boolean => {
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
