/**
 * A small local HTTP "provider" for the demo: it listens on loopback, enforces a quota
 * the way a real API does, and answers 429 beyond it.
 *
 * Quota: at most `perSecond` requests in any 1 s and `perWindow` in any `windowMs`,
 * counted on arrival. Like every real provider, it cannot tell a request that was sent
 * on time from one that spent a few extra milliseconds in the network stack, so it
 * allows `graceMs` of arrival jitter: a request counts against the last
 * (1 s − grace) and (window − grace). A client whose *starts* respect the quota is never
 * refused as long as transit times vary by less than the grace.
 *
 * Secondary limit: once `induce.afterAccepted` requests have been accepted, the provider
 * answers every request with 429 and `Retry-After` for `induce.retryAfterSeconds`, the
 * way GitHub's secondary rate limits do. That one burst of 429s is expected; a 429 from
 * the quota itself is not.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ProviderOptions {
  /** Requests allowed in any 1 s. */
  perSecond: number;
  /** Requests allowed in any `windowMs`. */
  perWindow: number;
  /** The long window, ms (default 10 000). */
  windowMs?: number;
  /** Arrival jitter tolerated, ms (default 50). */
  graceMs?: number;
  /** Processing time before each answer, ms (default 120). Real APIs take time to answer. */
  latencyMs?: number;
  /** The induced secondary limit, or undefined for none. */
  induce?: { afterAccepted: number; retryAfterSeconds: number } | undefined;
  /** Clock in ms (default performance.now). */
  now?: () => number;
}

/** What happened to one request, on the provider's clock. */
export type Outcome = 'ok' | 'quota' | 'secondary';

export interface Arrival {
  /** Provider clock, ms. */
  readonly at: number;
  readonly outcome: Outcome;
}

export interface ProviderCounts {
  accepted: number;
  /** 429s because the quota was exceeded: a correctly configured valve causes none. */
  quota429: number;
  /** 429s from the induced secondary limit. */
  secondary429: number;
  /** Provider clock (ms) when the secondary limit started, or null. */
  secondaryFrom: number | null;
  /** Provider clock (ms) when the secondary limit ends, or null. */
  secondaryUntil: number | null;
}

export interface Provider {
  /** Base URL, e.g. http://127.0.0.1:40123/ */
  readonly url: string;
  readonly counts: Readonly<ProviderCounts>;
  /** Every request, in arrival order. */
  readonly arrivals: readonly Arrival[];
  close(): Promise<void>;
}

/** Timestamps of accepted requests, oldest first; counts those inside a trailing span. */
class SlidingLog {
  private readonly times: number[] = [];
  private head = 0;

  constructor(private readonly spanMs: number) {}

  /** Number of entries in (now − span, now]. Drops older ones. */
  count(now: number): number {
    const from = now - this.spanMs;
    while (this.head < this.times.length && this.times[this.head]! <= from) this.head++;
    if (this.head > 1024 && this.head * 2 > this.times.length) {
      this.times.splice(0, this.head);
      this.head = 0;
    }
    return this.times.length - this.head;
  }

  /** Ms until the oldest counted entry leaves the span. */
  waitMs(now: number): number {
    const oldest = this.times[this.head];
    return oldest === undefined ? 0 : Math.max(0, oldest + this.spanMs - now);
  }

  add(now: number): void {
    this.times.push(now);
  }
}

export async function startProvider(options: ProviderOptions): Promise<Provider> {
  const windowMs = options.windowMs ?? 10_000;
  const graceMs = options.graceMs ?? 50;
  const latencyMs = options.latencyMs ?? 120;
  const now = options.now ?? (() => performance.now());
  const shortLog = new SlidingLog(1000 - graceMs);
  const longLog = new SlidingLog(windowMs - graceMs);
  const arrivals: Arrival[] = [];
  const counts: ProviderCounts = {
    accepted: 0,
    quota429: 0,
    secondary429: 0,
    secondaryFrom: null,
    secondaryUntil: null,
  };

  const decide = (at: number): { status: number; body: unknown; headers: Record<string, string> } => {
    const induce = options.induce;
    if (induce && counts.secondaryFrom === null && counts.accepted >= induce.afterAccepted) {
      counts.secondaryFrom = at;
      counts.secondaryUntil = at + induce.retryAfterSeconds * 1000;
    }
    if (counts.secondaryUntil !== null && at < counts.secondaryUntil) {
      counts.secondary429++;
      arrivals.push({ at, outcome: 'secondary' });
      const seconds = Math.max(1, Math.ceil((counts.secondaryUntil - at) / 1000));
      return {
        status: 429,
        headers: { 'retry-after': String(seconds) },
        body: { message: 'You have exceeded a secondary rate limit. Please wait a few minutes.' },
      };
    }
    const inSecond = shortLog.count(at);
    const inWindow = longLog.count(at);
    if (inSecond >= options.perSecond || inWindow >= options.perWindow) {
      counts.quota429++;
      arrivals.push({ at, outcome: 'quota' });
      const wait = Math.max(
        inSecond >= options.perSecond ? shortLog.waitMs(at) : 0,
        inWindow >= options.perWindow ? longLog.waitMs(at) : 0,
      );
      return {
        status: 429,
        headers: { 'retry-after': String(Math.max(1, Math.ceil(wait / 1000))) },
        body: { message: 'API rate limit exceeded.' },
      };
    }
    shortLog.add(at);
    longLog.add(at);
    counts.accepted++;
    arrivals.push({ at, outcome: 'ok' });
    return { status: 200, headers: {}, body: { ok: true, n: counts.accepted } };
  };

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const answer = decide(now());
    // Drain any request body, then answer after the processing latency.
    req.resume();
    const timer = setTimeout(() => {
      res.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers });
      res.end(JSON.stringify(answer.body));
    }, latencyMs);
    res.on('close', () => clearTimeout(timer));
  });
  server.keepAliveTimeout = 10_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/`,
    counts,
    arrivals,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
