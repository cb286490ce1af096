/**
 * Scenario: the share of a real provider's quota each library gets, and the 429s it causes.
 * The providers are real server-side limiters from npm on loopback (test/helpers/real-limiters.ts):
 * express-rate-limit and @fastify/rate-limit allowing 20 requests per 1 s window (a window per
 * client, opened by its first request), and an exact sliding log allowing 200 requests in any 10 s.
 * `requests` requests from 10 callers (each awaits its response before the next); every library is
 * configured the natural way for the provider's stated limit:
 *
 * - valve: `wrapFetch` on the rule docs/choose-an-algorithm.md recommends for the provider
 *   (`valve`: GCRA limit per interval, burst 1), which reads the provider's headers and retries 429s
 *   at their position; `valve-sliding`: the sliding-window rule with the provider's own numbers.
 * - p-queue `{ intervalCap: limit, interval }`, Bottleneck `{ reservoir: limit, reservoirRefreshAmount:
 *   limit, reservoirRefreshInterval: interval }`, rate-limiter-flexible `{ points: limit, duration }`
 *   waiting `msBeforeNext` when refused. They don't read headers; a 429 is a failed request.
 *
 * Metrics: `quotaPct` (successes over what the provider's sustained rate allows from the first
 * request to one emission interval after the last success: see quotaShare), `rejected429`,
 * `ok` (requests that ended 200), `seconds` (first request to last response).
 */
import Bottleneck from 'bottleneck';
import PQueue from 'p-queue';
import { RateLimiterMemory, type RateLimiterRes } from 'rate-limiter-flexible';
import { quotaShare, type RealLimiterKind, startRealLimiter } from '../../test/helpers/real-limiters.js';
import { emit, parseScenarioArgs, round } from '../lib/common.js';
import { loadValve } from '../lib/valve-module.js';

export const peers = ['valve', 'valve-sliding', 'p-queue', 'bottleneck', 'rlf-memory'];
export const cases: Record<
  string,
  { kind: RealLimiterKind; limit: number; windowMs: number; requests: number }
> = {
  'express 20/1s': { kind: 'express', limit: 20, windowMs: 1000, requests: 200 },
  'fastify 20/1s': { kind: 'fastify', limit: 20, windowMs: 1000, requests: 200 },
  'sliding 200/10s': { kind: 'sliding-log', limit: 200, windowMs: 10_000, requests: 600 },
};

const args = parseScenarioArgs();
const CALLERS = 10;

type Send = (url: string) => Promise<number>;

async function limiterFor(
  peer: string,
  limit: number,
  windowMs: number,
): Promise<{ send: Send; close: () => Promise<void> }> {
  const plain: Send = async (url) => {
    const res = await fetch(url);
    await res.arrayBuffer();
    return res.status;
  };
  if (peer === 'valve' || peer === 'valve-sliding') {
    const valve = (await loadValve()) as unknown as {
      createValve(o: unknown): {
        wrapFetch(f: typeof fetch, o?: unknown): typeof fetch;
        close(): Promise<void>;
      };
    };
    const rules =
      peer === 'valve'
        ? [{ limit, interval: windowMs }]
        : [{ limit, interval: windowMs, algorithm: 'sliding-window' }];
    const v = valve.createValve({ id: `quota-${peer}`, rules });
    const wrapped = v.wrapFetch(fetch, { retries: 10 });
    return {
      send: async (url) => {
        const res = await wrapped(url);
        await res.arrayBuffer();
        return res.status;
      },
      close: () => v.close(),
    };
  }
  if (peer === 'p-queue') {
    const queue = new PQueue({ intervalCap: limit, interval: windowMs });
    return {
      send: (url) => queue.add(() => plain(url)) as Promise<number>,
      close: async () => queue.clear(),
    };
  }
  if (peer === 'bottleneck') {
    const limiter = new Bottleneck({
      reservoir: limit,
      reservoirRefreshAmount: limit,
      reservoirRefreshInterval: windowMs,
    });
    return {
      send: (url) => limiter.schedule(() => plain(url)),
      close: () => limiter.stop({ dropWaitingJobs: true }).catch(() => {}),
    };
  }
  if (peer === 'rlf-memory') {
    const limiter = new RateLimiterMemory({ points: limit, duration: windowMs / 1000 });
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
      close: async () => {},
    };
  }
  throw new Error(`unknown peer ${peer}`);
}

async function measure(peer: string, name: string): Promise<void> {
  const c = cases[name]!;
  const requests = args.quick ? Math.max(c.limit, Math.round(c.requests / 4)) : c.requests;
  const provider = await startRealLimiter(c.kind, { limit: c.limit, windowMs: c.windowMs });
  const limiter = await limiterFor(peer, c.limit, c.windowMs);
  let next = 0;
  let ok = 0;
  const statuses = new Map<number, number>();
  const t0 = performance.now();
  const caller = async (): Promise<void> => {
    while (next < requests) {
      next++;
      const status = await limiter.send(`${provider.url}/item`);
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (status < 400) ok++;
    }
  };
  await Promise.all(Array.from({ length: CALLERS }, caller));
  const seconds = (performance.now() - t0) / 1000;
  await limiter.close();
  await provider.stop();
  emit({
    scenario: 'quota',
    case: name,
    peer,
    metrics: {
      quotaPct: round(quotaShare(provider.log, c.limit, c.windowMs) * 100, 1),
      rejected429: provider.log.filter((r) => r.status === 429).length,
      ok,
      requests,
      seconds: round(seconds, 2),
    },
  });
}

for (const name of Object.keys(cases)) {
  if (args.case !== undefined && args.case !== name) continue;
  for (const peer of peers) {
    if (args.peer !== undefined && args.peer !== peer) continue;
    await measure(peer, name);
  }
}
