/**
 * Local stand-ins (loopback, port 0) for the APIs the SDK recipes call, answering as each
 * provider documents, bodies included, so the real SDKs parse them:
 *
 * - `openai`: `POST …/chat/completions`. A token bucket of `limit` requests refilled over
 *   `windowMs`; `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (Go durations, reset =
 *   time until the bucket is full again); a chat.completion body with `usage`; beyond the bucket
 *   a 429 with OpenAI's JSON error, `retry-after-ms` and `retry-after` (seconds, rounded up).
 * - `anthropic`: `POST …/v1/messages`. The same bucket; `anthropic-ratelimit-requests-*` with
 *   RFC 3339 resets; a message body with `usage`; a 429 with its `rate_limit_error` JSON and
 *   `retry-after` (whole seconds).
 * - `stripe`: any path. A fixed window of `limit` per `windowMs` (opening at its first
 *   request); a customer object; beyond it a 429 with Stripe's `rate_limit` error body,
 *   `request-id` and `stripe-should-retry: true`. No rate-limit header, as Stripe.
 *
 * - `generic`: any path. A fixed window as Stripe's, with the IETF draft-8 fields that
 *   express-rate-limit sends (`RateLimit-Policy: "default";q=…;w=…`, `RateLimit: "default";r=…;t=…`,
 *   whole seconds) and, beyond it, a 429 with `Retry-After` (seconds) and a JSON problem body.
 *   With `always429`, a bare 429 (no header: valve backs off), to count attempts quickly. A path
 *   starting with `/missing` is a 404.
 *
 * `always429: true` answers every request with the limited answer (for counting attempts).
 * Requests may carry `x-call` (the caller's id) and `x-sent-at` (epoch ms when the client
 * sent it, performance-based clock): both are logged, with the SDK's retry counters
 * (`x-stainless-retry-count`, Stripe's idempotency retries are not counted here).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { formatGoDuration } from './fake-provider.js';

export type FakeApiKind = 'openai' | 'anthropic' | 'stripe' | 'generic';

export interface FakeApiOptions {
  limit: number;
  windowMs: number;
  always429?: boolean;
  /** Tokens each completion reports as used (prompt, completion). Default 12 and 30. */
  usage?: { input: number; output: number };
}

export interface ApiRequest {
  /** Arrival, epoch ms (performance-based). */
  readonly at: number;
  readonly method: string;
  readonly path: string;
  readonly status: number;
  /** The provider told the client to wait until then (a 429, or 0 remaining). */
  readonly blockedUntil: number | undefined;
  readonly call: string | undefined;
  readonly sentAt: number | undefined;
  /** `x-stainless-retry-count` (OpenAI and Anthropic SDKs). */
  readonly sdkRetry: string | undefined;
  readonly body: string;
}

export interface FakeApi {
  readonly url: string;
  readonly port: number;
  readonly log: ApiRequest[];
  stop(): Promise<void>;
}

const now = (): number => performance.timeOrigin + performance.now();

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
  blockedUntil: number | undefined;
}

export async function startFakeApi(kind: FakeApiKind, options: FakeApiOptions): Promise<FakeApi> {
  const log: ApiRequest[] = [];
  const usage = options.usage ?? { input: 12, output: 30 };
  let tokens = options.limit;
  let tokensAt = -1;
  let windowStart = -1;
  let count = 0;
  let served = 0;

  const bucket = (t: number): Answer => {
    const perMs = options.limit / options.windowMs;
    tokens = tokensAt < 0 ? options.limit : Math.min(options.limit, tokens + (t - tokensAt) * perMs);
    tokensAt = t;
    const limited = options.always429 === true || tokens < 1;
    if (!limited) tokens -= 1;
    const remaining = Math.floor(tokens);
    const untilFull = (options.limit - tokens) / perMs;
    const nextToken = t + Math.max(0, 1 - tokens) / perMs;
    const blockedUntil = limited || remaining === 0 ? nextToken : undefined;
    const json = { 'content-type': 'application/json' };
    served++;
    if (kind === 'openai') {
      const h = {
        ...json,
        'x-request-id': `req_${served}`,
        'x-ratelimit-limit-requests': String(options.limit),
        'x-ratelimit-remaining-requests': String(remaining),
        'x-ratelimit-reset-requests': formatGoDuration(untilFull),
        'x-ratelimit-limit-tokens': '150000',
        'x-ratelimit-remaining-tokens': '149000',
        'x-ratelimit-reset-tokens': '400ms',
      };
      if (limited) {
        const wait = Math.max(1, Math.ceil(nextToken - t));
        return {
          status: 429,
          headers: { ...h, 'retry-after-ms': String(wait), 'retry-after': String(Math.ceil(wait / 1000)) },
          body: JSON.stringify({
            error: {
              message: `Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit ${options.limit}, Used ${options.limit}, Requested 1. Please try again in ${wait}ms.`,
              type: 'requests',
              param: null,
              code: 'rate_limit_exceeded',
            },
          }),
          blockedUntil: t + wait,
        };
      }
      return {
        status: 200,
        headers: h,
        body: JSON.stringify({
          id: `chatcmpl-${served}`,
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          model: 'gpt-4o-mini',
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: 'ok' },
              logprobs: null,
              finish_reason: 'stop',
            },
          ],
          usage: {
            prompt_tokens: usage.input,
            completion_tokens: usage.output,
            total_tokens: usage.input + usage.output,
          },
        }),
        blockedUntil,
      };
    }
    const h = {
      ...json,
      'request-id': `req_${served}`,
      'anthropic-ratelimit-requests-limit': String(options.limit),
      'anthropic-ratelimit-requests-remaining': String(remaining),
      'anthropic-ratelimit-requests-reset': new Date(t + untilFull).toISOString(),
    };
    if (limited) {
      const seconds = Math.max(1, Math.ceil((nextToken - t) / 1000));
      return {
        status: 429,
        headers: { ...h, 'retry-after': String(seconds) },
        body: JSON.stringify({
          type: 'error',
          error: {
            type: 'rate_limit_error',
            message: 'Number of request tokens has exceeded your rate limit.',
          },
        }),
        blockedUntil: t + seconds * 1000,
      };
    }
    return {
      status: 200,
      headers: h,
      body: JSON.stringify({
        id: `msg_${served}`,
        type: 'message',
        role: 'assistant',
        model: 'claude-sonnet-4-5',
        content: [{ type: 'text', text: 'ok' }],
        stop_reason: 'end_turn',
        stop_sequence: null,
        usage: { input_tokens: usage.input, output_tokens: usage.output },
      }),
      blockedUntil,
    };
  };

  const generic = (t: number, path: string): Answer => {
    if (windowStart < 0 || t >= windowStart + options.windowMs) {
      windowStart = t;
      count = 0;
    }
    const limited = options.always429 === true || count >= options.limit;
    if (!limited) count++;
    served++;
    if (options.always429 === true) {
      return {
        status: 429,
        headers: {},
        body: '{"title":"Too Many Requests","status":429}',
        blockedUntil: undefined,
      };
    }
    if (path.startsWith('/missing')) {
      return {
        status: 404,
        headers: {},
        body: '{"title":"Not Found","status":404}',
        blockedUntil: undefined,
      };
    }
    const reset = windowStart + options.windowMs;
    const remaining = options.limit - count;
    const seconds = Math.ceil((reset - t) / 1000);
    const headers = {
      'content-type': 'application/json',
      'ratelimit-policy': `"default";q=${options.limit};w=${Math.ceil(options.windowMs / 1000)}`,
      ratelimit: `"default";r=${limited ? 0 : remaining};t=${seconds}`,
    };
    if (limited) {
      return {
        status: 429,
        headers: { ...headers, 'retry-after': String(seconds) },
        body: '{"title":"Too Many Requests","status":429}',
        blockedUntil: reset,
      };
    }
    return {
      status: 200,
      headers,
      body: JSON.stringify({ ok: true, n: served }),
      blockedUntil: remaining === 0 ? reset : undefined,
    };
  };

  const stripe = (t: number): Answer => {
    if (windowStart < 0 || t >= windowStart + options.windowMs) {
      windowStart = t;
      count = 0;
    }
    const limited = options.always429 === true || count >= options.limit;
    if (!limited) count++;
    served++;
    const headers = { 'content-type': 'application/json', 'request-id': `req_${served}` };
    if (limited) {
      return {
        status: 429,
        headers: { ...headers, 'stripe-should-retry': 'true' },
        body: JSON.stringify({
          error: {
            code: 'rate_limit',
            doc_url: 'https://stripe.com/docs/error-codes/rate-limit',
            message:
              'Request rate limit exceeded. You can learn more about rate limits here https://stripe.com/docs/rate-limits.',
            type: 'invalid_request_error',
          },
        }),
        blockedUntil: undefined,
      };
    }
    return {
      status: 200,
      headers,
      body: JSON.stringify({ id: `cus_${served}`, object: 'customer', email: null, livemode: false }),
      blockedUntil: undefined,
    };
  };

  const server: Server = createServer((req, res) => {
    const at = now();
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const answer =
        kind === 'stripe' ? stripe(at) : kind === 'generic' ? generic(at, req.url ?? '/') : bucket(at);
      const header = (name: string) => {
        const v = req.headers[name];
        return typeof v === 'string' ? v : undefined;
      };
      const sent = header('x-sent-at');
      log.push({
        at,
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        status: answer.status,
        blockedUntil: answer.blockedUntil,
        call: header('x-call'),
        sentAt: sent === undefined ? undefined : Number(sent),
        sdkRetry: header('x-stainless-retry-count'),
        body: Buffer.concat(chunks).toString('utf8'),
      });
      res.writeHead(answer.status, answer.headers).end(answer.body);
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    log,
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
