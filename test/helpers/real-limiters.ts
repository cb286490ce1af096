/**
 * Providers played by real server-side rate limiters from npm, on loopback (port 0), for tests and
 * benchmarks that measure what share of a provider's quota a client-side limiter gets:
 *
 * - `express`: express 5 + express-rate-limit (its default in-memory store: a fixed window per client
 *   that opens at the client's first request), with the standard `RateLimit`/`RateLimit-Policy`
 *   fields (draft 8 by default) and the legacy `X-RateLimit-*` headers, as its users set them.
 * - `fastify`: fastify 5 + @fastify/rate-limit (its local store, a window per client from the first
 *   request), with its default `x-ratelimit-*` headers and `retry-after` on 429.
 * - `sliding-log`: a plain node:http server that allows `limit` requests in any `windowMs` (an
 *   exact log of arrivals) and answers 429 with `Retry-After` (whole seconds, rounded up) beyond.
 * - `aligned`: a plain node:http server with fixed windows aligned on the epoch (`limit` per
 *   `[k × windowMs, (k + 1) × windowMs)`, as "N per clock minute"), GitHub's headers
 *   (`X-RateLimit-Limit`, `-Remaining`, `-Reset` in epoch seconds) and `Retry-After` on 429.
 * - `token-bucket`: a plain node:http server with a bucket of `burst` (default `limit`) refilling
 *   `limit` per `windowMs`, OpenAI's headers (`x-ratelimit-limit-requests`, `-remaining-requests`,
 *   `-reset-requests`: the time until the bucket is full, as a Go duration) on every answer.
 * - `gcra`: a plain node:http server running GCRA (emission interval `windowMs / limit`, burst
 *   `burst`, default 1), answering 429 with `Retry-After` (whole seconds, rounded up) only.
 * The last three are written here (the sliding log too): npm has no server-side limiter of those
 * styles that sends headers as their providers do.
 *
 * Every server logs each request (arrival on `performance.timeOrigin + performance.now()`, status).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export type RealLimiterKind = 'express' | 'fastify' | 'sliding-log' | 'aligned' | 'token-bucket' | 'gcra';

export interface RealLimiterOptions {
  readonly limit: number;
  readonly windowMs: number;
  /** express only: the draft of the standard headers (default 'draft-8'). */
  readonly standardHeaders?: 'draft-6' | 'draft-7' | 'draft-8';
  /** token-bucket (default `limit`) and gcra (default 1): the burst. */
  readonly burst?: number;
}

export interface LoggedRequest {
  /** Epoch ms of the request's arrival. */
  readonly t: number;
  readonly status: number;
  /** The request's `x-send` header, when it sent one (a client's send order, for diagnostics). */
  readonly send?: string;
  /** The remaining count the provider answered, when it sent one (express, fastify). */
  readonly remaining?: number;
}

/** The diagnostic fields of a request and its answer: its `x-send` header, the remaining count answered. */
function tagOf(
  headers: import('node:http').IncomingHttpHeaders,
  remaining: unknown,
): { send?: string; remaining?: number } {
  const send = headers['x-send'];
  const rem = Number(remaining);
  return {
    ...(typeof send === 'string' ? { send } : {}),
    ...(remaining !== undefined && Number.isFinite(rem) ? { remaining: rem } : {}),
  };
}

export interface RealLimiter {
  readonly kind: RealLimiterKind;
  readonly url: string;
  readonly log: LoggedRequest[];
  stop(): Promise<void>;
}

const nowMs = (): number => performance.timeOrigin + performance.now();

function listen(server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve(`http://127.0.0.1:${port}`);
    });
  });
}

function close(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections?.();
    server.close(() => resolve());
  });
}

async function startExpress(o: RealLimiterOptions, log: LoggedRequest[]): Promise<RealLimiter> {
  const { default: express } = await import('express');
  const { rateLimit } = await import('express-rate-limit');
  const app = express();
  app.use((req, res, next) => {
    const t = nowMs();
    res.on('finish', () =>
      log.push({ t, status: res.statusCode, ...tagOf(req.headers, res.getHeader('x-ratelimit-remaining')) }),
    );
    next();
  });
  app.use(
    rateLimit({
      windowMs: o.windowMs,
      limit: o.limit,
      standardHeaders: o.standardHeaders ?? 'draft-8',
      legacyHeaders: true,
      // Every request comes from 127.0.0.1: one client, one budget, as one credential would be.
      keyGenerator: () => 'credential',
    }),
  );
  app.get('/{*path}', (_req, res) => {
    res.json({ ok: true });
  });
  const server = createServer(app);
  const url = await listen(server);
  return { kind: 'express', url, log, stop: () => close(server) };
}

async function startFastify(o: RealLimiterOptions, log: LoggedRequest[]): Promise<RealLimiter> {
  const { default: Fastify } = await import('fastify');
  const { default: rateLimit } = await import('@fastify/rate-limit');
  const app = Fastify({ logger: false });
  app.addHook('onRequest', async (request) => {
    (request as unknown as { arrival: number }).arrival = nowMs();
  });
  app.addHook('onResponse', async (request, reply) => {
    log.push({
      t: (request as unknown as { arrival: number }).arrival,
      status: reply.statusCode,
      ...tagOf(request.headers, reply.getHeader('x-ratelimit-remaining')),
    });
  });
  await app.register(rateLimit, {
    max: o.limit,
    timeWindow: o.windowMs,
    keyGenerator: () => 'credential',
  });
  app.get('/*', async () => ({ ok: true }));
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    kind: 'fastify',
    url,
    log,
    stop: async () => {
      await app.close();
    },
  };
}

async function startSlidingLog(o: RealLimiterOptions, log: LoggedRequest[]): Promise<RealLimiter> {
  // Arrivals admitted in the last windowMs, oldest first (a ring would do; the runs are small).
  const admitted: number[] = [];
  let head = 0;
  const server = createServer((_req, res) => {
    const t = nowMs();
    while (head < admitted.length && admitted[head]! <= t - o.windowMs) head++;
    const used = admitted.length - head;
    if (used < o.limit) {
      admitted.push(t);
      log.push({ t, status: 200 });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
      return;
    }
    const retryMs = admitted[head]! + o.windowMs - t;
    log.push({ t, status: 429 });
    res.writeHead(429, {
      'content-type': 'application/json',
      'retry-after': String(Math.ceil(retryMs / 1000)),
    });
    res.end('{"error":"rate limited"}');
  });
  const url = await listen(server);
  return { kind: 'sliding-log', url, log, stop: () => close(server) };
}

function answer(
  res: import('node:http').ServerResponse,
  status: number,
  headers: Record<string, string>,
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(status === 200 ? '{"ok":true}' : '{"error":"rate limited"}');
}

async function startAligned(o: RealLimiterOptions, log: LoggedRequest[]): Promise<RealLimiter> {
  let window = -1;
  let used = 0;
  const server = createServer((_req, res) => {
    const t = nowMs();
    const k = Math.floor(t / o.windowMs);
    if (k !== window) {
      window = k;
      used = 0;
    }
    const resetAt = (k + 1) * o.windowMs;
    const ok = used < o.limit;
    if (ok) used++;
    log.push({ t, status: ok ? 200 : 429 });
    const headers: Record<string, string> = {
      'x-ratelimit-limit': String(o.limit),
      'x-ratelimit-remaining': String(o.limit - used),
      'x-ratelimit-reset': String(Math.ceil(resetAt / 1000)),
    };
    if (!ok) headers['retry-after'] = String(Math.ceil((resetAt - t) / 1000));
    answer(res, ok ? 200 : 429, headers);
  });
  const url = await listen(server);
  return { kind: 'aligned', url, log, stop: () => close(server) };
}

/** A Go duration as OpenAI writes it: "1m2.5s", "350ms", "0s". */
function goDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  const m = Math.floor(ms / 60_000);
  const rest = Math.round((ms - m * 60_000) / 10) / 100;
  return `${m > 0 ? `${m}m` : ''}${rest}s`;
}

async function startTokenBucket(o: RealLimiterOptions, log: LoggedRequest[]): Promise<RealLimiter> {
  const size = o.burst ?? o.limit;
  const perMs = o.limit / o.windowMs;
  let tokens = size;
  let at = nowMs();
  const server = createServer((_req, res) => {
    const t = nowMs();
    tokens = Math.min(size, tokens + (t - at) * perMs);
    at = t;
    const ok = tokens >= 1;
    if (ok) tokens -= 1;
    log.push({ t, status: ok ? 200 : 429 });
    answer(res, ok ? 200 : 429, {
      'x-ratelimit-limit-requests': String(size),
      'x-ratelimit-remaining-requests': String(Math.floor(tokens)),
      'x-ratelimit-reset-requests': goDuration((size - tokens) / perMs),
    });
  });
  const url = await listen(server);
  return { kind: 'token-bucket', url, log, stop: () => close(server) };
}

async function startGcra(o: RealLimiterOptions, log: LoggedRequest[]): Promise<RealLimiter> {
  const emission = o.windowMs / o.limit;
  const tolerance = ((o.burst ?? 1) - 1) * emission;
  let tat = 0;
  const server = createServer((_req, res) => {
    const t = nowMs();
    const next = Math.max(tat, t) + emission;
    const ok = next - t <= tolerance + emission;
    if (ok) tat = next;
    log.push({ t, status: ok ? 200 : 429 });
    if (ok) answer(res, 200, {});
    else answer(res, 429, { 'retry-after': String(Math.ceil((next - t - tolerance - emission) / 1000)) });
  });
  const url = await listen(server);
  return { kind: 'gcra', url, log, stop: () => close(server) };
}

/** Starts one provider played by a real server-side limiter. */
export async function startRealLimiter(
  kind: RealLimiterKind,
  options: RealLimiterOptions,
): Promise<RealLimiter> {
  const log: LoggedRequest[] = [];
  if (kind === 'express') return startExpress(options, log);
  if (kind === 'fastify') return startFastify(options, log);
  if (kind === 'aligned') return startAligned(options, log);
  if (kind === 'token-bucket') return startTokenBucket(options, log);
  if (kind === 'gcra') return startGcra(options, log);
  return startSlidingLog(options, log);
}

/** A provider as quotaShare() needs it: its style and its stated limit. */
export interface QuotaSpec {
  readonly kind: RealLimiterKind;
  readonly limit: number;
  readonly windowMs: number;
  /** token-bucket (default `limit`) and gcra (default 1): the burst. */
  readonly burst?: number;
}

/**
 * The most requests the provider could have allowed from the first request's arrival to the last
 * success's (`spanMs`), whatever the client did: its initial allowance plus its sustained rate
 * over the span, per provider style.
 *
 * - Windows opened by the first request (express, fastify) and the sliding log: `limit` at once,
 *   then `limit` per `windowMs`: `limit + limit × span / windowMs` (at most `limit` per window,
 *   and a span of `k` windows touches at most `k + 1` of them).
 * - Aligned fixed windows: `limit` for each aligned window the span touches (a span can start at
 *   the end of one window and use the next one at once).
 * - Token bucket: the full bucket (`burst`, default `limit`) plus the refill over the span.
 * - GCRA: `burst` (default 1) at once plus one per emission interval over the span.
 */
export function quotaCeiling(spec: QuotaSpec, firstMs: number, lastMs: number): number {
  const span = Math.max(0, lastMs - firstMs);
  const sustained = (spec.limit * span) / spec.windowMs;
  if (spec.kind === 'aligned') {
    return spec.limit * (Math.floor(lastMs / spec.windowMs) - Math.floor(firstMs / spec.windowMs) + 1);
  }
  if (spec.kind === 'token-bucket') return (spec.burst ?? spec.limit) + sustained;
  if (spec.kind === 'gcra') return (spec.burst ?? 1) + sustained;
  return spec.limit + sustained;
}

/**
 * The share of the provider's quota that the successful requests used: successes over the most
 * the provider could have allowed from the first request's arrival to the last success's
 * (quotaCeiling). 100 % is the ceiling: no client can score above it.
 */
export function quotaShare(log: readonly LoggedRequest[], spec: QuotaSpec): number {
  const ok = log.filter((r) => r.status < 400);
  if (ok.length === 0) return 0;
  const first = Math.min(...log.map((r) => r.t));
  const last = Math.max(...ok.map((r) => r.t));
  return ok.length / quotaCeiling(spec, first, last);
}
