/**
 * `valve/axios`: an axios adapter. Every request of an axios instance created with it goes
 * through a valve (or a group's valve chosen per request): each attempt is a job, every answer
 * is observed (a rate-limit header pauses the id in every process), and a 429 (or a 503 with
 * Retry-After) is retried at the request's original queue position, as `valve.wrapFetch()`
 * does. axios's own semantics are kept: a status `validateStatus` refuses rejects with an
 * `AxiosError` (`ERR_BAD_REQUEST` / `ERR_BAD_RESPONSE`), a `signal` (or `cancelToken`) that
 * fires rejects with a `CanceledError`, network errors are axios's own.
 *
 * ```ts
 * import axios from 'axios';
 * import { valveAdapter } from 'valve/axios';
 *
 * const api = axios.create({ baseURL, adapter: valveAdapter({ valve }) });
 * ```
 */
import {
  type AxiosAdapter,
  AxiosError,
  type AxiosResponse,
  CanceledError,
  getAdapter,
  type InternalAxiosRequestConfig,
} from 'axios';
import { describe } from './duration.js';
import {
  type AttemptResponse,
  headerMap,
  type Outgoing,
  throughValve,
  type ValveTarget,
} from './integrations/source.js';

type AdapterConfig = Parameters<typeof getAdapter>[0];

/** Options of {@link valveAdapter}: `{ valve }` or `{ group, key }`, wrapFetch's options, and the adapter that sends. */
export interface ValveAdapterOptions extends ValveTarget<InternalAxiosRequestConfig> {
  /** The adapter that sends each attempt (a name, a function or a list, as axios's `adapter`). Default axios's own: `['xhr', 'http', 'fetch']`. */
  adapter?: AdapterConfig;
}

interface AxiosAttempt extends AttemptResponse {
  readonly response: AxiosResponse;
}

const DEFAULT_ADAPTERS: AdapterConfig = ['xhr', 'http', 'fetch'];

/** Request data axios sends without consuming it, so a retry can send the same value again. */
function replayable(data: unknown): boolean {
  if (data === undefined || data === null || typeof data === 'string') return true;
  if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) return true;
  const tag = Object.prototype.toString.call(data);
  if (tag === '[object URLSearchParams]' || tag === '[object Blob]' || tag === '[object File]') return true;
  // A spec FormData is read afresh each time; the form-data package's is a stream (it has pipe).
  return tag === '[object FormData]' && typeof (data as { pipe?: unknown }).pipe !== 'function';
}

/** Frees an unread response body that will not be returned (responseType 'stream'). */
function discard(data: unknown): Promise<void> {
  try {
    const body = data as { destroy?: () => void; cancel?: () => Promise<void>; locked?: boolean } | null;
    if (typeof body?.destroy === 'function') body.destroy();
    else if (typeof body?.cancel === 'function' && body.locked !== true) body.cancel().catch(() => {});
  } catch {
    // Left to the garbage collector.
  }
  return Promise.resolve();
}

function hrefOf(config: InternalAxiosRequestConfig): string {
  const url = config.url ?? '';
  if (/^[a-z][a-z\d+\-.]*:\/\//i.test(url) || !config.baseURL) return url;
  return `${config.baseURL.replace(/\/+$/, '')}/${url.replace(/^\/+/, '')}`;
}

/** axios's adapter names (its `adapter` option takes these, a function, or a list of them). */
const ADAPTER_NAMES = ['xhr', 'http', 'fetch'];

/** Checks `adapter` at once, as axios would at the first request. */
function checkAdapter(adapter: unknown): void {
  if (adapter === undefined) return;
  const ok = (a: unknown) =>
    typeof a === 'function' || (typeof a === 'string' && ADAPTER_NAMES.includes(a.toLowerCase()));
  if (Array.isArray(adapter) ? adapter.length > 0 && adapter.every(ok) : ok(adapter)) return;
  throw new TypeError(
    `Expected \`adapter\` to be one of 'xhr', 'http', 'fetch', an adapter function, or a list of them, got ${describe(adapter)}`,
  );
}

/** As axios's settle(): a status `validateStatus` refuses becomes an AxiosError carrying the response. */
function settle(config: InternalAxiosRequestConfig, response: AxiosResponse): AxiosResponse {
  const validate = config.validateStatus;
  if (!response.status || !validate || validate(response.status)) return response;
  throw new AxiosError(
    `Request failed with status code ${response.status}`,
    response.status >= 400 && response.status < 500
      ? AxiosError.ERR_BAD_REQUEST
      : AxiosError.ERR_BAD_RESPONSE,
    config,
    response.request,
    response,
  );
}

/**
 * An axios adapter (`axios.create({ adapter: valveAdapter({ valve }) })`) that sends every
 * request through `valve`, or through `group.valve(key(config))`. Throws TypeError/RangeError
 * for bad options, at once.
 *
 * - A request waits in the valve's queue before the adapter sends it; its `signal` or
 *   `cancelToken` firing there rejects at once with a `CanceledError` and nothing is sent.
 *   axios's `timeout` counts from the moment an attempt is sent (use `maxWait` for the queue).
 * - A 429 (or 503 with Retry-After) is retried up to `retries` times at the original position;
 *   then `validateStatus` decides, as without valve (by default a 429 rejects with an AxiosError).
 * - Data that cannot be sent twice (a stream) is sent once: its 429 is observed, not retried.
 * - A request that is never sent rejects with valve's `ValveError` (`MAX_WAIT`, `CLOSED`, …); a
 *   retry that is never sent leaves the 429 it had to `validateStatus`, as after the retries.
 */
export function valveAdapter(options: ValveAdapterOptions): AxiosAdapter {
  const { adapter: inner, ...target } =
    options !== null && typeof options === 'object' ? options : ({} as ValveAdapterOptions);
  checkAdapter(inner);
  const send = async (
    outgoing: Outgoing<InternalAxiosRequestConfig>,
    init: { signal: AbortSignal },
  ): Promise<AxiosAttempt> => {
    const config = outgoing.request;
    const adapter = getAdapter(inner ?? DEFAULT_ADAPTERS, config);
    // Every status resolves here (validateStatus is applied once, to the last answer); the
    // signal aborts on the caller's signal or cancelToken, or the valve's close().
    const attemptConfig = {
      ...config,
      validateStatus: null,
      signal: init.signal,
      cancelToken: undefined,
    } as unknown as InternalAxiosRequestConfig;
    let response: AxiosResponse;
    try {
      response = await adapter(attemptConfig);
    } catch (err) {
      // The caller's config, not the attempt's (whose validateStatus, signal and cancelToken
      // are valve's): `api.request(err.config)` must resend what the caller sent.
      if (err instanceof AxiosError && err.config === attemptConfig) err.config = config;
      throw err;
    }
    const headers = response.headers as { toJSON?: () => Record<string, unknown> } | undefined;
    return {
      status: response.status,
      headers: headerMap(typeof headers?.toJSON === 'function' ? headers.toJSON() : (headers as never)),
      body: { cancel: () => discard(response.data) },
      response,
    };
  };
  const wrapped = throughValve<InternalAxiosRequestConfig, AxiosAttempt>(
    options === null || typeof options !== 'object' ? (options as never) : target,
    'valveAdapter()',
    send,
    ['adapter'],
  );

  return async (config: InternalAxiosRequestConfig): Promise<AxiosResponse> => {
    const controller = new AbortController();
    const signal = config.signal as AbortSignal | undefined;
    const token = config.cancelToken;
    const onSignal = () => controller.abort(new CanceledError(undefined, config));
    const onToken = (cancel: unknown) => controller.abort(cancel);
    if (signal?.aborted) onSignal();
    else signal?.addEventListener?.('abort', onSignal, { once: true });
    token?.subscribe(onToken);
    try {
      const through = replayable(config.data) ? wrapped.replayable : wrapped.once;
      const { response } = await through(
        { href: hrefOf(config), request: config },
        { signal: controller.signal },
      );
      response.config = config;
      return settle(config, response);
    } catch (err) {
      // Cancelled while queued (the valve rejects with the signal's reason) or while sent (the
      // adapter's own CanceledError): the caller's cancellation, as axios reports it.
      if (controller.signal.aborted && !(err instanceof AxiosError && err.response)) {
        throw controller.signal.reason;
      }
      throw err;
    } finally {
      signal?.removeEventListener?.('abort', onSignal);
      token?.unsubscribe(onToken);
    }
  };
}
