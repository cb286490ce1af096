/*
 * The undici handlers of valve/undici (undici.ts): the controller the caller's handler holds for
 * a whole request, one attempt on the wire (holding back a retryable answer until wrapFetch
 * decides), and reading a streamed body so that a retry can send it again.
 */
import type { Dispatcher } from 'undici';
import { type AttemptResponse, headerMap } from './source.js';

type DispatchHandler = Dispatcher.DispatchHandler;
type DispatchController = Dispatcher.DispatchController;

/** One attempt's answer as wrapFetch sees it. */
export interface UndiciAttempt extends AttemptResponse {
  readonly attempt: Attempt;
}

/** Bodies undici sends without consuming them, so a retry can send the same object again. */
export function replayable(body: unknown): boolean {
  if (body === undefined || body === null || typeof body === 'string') return true;
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return true;
  const tag = Object.prototype.toString.call(body);
  return tag === '[object Blob]' || tag === '[object File]' || tag === '[object FormData]';
}

export function isAsyncIterable(body: unknown): body is AsyncIterable<unknown> {
  return (
    body !== null &&
    typeof body === 'object' &&
    typeof (body as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'
  );
}

/**
 * The iterator's next chunk, or the signal's reason as soon as it aborts (a body that stalls
 * must not hold an aborted request): the iterator is then closed (a stream is destroyed).
 */
function nextOrAbort(
  iterator: AsyncIterator<unknown>,
  signal: AbortSignal,
): Promise<IteratorResult<unknown>> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      void iterator.return?.()?.catch?.(() => {});
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    iterator.next().then(
      (result) => {
        signal.removeEventListener('abort', onAbort);
        resolve(result);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

/** A streamed body read whole (up to `max` bytes), or, beyond that, a stream of what was read and the rest. */
export async function readBody(
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
    const next = await nextOrAbort(iterator, signal);
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

/**
 * The controller the caller's handler holds for the whole request: it aborts the queued job
 * (before any attempt) or the attempt on the wire, and passes pause/resume to the attempt
 * whose answer the caller reads.
 */
export class OuterController implements DispatchController {
  /** The attempt whose response the caller's handler reads (set when it is chosen), else null. */
  current: DispatchController | null = null;
  /** Aborts the queued job and the attempt in flight. */
  readonly abortController = new AbortController();
  #reason: Error | null = null;
  #paused = false;
  /**
   * Set while an attempt replays a held answer's buffered chunks: a resume() then only records
   * the caller's state (the attempt applies it once the replay is done), so the wire's next
   * chunks cannot overtake the buffered ones.
   */
  replaying = false;

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
    if (!this.replaying) this.current?.resume();
  }
}

/**
 * Bytes of a held answer's body (a 429 or 503 while wrapFetch decides) read into memory. At
 * this many the attempt is paused: undici stops reading its socket, the rest of the body stays
 * on the connection (the server's writes meet back-pressure) until the answer is released to
 * the caller (streamed on from there) or discarded for a retry (the connection is closed).
 */
export const HELD_BODY_LIMIT = 65_536;

/**
 * One attempt on the wire. Its answer resolves `response` at the headers. A retryable answer
 * (429, 503) is held back, body buffered up to HELD_BODY_LIMIT bytes (then the attempt is
 * paused), until wrapFetch decides: retried (discarded) or returned (replayed to the caller,
 * then the rest streamed). Any other answer is handed to the caller as it streams.
 *
 * `signal` (the caller's or the valve's) aborts the attempt until its answer is the caller's
 * (the caller's controller reaches it from then on) or discarded: a held answer too, and one
 * released after `signal` aborted reaches the caller as that abort's error, never as a response.
 */
export class Attempt implements DispatchHandler {
  controller: DispatchController | null = null;
  /** The caller's handler once this attempt's answer is theirs; null while held or before. */
  private sink: DispatchHandler | null = null;
  private held: Buffer[] = [];
  private heldBytes = 0;
  /** Whether this attempt paused its controller because the held body reached HELD_BODY_LIMIT. */
  private heldPaused = false;
  /** Whether the caller's handler got its end or its error (nothing more goes to it). */
  private closed = false;
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
  ) {
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  private readonly onAbort = (): void => {
    this.controller?.abort(this.signal.reason as Error);
  };

  /** The attempt's answer is the caller's, discarded, or never came: `signal` no longer concerns it. */
  unwatch(): void {
    this.signal.removeEventListener('abort', this.onAbort);
  }

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

  onResponseData(controller: DispatchController, chunk: Buffer): void {
    if (this.sink) {
      if (!this.closed) this.sink.onResponseData?.(this.outer, chunk);
      return;
    }
    if (this.discarded) return;
    this.held.push(chunk);
    this.heldBytes += chunk.length;
    if (this.heldBytes >= HELD_BODY_LIMIT && !this.heldPaused) {
      // Enough is in memory: undici stops reading the socket until release() or discard().
      this.heldPaused = true;
      controller.pause();
    }
  }

  onResponseEnd(
    _controller: DispatchController,
    trailers: Record<string, string | string[] | undefined>,
  ): void {
    if (this.sink) {
      if (this.closed) return;
      this.closed = true;
      this.sink.onResponseEnd?.(this.outer, trailers);
    } else this.trailers = trailers;
  }

  onResponseError(_controller: DispatchController, err: Error): void {
    if (this.sink) {
      if (this.closed) return;
      this.closed = true;
      this.sink.onResponseError?.(this.outer, err);
    } else if (this.headersSeen === null) {
      this.unwatch();
      this.reject(err);
    } else this.error = err;
  }

  /** This attempt's answer goes to the caller from now on. */
  private deliver(): void {
    this.unwatch();
    this.outer.current = this.controller;
    if (this.outer.paused) this.controller?.pause();
    this.sink = this.handler;
  }

  /** wrapFetch returned this held answer: replay what was buffered, then stream the rest. */
  release(): void {
    const seen = this.headersSeen;
    if (seen === null) return;
    this.headersSeen = null;
    if (this.signal.aborted) {
      // Aborted while held (the attempt was aborted with it): the caller gets the abort, as
      // for any request aborted before its response started.
      this.unwatch();
      this.held = [];
      this.handler.onResponseError?.(this.outer, (this.outer.reason ?? this.signal.reason) as Error);
      return;
    }
    const held = this.held;
    this.held = [];
    this.heldBytes = 0;
    this.deliver();
    // While the buffered chunks are replayed, a resume() of the caller's waits (OuterController).
    this.outer.replaying = true;
    try {
      this.handler.onResponseStart?.(this.outer, seen.status, seen.headers, seen.message);
      for (const chunk of held) {
        if (this.closed || this.outer.aborted) break;
        this.handler.onResponseData?.(this.outer, chunk);
      }
    } finally {
      this.outer.replaying = false;
    }
    if (this.closed) return;
    if (this.outer.aborted || this.error || this.trailers) {
      // The caller aborted during the replay (an answer still on the wire got the abort from
      // its controller, and so the caller its error, above), or the answer had ended.
      this.closed = true;
      if (this.outer.aborted) this.handler.onResponseError?.(this.outer, this.outer.reason as Error);
      else if (this.error) this.handler.onResponseError?.(this.outer, this.error);
      else this.handler.onResponseEnd?.(this.outer, this.trailers!);
      return;
    }
    // The rest of the body streams to the caller, whose pause state governs from now on.
    if (this.outer.paused) this.controller?.pause();
    else if (this.heldPaused || this.controller?.paused) this.controller?.resume();
    this.heldPaused = false;
  }

  /**
   * wrapFetch retries: drop the held body. One that ended, or still arriving under
   * HELD_BODY_LIMIT, is read to its end (the connection stays usable); one paused at the limit
   * is aborted: its connection is closed rather than read through a body of unknown length.
   */
  private discard(): Promise<void> {
    this.unwatch();
    this.discarded = true;
    this.held = [];
    this.heldBytes = 0;
    if (this.heldPaused && this.trailers === null && this.error === null) {
      this.controller?.abort(new Error('valve: a held answer discarded for its retry'));
    }
    return Promise.resolve();
  }
}
