/**
 * The headers of real server-side limiters from npm (express-rate-limit in each of its
 * header drafts, with its legacy X-RateLimit-* headers; @fastify/rate-limit), read as
 * they arrive: the most precise header of the limit is chosen, it is read as a window, it
 * is coarse, and the provider's true reset lies within [earliest, until].
 *
 * The true reset is found by probing the server every few milliseconds after the response
 * that spent the last unit: it lies after the last refused probe and at or before the first
 * admitted one. Real clock and sockets: the bounds are checked with a generous tolerance.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { readFeedback } from '../../src/feedback/headers.js';
import type { FeedbackReading } from '../../src/feedback/types.js';
import { type RealLimiter, type RealLimiterOptions, startRealLimiter } from '../helpers/real-limiters.js';

const LIMIT = 5;
const WINDOW_MS = 1000;
/** Scheduling and socket delays on a shared machine. */
const TOLERANCE_MS = 40;
const wall = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let limiter: RealLimiter | undefined;
afterEach(async () => {
  await limiter?.stop();
  limiter = undefined;
});

interface Observed {
  reading: FeedbackReading | undefined;
  headers: Record<string, string>;
  /** The true reset lies in (after, atOrBefore]. */
  after: number;
  atOrBefore: number;
}

/** Spends the budget, reads the response that spent the last unit, then finds the true reset by probing. */
async function spendAndProbe(
  kind: 'express' | 'fastify',
  options: Partial<RealLimiterOptions> = {},
): Promise<Observed> {
  limiter = await startRealLimiter(kind, { limit: LIMIT, windowMs: WINDOW_MS, ...options });
  let last: Response | undefined;
  for (let i = 0; i < LIMIT; i++) {
    last = await fetch(`${limiter.url}/x`);
    await last.arrayBuffer();
    expect(last.status).toBe(200);
  }
  const parsed = readFeedback(last!, { now: wall(), maxPause: 3_600_000 });
  const headers = Object.fromEntries(last!.headers);
  for (;;) {
    const res = await fetch(`${limiter.url}/probe`);
    await res.arrayBuffer();
    if (res.status === 200) break;
    await sleep(5);
  }
  const probes = limiter.log.slice(LIMIT);
  const admitted = probes.at(-1)!;
  const refused = probes.filter((p) => p.status !== 200).at(-1);
  return {
    reading: parsed.reading,
    headers,
    after: refused?.t ?? limiter.log[LIMIT - 1]!.t,
    atOrBefore: admitted.t,
  };
}

function expectBoundsHold(o: Observed): void {
  const r = o.reading!;
  const context = JSON.stringify({
    headers: o.headers,
    reading: r,
    after: o.after,
    atOrBefore: o.atOrBefore,
  });
  expect(r.earliest, context).toBeLessThanOrEqual(r.until);
  // The true reset is not before earliest, and not after until.
  expect(o.atOrBefore, context).toBeGreaterThanOrEqual(r.earliest - TOLERANCE_MS);
  expect(o.after, context).toBeLessThanOrEqual(r.until + TOLERANCE_MS);
}

describe('real server-side limiters: the chosen header and its bounds', () => {
  it('express-rate-limit draft-8: RateLimit t wins over the rounded X-RateLimit-Reset; the reset lies in the bounds', async () => {
    const o = await spendAndProbe('express', { standardHeaders: 'draft-8' });
    expect(o.headers).toHaveProperty('x-ratelimit-reset');
    expect(o.reading).toMatchObject({ header: 'ratelimit', model: 'window', coarse: true });
    expectBoundsHold(o);
  });

  it('express-rate-limit draft-7: the RateLimit dictionary reset wins over X-RateLimit-Reset', async () => {
    const o = await spendAndProbe('express', { standardHeaders: 'draft-7' });
    expect(o.reading).toMatchObject({ header: 'ratelimit', model: 'window', coarse: true });
    expectBoundsHold(o);
  });

  it('express-rate-limit draft-6: RateLimit-Reset (a delta) wins over X-RateLimit-Reset (an epoch)', async () => {
    const o = await spendAndProbe('express', { standardHeaders: 'draft-6' });
    expect(o.reading).toMatchObject({ header: 'ratelimit-reset', model: 'window', coarse: true });
    expectBoundsHold(o);
  });

  it('@fastify/rate-limit: x-ratelimit-reset in delta seconds', async () => {
    const o = await spendAndProbe('fastify');
    expect(o.reading).toMatchObject({ header: 'x-ratelimit-reset', model: 'window', coarse: true });
    expectBoundsHold(o);
  });
});
