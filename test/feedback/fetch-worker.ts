/**
 * A worker process for test/feedback/multiprocess-redis.test.ts: one valve over redisStore
 * (ioredis, optionally with a subscriber connection), several concurrent callers that each
 * make one request through `valve.wrapFetch(fetch)` to the fake provider.
 *
 * Run as `node --import tsx test/feedback/fetch-worker.ts` with the configuration in the
 * FETCH_WORKER environment variable (JSON, see FetchWorkerConfig). Prints "ready" once
 * connected, starts its callers at the epoch ms read from a line "go <ms>" on stdin, and
 * prints one JSON line (FetchWorkerReport) on stdout at the end.
 *
 * Every attempt is tagged `x-test-tag: <worker>/<caller>#<attempt>` so that the provider's
 * request log can be joined with this worker's dispatch log. Each dispatch records
 * `grantBound`: the store-clock time of the latest acquisition that granted anything in this
 * process before the dispatch. The job's own grant happened at or before it (jobs start from
 * the acquisition's reply), so `grantBound < t` proves the request was granted before store
 * time `t`.
 */
import { createValve } from '../../src/index.js';
import type { Rule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { connectClient, type Target } from '../helpers/redis-clients.js';
import { anchoredWallClock } from '../helpers/wall-clock.js';

export interface FetchWorkerConfig {
  name: string;
  target: Target;
  prefix: string;
  id: string;
  rules: Rule[];
  subscriber: boolean;
  /** Local concurrency of this process's valve. */
  concurrency: number;
  /** Concurrent callers, one request each. */
  callers: number;
  retries: number;
  /** The provider endpoint's base URL; caller i requests `<url>/<worker>/<i>`. */
  url: string;
  /** Another endpoint of the provider, for a warm-up request before "ready". */
  warmUrl: string;
}

export interface FetchWorkerReport {
  name: string;
  /** Final status of each caller. */
  statuses: number[];
  /** Every attempt handed to fetch: tag, local epoch ms, store-clock bound of its grant. */
  dispatches: { tag: string; at: number; grantBound: number }[];
  /** Every response fetch returned: tag, local epoch ms, status. */
  responses: { tag: string; at: number; status: number }[];
  /** Every acquisition: local send/receive epoch ms, store clock, granted, store's pause end. */
  acquires: { sentAt: number; at: number; now: number; granted: number; pausedUntil: number | null }[];
  /** Every pause this process wrote: local call/ack epoch ms, length asked, the store's pause end. */
  pauseWrites: { at: number; ackAt: number; ms: number; until: number }[];
  /** 'pause' / 'resume' events (local epoch ms; until on the store's clock). */
  events: { type: string; at: number; until?: number; source?: string }[];
  retries: number;
  storeErrors: string[];
  notifies: boolean;
}

const config = JSON.parse(process.env.FETCH_WORKER ?? '{}') as FetchWorkerConfig;
const now = anchoredWallClock();
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms)));

const c = await connectClient('ioredis', config.target);
const inner = redisStore({
  client: c.client,
  subscriber: config.subscriber ? c.subscriber : undefined,
  prefix: config.prefix,
});

const report: FetchWorkerReport = {
  name: config.name,
  statuses: [],
  dispatches: [],
  responses: [],
  acquires: [],
  pauseWrites: [],
  events: [],
  retries: 0,
  storeErrors: [],
  notifies: false,
};

let grantBound = Number.NEGATIVE_INFINITY;

// The store as the valve sees it, logging acquisitions and pause writes.
const store: Store = {
  acquire: async (request) => {
    const sentAt = now();
    const r = await inner.acquire(request);
    report.acquires.push({ sentAt, at: now(), now: r.now, granted: r.granted, pausedUntil: r.pausedUntil });
    if (r.granted > 0 && r.now > grantBound) grantBound = r.now;
    return r;
  },
  pause: async (id, ms) => {
    const at = now();
    const until = await inner.pause(id, ms);
    report.pauseWrites.push({ at, ackAt: now(), ms, until });
    return until;
  },
  resume: (id) => inner.resume(id),
  renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
  release: (id, tokens) => inner.release(id, tokens),
  ...(inner.subscribe ? { subscribe: inner.subscribe.bind(inner) } : {}),
  get notifies() {
    return inner.notifies ?? false;
  },
};

const valve = createValve({
  id: config.id,
  rules: config.rules,
  store,
  concurrency: config.concurrency,
});
valve.on('pause', (e) => report.events.push({ type: 'pause', at: now(), until: e.until, source: e.source }));
valve.on('resume', (e) => report.events.push({ type: 'resume', at: now(), source: e.source }));
valve.on('retry', () => {
  report.retries++;
});
valve.on('store-error', (err) => report.storeErrors.push(String(err)));

const attempts = new Map<string, number>();
const recording = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
  const headers = new Headers(init?.headers);
  const caller = headers.get('x-test-caller') ?? '?';
  const n = (attempts.get(caller) ?? 0) + 1;
  attempts.set(caller, n);
  const tag = `${caller}#${n}`;
  headers.set('x-test-tag', tag);
  report.dispatches.push({ tag, at: now(), grantBound });
  const res = await fetch(input, { ...init, headers });
  report.responses.push({ tag, at: now(), status: res.status });
  return res;
};
const f = valve.wrapFetch(recording as typeof fetch, { retries: config.retries });

// Warm up before "ready" (fetch, observe, the pause and acquire scripts, on another id), so
// the first 429 of the run is handled at steady-state speed, not at first-call speed.
const warm = createValve({ id: `${config.id}:warm`, rules: config.rules, store: inner });
await warm.run(async () => {
  await (await fetch(config.warmUrl)).arrayBuffer();
});
warm.observe(new Response(null, { status: 429, headers: { 'retry-after': '1' } }));
await warm.pause(1000);
await warm.resume();
await warm.close();

process.stdout.write('ready\n');
const startAt = await new Promise<number>((resolve) => {
  let buffer = '';
  process.stdin.on('data', (d) => {
    buffer += d;
    const m = /go (\d+)/.exec(buffer);
    if (m) resolve(Number(m[1]));
  });
});
process.stdin.pause();
await sleep(startAt - now());

report.statuses = await Promise.all(
  Array.from({ length: config.callers }, async (_, i) => {
    const caller = `${config.name}/${i}`;
    const res = await f(`${config.url}/${config.name}/${i}`, { headers: { 'x-test-caller': caller } });
    await res.arrayBuffer();
    return res.status;
  }),
);
report.notifies = inner.notifies ?? false;
await valve.close();
await c.close();
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
