/**
 * wrapFetch against real server-side limiters from npm (express-rate-limit with its draft-8
 * RateLimit and legacy X-RateLimit-* headers, @fastify/rate-limit), 20 requests per 1 s
 * window, 100 requests from 10 callers, with the rule docs/choose-an-algorithm.md recommends
 * (a sliding window of the provider's 20 per 1 s) and with a rule twice too loose (40 per 1 s),
 * and a GCRA server (20/s, burst 5, whole-second `Retry-After` on its 429s only) with the rule
 * recommended for it.
 *
 * What holds on any machine: every request ends 200; the provider answers 429 at most once per
 * 100 requests with the recommended rule and to at most 5 % of them with the loose one; no
 * request is dispatched inside a pause the valve announced. The share of the quota used is a
 * speed figure: it is measured by the benchmark (bench/scenarios/quota.ts), not here.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createValve } from '../../src/valve.js';
import { type RealLimiter, type RealLimiterKind, startRealLimiter } from '../helpers/real-limiters.js';

const wall = () => performance.timeOrigin + performance.now();
const REQUESTS = 100;
const CALLERS = 10;

let provider: RealLimiter | undefined;
afterEach(async () => {
  await provider?.stop();
  provider = undefined;
});

/** The rule docs/choose-an-algorithm.md recommends against a GCRA server of 20/s, burst 5. */
const GCRA_RULE = { limit: 20, interval: '1s', burst: 4 } as const;

async function drive(kind: RealLimiterKind, ruleLimit: number) {
  provider = await startRealLimiter(kind, {
    limit: 20,
    windowMs: 1000,
    ...(kind === 'gcra' ? { burst: 5 } : {}),
  });
  const valve = createValve({
    id: `real:${kind}:${ruleLimit}`,
    rules: [kind === 'gcra' ? GCRA_RULE : { limit: ruleLimit, interval: '1s', algorithm: 'sliding-window' }],
  });
  const pauses: { at: number; until: number; header: string | undefined }[] = [];
  const dispatches: number[] = [];
  /** Each attempt: when it was sent and when its answer came back. */
  const flights: { sent: number; answered: number; status: number }[] = [];
  valve.on('pause', (e) => pauses.push({ at: wall(), until: e.until, header: e.header }));
  const recording = async (input: string | URL | Request, init?: RequestInit) => {
    const sent = wall();
    dispatches.push(sent);
    const res = await fetch(input, init);
    flights.push({ sent, answered: wall(), status: res.status });
    return res;
  };
  const f = valve.wrapFetch(recording as typeof fetch, { retries: 10 });
  const statuses: number[] = [];
  let next = 0;
  const caller = async () => {
    while (next < REQUESTS) {
      next++;
      const res = await f(`${provider!.url}/item`);
      await res.arrayBuffer();
      statuses.push(res.status);
    }
  };
  await Promise.all(Array.from({ length: CALLERS }, caller));
  await valve.close();
  const rejected = provider.log.filter((r) => r.status === 429).length;
  return { statuses, pauses, dispatches, flights, rejected };
}

function expectNoDispatchInPauses(run: { pauses: { at: number; until: number }[]; dispatches: number[] }) {
  for (const p of run.pauses) {
    const inside = run.dispatches.filter((d) => d > p.at + 0.5 && d < p.until - 1);
    expect(inside, `dispatched during the pause ${JSON.stringify(p)}`).toEqual([]);
  }
}

describe('wrapFetch against a GCRA server answering only Retry-After (20/s, burst 5, 10 callers)', () => {
  it('the recommended rule: every request ends 200; a 429 is probed, one request at a time, not waited out', async () => {
    const run = await drive('gcra', 20);
    expect(run.statuses).toEqual(Array(REQUESTS).fill(200));
    expectNoDispatchInPauses(run);
    // Each probe pause (a 429's `Retry-After: 1`) lasts under the whole second it stated, and
    // the request sent when it ends flies alone: nothing else is sent until its answer.
    const probes = run.pauses.filter((p) => p.header === 'retry-after');
    expect(probes.length).toBeGreaterThanOrEqual(run.rejected > 0 ? 1 : 0);
    for (const p of probes) {
      expect(p.until - p.at, 'a probe pause').toBeLessThan(1000);
      const probe = run.flights.find((f) => f.sent >= p.until - 1);
      if (probe === undefined) continue;
      const alongside = run.flights.filter(
        (f) => f !== probe && f.sent > probe.sent && f.sent < probe.answered - 0.5,
      );
      // A later pause may have ended the probe's wait; only then may others go with it.
      const later = probes.some((q) => q.at > p.at && q.at < probe.answered);
      if (!later) expect(alongside, `sent while the probe of ${JSON.stringify(p)} was out`).toEqual([]);
    }
  }, 30_000);
});

describe('wrapFetch against real limiters (20 per 1 s window, 10 callers)', () => {
  for (const kind of ['express', 'fastify'] as const) {
    it(`${kind}, the recommended rule: every request ends 200, at most 1 × 429 per 100 requests`, async () => {
      const run = await drive(kind, 20);
      expect(run.statuses).toEqual(Array(REQUESTS).fill(200));
      expect(run.rejected).toBeLessThanOrEqual(REQUESTS / 100);
      expect(run.pauses.length).toBeGreaterThan(0);
      expectNoDispatchInPauses(run);
    }, 15_000);

    it(`${kind}, a rule twice too loose: every request ends 200, at most 5 % get a 429`, async () => {
      const run = await drive(kind, 40);
      expect(run.statuses).toEqual(Array(REQUESTS).fill(200));
      expect(run.rejected).toBeLessThanOrEqual(REQUESTS * 0.05);
      expectNoDispatchInPauses(run);
    }, 15_000);
  }
});
