/**
 * A local HTTP server (loopback, port 0) that plays rate-limited providers with their
 * real header shapes, for end-to-end tests of observe() and wrapFetch(). Reusable from
 * other tests and processes: start it, point clients at `urlFor(provider)`, read `log`.
 *
 *   const server = await startFakeProvider({ providers: { openai: { limit: 5, windowMs: 1000 } } });
 *   const res = await fetch(server.urlFor('openai', '/v1/chat'));
 *   server.log        // every request: arrival time (epoch ms), provider, status, ...
 *   await server.stop();
 *
 * Each provider keeps its own budget (a fixed window of `windowMs` that opens at the first
 * request after the previous window closed; Shopify's leaky bucket; for OpenAI and
 * Anthropic, a token bucket of `limit` refilled continuously over `windowMs`, whose reset
 * headers say when it is full again, as their documentation describes) and answers the request that exceeds it the way the
 * real provider does. The first request that spends the last unit is answered normally,
 * with its headers showing 0 remaining, as real providers do.
 *
 * Requests may carry an `x-test-tag` header; it is copied into the log entry (`tag`).
 *
 * For a server in another process: `GET /__log` returns the log as JSON, `POST /__reset`
 * clears it and every budget, `POST /__configure/<provider>` with a JSON body of
 * `ProviderBehaviour` fields changes one provider (control requests are not logged). Log times are epoch ms
 * from an anchored wall clock (wall-clock.ts), comparable across processes.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { anchoredWallClock } from './wall-clock.js';

export type ProviderName =
  /** GitHub primary limit: x-ratelimit-remaining / x-ratelimit-reset (epoch seconds); 403 or 429 when spent. */
  | 'github-primary'
  /** GitHub secondary limit: 403 (or 429) with retry-after (seconds), remaining still above 0. */
  | 'github-secondary'
  /** OpenAI: x-ratelimit-remaining-requests|tokens with x-ratelimit-reset-* Go durations; 429. */
  | 'openai'
  /** Anthropic: anthropic-ratelimit-requests-* with RFC 3339 resets; 429 with retry-after. */
  | 'anthropic'
  /** Discord: X-RateLimit-Remaining / -Reset (epoch s, fractional) / -Reset-After; 429 with Retry-After. */
  | 'discord'
  /** Shopify REST: leaky bucket (capacity limit, leaks limit/20 per second), X-Shopify-Shop-Api-Call-Limit; 429 with Retry-After "2.0". */
  | 'shopify'
  /** Stripe: a bare 429 with a JSON error and no rate-limit header. */
  | 'stripe'
  /** IETF draft 08+: RateLimit-Policy "default";q=..;w=.. and RateLimit "default";r=..;t=..; 429. */
  | 'ietf'
  /** IETF drafts 00-06: RateLimit-Limit / RateLimit-Remaining / RateLimit-Reset (delta seconds); 429. */
  | 'ietf-legacy'
  /** HubSpot: X-HubSpot-RateLimit-Max / -Remaining / -Interval-Milliseconds; 429 with a JSON policyName. */
  | 'hubspot';

export const PROVIDERS: readonly ProviderName[] = [
  'github-primary',
  'github-secondary',
  'openai',
  'anthropic',
  'discord',
  'shopify',
  'stripe',
  'ietf',
  'ietf-legacy',
  'hubspot',
];

export interface ProviderBehaviour {
  /** Requests per window (Shopify: bucket capacity). */
  limit: number;
  /** Window length in ms (opens at the first request after the last window closed). Shopify ignores it: its bucket leaks limit/20 per second. */
  windowMs: number;
  /** Status of a limited response, where the provider has a choice (GitHub: 403 or 429). */
  limitedStatus?: number;
  /** Latency added to every response, ms. */
  latencyMs?: number;
}

const DEFAULTS: Record<ProviderName, ProviderBehaviour> = {
  'github-primary': { limit: 5, windowMs: 1000, limitedStatus: 429 },
  'github-secondary': { limit: 5, windowMs: 1000, limitedStatus: 403 },
  openai: { limit: 5, windowMs: 500 },
  anthropic: { limit: 5, windowMs: 1000 },
  discord: { limit: 5, windowMs: 500 },
  shopify: { limit: 200, windowMs: 0 },
  stripe: { limit: 5, windowMs: 500 },
  ietf: { limit: 5, windowMs: 1000 },
  'ietf-legacy': { limit: 5, windowMs: 1000 },
  hubspot: { limit: 5, windowMs: 500 },
};

export interface LoggedRequest {
  /** Arrival time, epoch ms with sub-millisecond precision (comparable across processes on one host). */
  readonly at: number;
  readonly provider: ProviderName | undefined;
  readonly method: string;
  readonly path: string;
  readonly status: number;
  /** The request exceeded the budget and got the provider's limited answer. */
  readonly limited: boolean;
  /** The response told the client to wait (limited, or 0 remaining): until when, server clock (epoch ms). */
  readonly blockedUntil: number | undefined;
  /** The `x-test-tag` request header, if any. */
  readonly tag: string | undefined;
  /** The request body as text. */
  readonly body: string;
  /** The response headers sent. */
  readonly headers: Readonly<Record<string, string>>;
}

export interface FakeProvider {
  /** Base URL, `http://127.0.0.1:<port>`. */
  readonly url: string;
  readonly port: number;
  /** Every request received, in arrival order. */
  readonly log: LoggedRequest[];
  /** URL of a provider's endpoint: `<url>/<provider><path>`. */
  urlFor(provider: ProviderName, path?: string): string;
  /** Changes a provider's behaviour (and resets its budget). */
  configure(provider: ProviderName, behaviour: Partial<ProviderBehaviour>): void;
  /** Clears the log and every budget. */
  reset(): void;
  /** Requests of one provider. */
  requests(provider: ProviderName): LoggedRequest[];
  /** The first response of a provider that told the client to wait, if any. */
  firstSignal(provider: ProviderName): LoggedRequest | undefined;
  stop(): Promise<void>;
}

export interface FakeProviderOptions {
  providers?: Partial<Record<ProviderName, Partial<ProviderBehaviour>>>;
  /** Server clock (epoch ms); default: performance-based wall clock. */
  now?: () => number;
}

let anchored: (() => number) | undefined;
const wallClock = (): number => {
  if (anchored === undefined) anchored = anchoredWallClock();
  return anchored();
};

interface Budget {
  /** Start of the current window (server clock, epoch ms); -1 before the first request. */
  window: number;
  count: number;
  /** Shopify bucket level and when it was last computed. */
  level: number;
  levelAt: number;
  /** OpenAI/Anthropic token bucket: tokens left (fractional) and when they were last computed; -1 before the first request. */
  tokens: number;
  tokensAt: number;
}

/** A Go duration as OpenAI prints it: `850ms`, `1.2s`, `6m0s`, `1h2m3.5s`. */
export function formatGoDuration(ms: number): string {
  const total = Math.max(0, Math.ceil(ms));
  if (total < 1000) return `${total}ms`;
  const h = Math.floor(total / 3_600_000);
  const m = Math.floor((total % 3_600_000) / 60_000);
  const s = (total % 60_000) / 1000;
  const sec = `${Number.isInteger(s) ? s : s.toFixed(3).replace(/0+$/, '')}s`;
  if (h > 0) return `${h}h${m}m${sec}`;
  if (m > 0) return `${m}m${sec}`;
  return sec;
}

/** Starts the server on 127.0.0.1 with an ephemeral port. */
export async function startFakeProvider(options: FakeProviderOptions = {}): Promise<FakeProvider> {
  const now = options.now ?? wallClock;
  const behaviours = new Map<ProviderName, ProviderBehaviour>();
  for (const p of PROVIDERS) behaviours.set(p, { ...DEFAULTS[p], ...options.providers?.[p] });
  const budgets = new Map<ProviderName, Budget>();
  const log: LoggedRequest[] = [];

  const budget = (p: ProviderName): Budget => {
    let b = budgets.get(p);
    if (!b) {
      b = { window: -1, count: 0, level: 0, levelAt: now(), tokens: 0, tokensAt: -1 };
      budgets.set(p, b);
    }
    return b;
  };

  const handle = (req: IncomingMessage, res: ServerResponse, body: string, at: number) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    // Control endpoints, for tests that run the server in another process.
    if (url.pathname === '/__log') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(log));
      return;
    }
    if (url.pathname === '/__reset' && req.method === 'POST') {
      log.length = 0;
      budgets.clear();
      res.writeHead(204).end();
      return;
    }
    const configure = /^\/__configure\/([a-z-]+)$/.exec(url.pathname);
    if (configure && req.method === 'POST') {
      const provider = configure[1] as ProviderName;
      if (!behaviours.has(provider)) {
        res.writeHead(404).end();
        return;
      }
      behaviours.set(provider, { ...behaviours.get(provider)!, ...(JSON.parse(body || '{}') as object) });
      budgets.delete(provider);
      res.writeHead(204).end();
      return;
    }
    const name = url.pathname.split('/')[1] as ProviderName;
    const behaviour = behaviours.get(name);
    const tag = typeof req.headers['x-test-tag'] === 'string' ? req.headers['x-test-tag'] : undefined;
    if (!behaviour) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('unknown provider');
      log.push({
        at,
        provider: undefined,
        method: req.method ?? 'GET',
        path: url.pathname,
        status: 404,
        limited: false,
        blockedUntil: undefined,
        tag,
        body,
        headers: {},
      });
      return;
    }
    const answer = play(name, behaviour, budget(name), at);
    const send = () => {
      res.writeHead(answer.status, answer.headers).end(answer.body);
    };
    log.push({
      at,
      provider: name,
      method: req.method ?? 'GET',
      path: url.pathname,
      status: answer.status,
      limited: answer.limited,
      blockedUntil: answer.blockedUntil,
      tag,
      body,
      headers: answer.headers,
    });
    if (behaviour.latencyMs) setTimeout(send, behaviour.latencyMs);
    else send();
  };

  const server: Server = createServer((req, res) => {
    const at = now();
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => handle(req, res, Buffer.concat(chunks).toString('utf8'), at));
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const base = `http://127.0.0.1:${port}`;

  return {
    url: base,
    port,
    log,
    urlFor: (provider, path = '/') => `${base}/${provider}${path.startsWith('/') ? path : `/${path}`}`,
    configure(provider, behaviour) {
      behaviours.set(provider, { ...behaviours.get(provider)!, ...behaviour });
      budgets.delete(provider);
    },
    reset() {
      log.length = 0;
      budgets.clear();
    },
    requests: (provider) => log.filter((r) => r.provider === provider),
    firstSignal: (provider) => log.find((r) => r.provider === provider && r.blockedUntil !== undefined),
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Stops a server started by startFakeProvider. */
export function stopFakeProvider(server: FakeProvider): Promise<void> {
  return server.stop();
}

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
  limited: boolean;
  blockedUntil: number | undefined;
}

/** Decides one request against a provider's budget and shapes the answer like the provider. */
function play(name: ProviderName, b: ProviderBehaviour, state: Budget, now: number): Answer {
  if (name === 'shopify') return shopify(b, state, now);
  if (name === 'openai' || name === 'anthropic') return tokenBucket(name, b, state, now);
  // A fixed window that opens at the first request after the previous one closed (as
  // GitHub's hourly window does), so tests do not depend on where wall-clock boundaries fall.
  if (state.window < 0 || now >= state.window + b.windowMs) {
    state.window = now;
    state.count = 0;
  }
  const reset = state.window + b.windowMs;
  const limited = state.count >= b.limit;
  if (!limited) state.count++;
  const remaining = Math.max(0, b.limit - state.count);
  const untilReset = reset - now;
  const json = { 'content-type': 'application/json' };
  const ok = (headers: Record<string, string>, blocked = remaining === 0): Answer => ({
    status: 200,
    headers: { ...json, ...headers },
    body: '{"ok":true}',
    limited: false,
    blockedUntil: blocked ? reset : undefined,
  });
  const no = (status: number, headers: Record<string, string>, body: string): Answer => ({
    status,
    headers: { ...json, ...headers },
    body,
    limited: true,
    blockedUntil: reset,
  });

  switch (name) {
    case 'github-primary': {
      const h = {
        'x-ratelimit-limit': String(b.limit),
        'x-ratelimit-remaining': String(remaining),
        'x-ratelimit-used': String(state.count),
        'x-ratelimit-reset': String(Math.ceil(reset / 1000)),
        'x-ratelimit-resource': 'core',
      };
      if (!limited) return ok(h);
      return no(
        b.limitedStatus ?? 403,
        h,
        '{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"}',
      );
    }
    case 'github-secondary': {
      // The primary budget is far from spent; the secondary limit answers with retry-after only.
      const h = {
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': '4900',
        'x-ratelimit-used': '100',
        'x-ratelimit-reset': String(Math.ceil(now / 1000) + 3600),
        'x-ratelimit-resource': 'core',
      };
      if (!limited) return ok(h, false);
      return no(
        b.limitedStatus ?? 403,
        { ...h, 'retry-after': String(Math.ceil(untilReset / 1000)) },
        '{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}',
      );
    }
    case 'discord': {
      const h = {
        'x-ratelimit-limit': String(b.limit),
        'x-ratelimit-remaining': String(remaining),
        'x-ratelimit-reset': (reset / 1000).toFixed(3),
        'x-ratelimit-reset-after': (Math.ceil(untilReset) / 1000).toFixed(3),
        'x-ratelimit-bucket': 'abcd1234',
      };
      if (!limited) return ok(h);
      const after = Math.ceil(untilReset) / 1000;
      return no(
        429,
        { ...h, 'retry-after': String(Math.ceil(after)), 'x-ratelimit-scope': 'user' },
        JSON.stringify({ message: 'You are being rate limited.', retry_after: after, global: false }),
      );
    }
    case 'stripe': {
      if (!limited) return ok({ 'request-id': `req_${state.count}` }, false);
      return no(
        429,
        { 'request-id': 'req_limited', 'stripe-should-retry': 'true' },
        '{"error":{"message":"Too many requests hit the API too quickly.","type":"invalid_request_error","code":"rate_limit"}}',
      );
    }
    case 'ietf': {
      const w = Math.ceil(b.windowMs / 1000);
      const h = {
        'ratelimit-policy': `"default";q=${b.limit};w=${w}`,
        ratelimit: `"default";r=${remaining};t=${Math.ceil(untilReset / 1000)}`,
      };
      if (!limited) return ok(h);
      return no(429, h, '{"title":"Too Many Requests"}');
    }
    case 'ietf-legacy': {
      const h = {
        'ratelimit-limit': String(b.limit),
        'ratelimit-remaining': String(remaining),
        'ratelimit-reset': String(Math.ceil(untilReset / 1000)),
      };
      if (!limited) return ok(h);
      return no(429, h, '{"title":"Too Many Requests"}');
    }
    case 'hubspot': {
      const h = {
        'x-hubspot-ratelimit-daily': '250000',
        'x-hubspot-ratelimit-daily-remaining': '249000',
        'x-hubspot-ratelimit-interval-milliseconds': String(b.windowMs),
        'x-hubspot-ratelimit-max': String(b.limit),
        'x-hubspot-ratelimit-remaining': String(remaining),
      };
      if (!limited) return ok(h);
      return no(
        429,
        h,
        '{"status":"error","message":"You have reached your ten_secondly_rolling limit.","errorType":"RATE_LIMIT","policyName":"TEN_SECONDLY_ROLLING"}',
      );
    }
  }
  throw new Error(`unknown provider ${String(name)}`);
}

/** Shopify's leaky bucket: capacity `limit`, leaking limit/20 requests per second (40 → 2/s, 400 → 20/s). */
/**
 * OpenAI and Anthropic: a bucket of `limit` requests refilled continuously (limit per
 * windowMs); the reset headers give the time until it is full again. A request takes one
 * whole token; without one it gets a 429.
 */
function tokenBucket(name: 'openai' | 'anthropic', b: ProviderBehaviour, state: Budget, now: number): Answer {
  const perMs = b.limit / b.windowMs;
  state.tokens =
    state.tokensAt < 0 ? b.limit : Math.min(b.limit, state.tokens + (now - state.tokensAt) * perMs);
  state.tokensAt = now;
  const limited = state.tokens < 1;
  if (!limited) state.tokens -= 1;
  const remaining = Math.floor(state.tokens);
  const untilFull = (b.limit - state.tokens) / perMs;
  const nextToken = now + (1 - state.tokens) / perMs;
  const json = { 'content-type': 'application/json' };
  const h: Record<string, string> =
    name === 'openai'
      ? {
          'x-ratelimit-limit-requests': String(b.limit),
          'x-ratelimit-limit-tokens': '150000',
          'x-ratelimit-remaining-requests': String(remaining),
          'x-ratelimit-remaining-tokens': '149984',
          'x-ratelimit-reset-requests': formatGoDuration(untilFull),
          'x-ratelimit-reset-tokens': '6ms',
        }
      : {
          'anthropic-ratelimit-requests-limit': String(b.limit),
          'anthropic-ratelimit-requests-remaining': String(remaining),
          'anthropic-ratelimit-requests-reset': new Date(now + untilFull).toISOString(),
          'anthropic-ratelimit-tokens-limit': '40000',
          'anthropic-ratelimit-tokens-remaining': '39000',
          'anthropic-ratelimit-tokens-reset': new Date(now + 1).toISOString(),
        };
  if (!limited) {
    return {
      status: 200,
      headers: { ...json, ...h },
      body: '{"ok":true}',
      limited: false,
      blockedUntil: remaining === 0 ? nextToken : undefined,
    };
  }
  const body =
    name === 'openai'
      ? '{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}'
      : '{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit."}}';
  const headers =
    name === 'anthropic' ? { ...h, 'retry-after': String(Math.ceil((nextToken - now) / 1000)) } : h;
  return { status: 429, headers: { ...json, ...headers }, body, limited: true, blockedUntil: nextToken };
}

function shopify(b: ProviderBehaviour, state: Budget, now: number): Answer {
  const leakPerMs = b.limit / 20 / 1000;
  state.level = Math.max(0, state.level - (now - state.levelAt) * leakPerMs);
  state.levelAt = now;
  const slotMs = 1 / leakPerMs;
  if (state.level + 1 > b.limit + 1e-9) {
    const wait = (state.level + 1 - b.limit) * slotMs;
    return {
      status: 429,
      headers: {
        'content-type': 'application/json',
        'x-shopify-shop-api-call-limit': `${Math.ceil(state.level - 1e-9)}/${b.limit}`,
        'retry-after': (Math.ceil(wait / 100) / 10).toFixed(1),
      },
      body: '{"errors":"Exceeded 2 calls per second for api client. Reduce request rates to resume uninterrupted service."}',
      limited: true,
      blockedUntil: now + wait,
    };
  }
  state.level += 1;
  const used = Math.ceil(state.level - 1e-9);
  return {
    status: 200,
    headers: { 'content-type': 'application/json', 'x-shopify-shop-api-call-limit': `${used}/${b.limit}` },
    body: '{"ok":true}',
    limited: false,
    blockedUntil: used >= b.limit ? now + (state.level + 1 - b.limit) * slotMs : undefined,
  };
}

/**
 * Standalone: `npx tsx test/helpers/fake-provider.ts` starts a server and prints its URL
 * on stdout (one line), for multi-process tests and demos. SIGTERM/SIGINT stop it.
 */
if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  // FAKE_PROVIDERS='{"openai":{"limit":10,"windowMs":1000}}' configures providers at start.
  const providers = process.env.FAKE_PROVIDERS ? JSON.parse(process.env.FAKE_PROVIDERS) : undefined;
  const server = await startFakeProvider({ providers });
  process.stdout.write(`${server.url}\n`);
  const stop = () => {
    void server.stop().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
