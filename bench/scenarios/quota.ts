/**
 * Scenario: the share of a real provider's quota each library gets, and the 429s it causes.
 * The providers are real server-side limiters from npm on loopback (test/helpers/real-limiters.ts):
 * express-rate-limit and @fastify/rate-limit allowing 20 requests per 1 s window (a window per
 * client, opened by its first request), an exact sliding log allowing 200 requests in any 10 s,
 * and (written in that helper) an aligned fixed window, a token bucket with OpenAI's headers and a
 * GCRA server answering only `Retry-After`, each 20 per 1 s.
 * `requests` requests from 10 callers (each awaits its response before the next); every library is
 * configured the natural way for the provider's stated limit:
 *
 * - valve: `wrapFetch` (reads the provider's headers, retries 429s at their position, up to 10
 *   times) on the rule docs/choose-an-algorithm.md recommends for these providers
 *   (`valve-sliding`: a sliding window of the provider's own numbers, plus a 200 ms margin for
 *   arrival jitter against the sliding log, which sends no headers before its 429), and on GCRA
 *   limit per interval, burst 1 (`valve`); `valve-rec` takes the rule docs/choose-an-algorithm.md
 *   recommends for the case's provider style (`recommended`; valve-sliding's when none is named).
 * - Cases `…, 3 processes`: three worker processes with 10 callers each share a private Redis
 *   (valve: redisStore with a subscriber; Bottleneck clustered through ioredis; rate-limiter-flexible
 *   RateLimiterRedis; p-queue has no shared store, so each process takes a third of the limit).
 * - Cases `…, rules 40/1s`: every client configured twice too loose (40 per 1 s against 20 per 1 s).
 * - p-queue `{ intervalCap: limit, interval }`, Bottleneck `{ reservoir: limit, reservoirRefreshAmount:
 *   limit, reservoirRefreshInterval: interval }`, rate-limiter-flexible `{ points: limit, duration }`
 *   waiting `msBeforeNext` when refused. They don't read headers; a 429 is a failed request.
 *
 * Metrics: `quotaPct`, the quota used: successes over the most the provider could have allowed
 * from the first request's arrival to the last success's (span `S`), so 100 % is the ceiling
 * (test/helpers/real-limiters.ts, quotaCeiling): its initial allowance plus its sustained rate
 * over the span, per provider style: `limit × (1 + S / window)` for windows opened by the first
 * request (express, fastify) and the sliding log; `limit` per aligned window the span touches
 * (aligned); `bucket + rate × S` (token bucket); `burst + S / emission interval` (GCRA).
 * `rejected429` (answers 429 the provider sent), `ok` (requests that ended 200), `failed`
 * (requests that did not), `seconds` (first request to last response; with processes, from the fleet's start, Redis and worker startup included).
 * `QUOTA_DEBUG=1` prints when the 429s arrived; `QUOTA_DEBUG=2` also every arrival, valve's
 * pauses, and the provider's order against the send order (each valve attempt carries
 * `x-send: <pid>-<n>@<send time>`; express and fastify log it with the remaining count they
 * answered, printed as `<ms after the first>+<ms from send to arrival>:<pid>-<n>/<remaining>`);
 * `QUOTA_MARGIN_MS=<ms>` overrides the margin; `QUOTA_RULE=<json>` overrides valve-rec's rule.
 */
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import PQueue from 'p-queue';
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterRes } from 'rate-limiter-flexible';
import { quotaShare, type RealLimiterKind, startRealLimiter } from '../../test/helpers/real-limiters.js';
import { emit, nowMs, parseScenarioArgs, round } from '../lib/common.js';
import { startRedis } from '../lib/redis-server.js';
import { loadValve } from '../lib/valve-module.js';

export const peers = ['valve', 'valve-sliding', 'valve-rec', 'p-queue', 'bottleneck', 'rlf-memory'];
export const cases: Record<
  string,
  {
    kind: RealLimiterKind;
    limit: number;
    windowMs: number;
    requests: number;
    /** The limit the clients are configured with, when not the provider's (rules too loose). */
    ruleLimit?: number;
    /** Worker processes sharing one Redis (each with CALLERS callers); one process when absent. */
    processes?: number;
    /**
     * valve-sliding's margin for arrival jitter (ms added to the interval), as the docs
     * recommend for a provider that sends no headers before its 429 (a sliding log).
     */
    marginMs?: number;
    /** The provider's burst (token-bucket, gcra). */
    burst?: number;
    /**
     * `valve-rec`: the rule docs/choose-an-algorithm.md recommends for this provider style
     * (default: valve-sliding's).
     */
    recommended?: Record<string, unknown>;
  }
> = {
  'express 20/1s': { kind: 'express', limit: 20, windowMs: 1000, requests: 200 },
  'fastify 20/1s': { kind: 'fastify', limit: 20, windowMs: 1000, requests: 200 },
  'sliding 200/10s': { kind: 'sliding-log', limit: 200, windowMs: 10_000, requests: 600, marginMs: 200 },
  'express 20/1s, rules 40/1s': { kind: 'express', limit: 20, windowMs: 1000, requests: 200, ruleLimit: 40 },
  'fastify 20/1s, rules 40/1s': { kind: 'fastify', limit: 20, windowMs: 1000, requests: 200, ruleLimit: 40 },
  'express 20/1s, 3 processes': { kind: 'express', limit: 20, windowMs: 1000, requests: 200, processes: 3 },
  'fastify 20/1s, 3 processes': { kind: 'fastify', limit: 20, windowMs: 1000, requests: 200, processes: 3 },
  'sliding 200/10s, 3 processes': {
    kind: 'sliding-log',
    limit: 200,
    windowMs: 10_000,
    requests: 600,
    processes: 3,
    marginMs: 200,
  },
  'express 20/1s, rules 40/1s, 3 processes': {
    kind: 'express',
    limit: 20,
    windowMs: 1000,
    requests: 200,
    ruleLimit: 40,
    processes: 3,
  },
  'fastify 20/1s, rules 40/1s, 3 processes': {
    kind: 'fastify',
    limit: 20,
    windowMs: 1000,
    requests: 200,
    ruleLimit: 40,
    processes: 3,
  },
  'aligned 20/1s': {
    kind: 'aligned',
    limit: 20,
    windowMs: 1000,
    requests: 200,
    recommended: { limit: 20, interval: 1000, algorithm: 'fixed-window' },
  },
  'token-bucket 20/1s': {
    kind: 'token-bucket',
    limit: 20,
    windowMs: 1000,
    burst: 20,
    requests: 200,
    recommended: { limit: 20, interval: 1000, burst: 20 },
  },
  'gcra 20/1s burst 5': {
    kind: 'gcra',
    limit: 20,
    windowMs: 1000,
    burst: 5,
    requests: 200,
    recommended: { limit: 20, interval: 1000, burst: 4 },
  },
  'aligned 20/1s, 3 processes': {
    kind: 'aligned',
    limit: 20,
    windowMs: 1000,
    requests: 200,
    processes: 3,
    recommended: { limit: 20, interval: 1000, algorithm: 'fixed-window' },
  },
  'token-bucket 20/1s, 3 processes': {
    kind: 'token-bucket',
    limit: 20,
    windowMs: 1000,
    burst: 20,
    requests: 200,
    processes: 3,
    recommended: { limit: 20, interval: 1000, burst: 20 },
  },
  'gcra 20/1s burst 5, 3 processes': {
    kind: 'gcra',
    limit: 20,
    windowMs: 1000,
    burst: 5,
    requests: 200,
    processes: 3,
    recommended: { limit: 20, interval: 1000, burst: 4 },
  },
};

const args = parseScenarioArgs();
const CALLERS = 10;
/** Overrides every case's margin (ms), to measure others: QUOTA_MARGIN_MS=0. */
const MARGIN_MS = process.env.QUOTA_MARGIN_MS === undefined ? undefined : Number(process.env.QUOTA_MARGIN_MS);

type Send = (url: string) => Promise<number>;

/** Where the limiters of a fleet share their state. */
interface Shared {
  readonly port: number;
  readonly processes: number;
}

/** The margin a case's valve-sliding rule adds to the interval. */
let marginMs = 0;
/** The case's recommended rule (valve-rec), if it names one. */
let recommended: Record<string, unknown> | undefined;

/** valve's rules for a provider's stated limit: GCRA burst 1 (`valve`) or the sliding window (`valve-sliding`). */
function rulesFor(peer: string, limit: number, windowMs: number): unknown[] {
  if (peer === 'valve') return [{ limit, interval: windowMs }];
  if (peer === 'valve-rec' && recommended !== undefined) return [recommended];
  return [{ limit, interval: windowMs + marginMs, algorithm: 'sliding-window' }];
}

async function limiterFor(
  peer: string,
  limit: number,
  windowMs: number,
  shared?: Shared,
): Promise<{ send: Send; close: () => Promise<void> }> {
  const plain: Send = async (url) => {
    const res = await fetch(url);
    await res.arrayBuffer();
    return res.status;
  };
  const clients: Redis[] = [];
  const redis = (): Redis => {
    const client = new Redis({ port: shared!.port, host: '127.0.0.1' });
    client.on('error', () => {});
    clients.push(client);
    return client;
  };
  const disconnect = (): void => {
    for (const c of clients) c.disconnect();
  };
  if (peer === 'valve' || peer === 'valve-sliding' || peer === 'valve-rec') {
    const valve = (await loadValve()) as unknown as {
      createValve(o: unknown): {
        wrapFetch(f: typeof fetch, o?: unknown): typeof fetch;
        close(): Promise<void>;
      };
      redisStore?: (o: { client: unknown; subscriber?: unknown; prefix?: string }) => unknown;
    };
    const store = shared
      ? valve.redisStore!({ client: redis(), subscriber: redis(), prefix: 'quota' })
      : undefined;
    const v = valve.createValve({
      id: `quota-${peer}`,
      rules: rulesFor(peer, limit, windowMs),
      ...(store ? { store } : {}),
    });
    if (process.env.QUOTA_DEBUG === '2') {
      const t = () => (performance.timeOrigin + performance.now()).toFixed(0);
      (v as unknown as { on(e: string, f: (p: Record<string, unknown>) => void): void }).on('pause', (e) =>
        process.stderr.write(
          `pause ${process.pid} at ${t()} until ${Number(e.until).toFixed(0)} ${e.source} ${e.header} ${e.model}\n`,
        ),
      );
    }
    // QUOTA_DEBUG=2: each attempt carries its send order and time (`x-send: <pid>-<n>@<epoch ms>`), logged by the provider.
    let sent = 0;
    const tagged: typeof fetch = (input, init) =>
      fetch(input, {
        ...init,
        headers: {
          ...(init?.headers as Record<string, string>),
          'x-send': `${process.pid}-${++sent}@${(performance.timeOrigin + performance.now()).toFixed(1)}`,
        },
      });
    const wrapped = v.wrapFetch(process.env.QUOTA_DEBUG === '2' ? tagged : fetch, { retries: 10 });
    return {
      send: async (url) => {
        const res = await wrapped(url);
        await res.arrayBuffer();
        return res.status;
      },
      close: async () => {
        await v.close();
        disconnect();
      },
    };
  }
  if (peer === 'p-queue') {
    // p-queue has no shared store: each process of a fleet takes its share of the limit.
    const cap = shared ? Math.max(1, Math.floor(limit / shared.processes)) : limit;
    const queue = new PQueue({ intervalCap: cap, interval: windowMs });
    return {
      send: (url) => queue.add(() => plain(url)) as Promise<number>,
      close: async () => queue.clear(),
    };
  }
  if (peer === 'bottleneck') {
    const base = { reservoir: limit, reservoirRefreshAmount: limit, reservoirRefreshInterval: windowMs };
    let connection: Bottleneck.IORedisConnection | undefined;
    let limiter: Bottleneck;
    if (shared) {
      connection = new Bottleneck.IORedisConnection({
        clientOptions: { port: shared.port, host: '127.0.0.1' },
      });
      connection.on('error', () => {});
      limiter = new Bottleneck({ ...base, id: 'quota-bottleneck', datastore: 'ioredis', connection });
      await limiter.ready();
    } else {
      limiter = new Bottleneck(base);
    }
    limiter.on('error', () => {});
    return {
      send: (url) => limiter.schedule(() => plain(url)),
      close: async () => {
        await limiter.stop({ dropWaitingJobs: true }).catch(() => {});
        await connection?.disconnect(false).catch(() => {});
      },
    };
  }
  if (peer === 'rlf-memory') {
    const base = { points: limit, duration: windowMs / 1000 };
    const limiter = shared
      ? new RateLimiterRedis({ ...base, storeClient: redis(), keyPrefix: 'quota-rlf' })
      : new RateLimiterMemory(base);
    return {
      send: async (url) => {
        for (;;) {
          try {
            await limiter.consume('credential', 1);
            return await plain(url);
          } catch (res) {
            if (res instanceof Error) throw res;
            await new Promise((r) => setTimeout(r, Math.max(0, (res as RateLimiterRes).msBeforeNext)));
          }
        }
      },
      close: async () => disconnect(),
    };
  }
  throw new Error(`unknown peer ${peer}`);
}

/** Sends `requests` requests from CALLERS callers; counts the statuses they end with. */
async function drive(send: Send, url: string, requests: number): Promise<{ ok: number }> {
  let next = 0;
  let ok = 0;
  const caller = async (): Promise<void> => {
    while (next < requests) {
      next++;
      const status = await send(url);
      if (status < 400) ok++;
    }
  };
  await Promise.all(Array.from({ length: CALLERS }, caller));
  return { ok };
}

interface WorkerSetup {
  readonly peer: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly shared: Shared;
  readonly url: string;
  readonly requests: number;
  readonly marginMs: number;
  readonly recommended: Record<string, unknown> | undefined;
  /** A plain local server to warm fetch up on before "ready" (the provider would count it). */
  readonly warmUrl: string;
}

/** A worker process of a fleet: sets up its limiter, starts at the common time, reports its successes. */
async function worker(): Promise<void> {
  const setup = await new Promise<WorkerSetup>((resolve) => process.once('message', resolve));
  marginMs = setup.marginMs;
  recommended = setup.recommended;
  const limiter = await limiterFor(setup.peer, setup.limit, setup.windowMs, setup.shared);
  // A long-running process has its HTTP client warm: the first request of a cold one takes
  // long enough (hundreds of ms under load) to arrive after requests granted later.
  await (await fetch(setup.warmUrl)).arrayBuffer();
  process.send!({ type: 'ready' });
  const { at } = await new Promise<{ at: number }>((resolve) => process.once('message', resolve));
  await new Promise((r) => setTimeout(r, Math.max(0, at - nowMs())));
  const { ok } = await drive(limiter.send, setup.url, setup.requests);
  await limiter.close();
  process.send!({ type: 'done', ok });
  process.disconnect();
}

/** Runs `processes` workers against one provider, sharing a private Redis; returns the successes. */
async function fleet(
  peer: string,
  limit: number,
  windowMs: number,
  url: string,
  requests: number,
  processes: number,
): Promise<number> {
  const server = await startRedis();
  const warm = createServer((_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => warm.listen(0, '127.0.0.1', resolve));
  const warmUrl = `http://127.0.0.1:${(warm.address() as AddressInfo).port}/warm`;
  const path = fileURLToPath(import.meta.url);
  const children = Array.from({ length: processes }, () =>
    fork(path, ['--worker'], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  try {
    const next = (c: (typeof children)[number], type: string) =>
      new Promise<{ type: string; ok?: number }>((resolve, reject) => {
        const onMessage = (m: { type: string; ok?: number }) => {
          if (m.type === type) {
            c.off('exit', onExit);
            c.off('message', onMessage);
            resolve(m);
          }
        };
        const onExit = (code: number | null) => reject(new Error(`quota worker exited (${code})`));
        c.on('message', onMessage);
        c.once('exit', onExit);
      });
    const ready = children.map((c) => next(c, 'ready'));
    children.forEach((c, i) => {
      const share = Math.floor(requests / processes) + (i < requests % processes ? 1 : 0);
      const setup: WorkerSetup = {
        peer,
        limit,
        windowMs,
        shared: { port: server.port, processes },
        url,
        requests: share,
        marginMs,
        recommended,
        warmUrl,
      };
      c.send(setup);
    });
    await Promise.all(ready);
    const done = children.map((c) => next(c, 'done'));
    const at = nowMs() + 300;
    for (const c of children) c.send({ at });
    const results = await Promise.all(done);
    return results.reduce((sum, r) => sum + (r.ok ?? 0), 0);
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    warm.closeAllConnections();
    warm.close();
    await server.stop();
  }
}

/** Overrides the recommended rule (valve-rec), to measure others: QUOTA_RULE='{"limit":20,"interval":1000,"burst":3}'. */
const RULE = process.env.QUOTA_RULE === undefined ? undefined : JSON.parse(process.env.QUOTA_RULE);

async function measure(peer: string, name: string): Promise<void> {
  const c = cases[name]!;
  marginMs = MARGIN_MS ?? c.marginMs ?? 0;
  recommended = RULE ?? c.recommended;
  const requests = args.quick ? Math.max(c.limit, Math.round(c.requests / 4)) : c.requests;
  const provider = await startRealLimiter(c.kind, {
    limit: c.limit,
    windowMs: c.windowMs,
    ...(c.burst === undefined ? {} : { burst: c.burst }),
  });
  const url = `${provider.url}/item`;
  const limit = c.ruleLimit ?? c.limit;
  const t0 = performance.now();
  let ok: number;
  if (c.processes !== undefined) {
    ok = await fleet(peer, limit, c.windowMs, url, requests, c.processes);
  } else {
    const limiter = await limiterFor(peer, limit, c.windowMs);
    ({ ok } = await drive(limiter.send, url, requests));
    await limiter.close();
  }
  const seconds = (performance.now() - t0) / 1000;
  await provider.stop();
  if (process.env.QUOTA_DEBUG) {
    const first = Math.min(...provider.log.map((r) => r.t));
    const at = provider.log.filter((r) => r.status === 429).map((r) => Math.round(r.t - first));
    process.stderr.write(`429 at (ms after the first request): ${at.join(' ')}\n`);
    if (process.env.QUOTA_DEBUG === '2') {
      const all = provider.log.map((r) => `${Math.round(r.t - first)}${r.status === 429 ? '!' : ''}`);
      process.stderr.write(`arrivals (ms after ${first.toFixed(0)}, ! 429): ${all.join(' ')}\n`);
      // The provider's order against the send order, in arrival order.
      const order = [...provider.log]
        .sort((a, b) => a.t - b.t)
        .map((r) => {
          const [who, at] = (r.send ?? '?').split('@');
          const late = at === undefined ? '' : `+${Math.round(r.t - Number(at))}`;
          return `${Math.round(r.t - first)}${late}:${who}/${r.remaining ?? '?'}${r.status === 429 ? '!' : ''}`;
        });
      process.stderr.write(
        `provider order (ms after the first +ms from send to arrival:pid-send#/remaining answered): ${order.join(' ')}\n`,
      );
    }
  }
  emit({
    scenario: 'quota',
    case: name,
    peer,
    metrics: {
      quotaPct: round(
        quotaShare(provider.log, {
          kind: c.kind,
          limit: c.limit,
          windowMs: c.windowMs,
          ...(c.burst === undefined ? {} : { burst: c.burst }),
        }) * 100,
        1,
      ),
      rejected429: provider.log.filter((r) => r.status === 429).length,
      ok,
      failed: requests - ok,
      requests,
      seconds: round(seconds, 2),
    },
  });
}

if (process.argv.includes('--worker')) {
  await worker();
} else {
  for (const name of Object.keys(cases)) {
    if (args.case !== undefined && args.case !== name) continue;
    for (const peer of peers) {
      if (args.peer !== undefined && args.peer !== peer) continue;
      await measure(peer, name);
    }
  }
}
