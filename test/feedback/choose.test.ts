/**
 * Choosing the wait: among headers that describe the same limit the most precise wins;
 * across limits the longest; a reset in whole seconds is an upper bound with a lower bound
 * next to it; token buckets wait for the next unit, not for a full bucket.
 */
import { describe, expect, it } from 'vitest';
import { readFeedback } from '../../src/feedback/headers.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';

/** 2023-11-14T22:13:20.260Z: 260 ms into a second, as a response usually is. */
const NOW = 1_700_000_000_260;
const HOUR = 3_600_000;
/** Epoch seconds of the next whole second and the one after. */
const NEXT_S = Math.ceil(NOW / 1000);

function read(status: number | undefined, headers: Record<string, string>) {
  return readFeedback(status === undefined ? headers : { status, headers }, { now: NOW, maxPause: HOUR });
}

describe('the most precise header of a limit wins', () => {
  it('retry-after-ms over Retry-After: a 429 with 100 ms and 1 s pauses 100 ms', () => {
    expect(read(429, { 'retry-after-ms': '100', 'retry-after': '1' }).reading).toMatchObject({
      waitMs: 100,
      header: 'retry-after-ms',
      model: 'wait',
      earliest: NOW + 100,
      coarse: false,
    });
    // Either order, and Azure's name too.
    expect(read(429, { 'retry-after': '1', 'x-ms-retry-after-ms': '250' }).reading?.waitMs).toBe(250);
    // Fractional seconds are finer than whole ones.
    expect(read(429, { 'retry-after': ['0.35', '1'].join(', ') }).reading?.waitMs).toBe(1000);
  });

  it('a delta (RateLimit t) over an epoch rounded up to whole seconds (X-RateLimit-Reset), as express-rate-limit sends them', () => {
    // The window resets 740 ms from now: t = ceil(0.74) = 1; X-RateLimit-Reset = ceil(epoch s) = the second after next.
    const r = read(200, {
      'RateLimit-Policy': '"20-in-1sec";q=20;w=1',
      RateLimit: '"20-in-1sec";r=0;t=1',
      'X-RateLimit-Limit': '20',
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': String(NEXT_S + 1),
    });
    expect(r.reading).toMatchObject({ waitMs: 1000, header: 'ratelimit', model: 'window', coarse: true });
    // The draft-6/7 fields next to the legacy ones: the delta wins as well.
    expect(
      read(200, {
        'RateLimit-Remaining': '0',
        'RateLimit-Reset': '1',
        'X-RateLimit-Remaining': '0',
        'X-RateLimit-Reset': String(NEXT_S + 1),
      }).reading,
    ).toMatchObject({ waitMs: 1000, header: 'ratelimit-reset' });
    expect(
      read(200, {
        RateLimit: 'limit=20, remaining=0, reset=1',
        'X-RateLimit-Remaining': '0',
        'X-RateLimit-Reset': String(NEXT_S + 1),
      }).reading,
    ).toMatchObject({ waitMs: 1000, header: 'ratelimit' });
  });

  it('Discord: Reset-After (fractional seconds) over Reset', () => {
    const r = read(200, {
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': String(NEXT_S + 2),
      'X-RateLimit-Reset-After': '0.5',
    });
    expect(r.reading).toMatchObject({ waitMs: 500, header: 'x-ratelimit-reset-after', coarse: false });
  });

  it('across different limits the longest wait still wins', () => {
    // Two IETF policies, both spent.
    expect(read(429, { RateLimit: '"burst";r=0;t=5, "day";r=0;t=3600' }).reading?.waitMs).toBe(3_600_000);
    // The server's Retry-After and a spent window are different statements: the longer holds.
    expect(
      read(429, { 'retry-after-ms': '100', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '30' }).reading,
    ).toMatchObject({ waitMs: 30_000, header: 'x-ratelimit-reset' });
    // OpenAI's requests and tokens buckets are separate limits.
    const openai = read(429, {
      'x-ratelimit-limit-requests': '500',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '59.88s',
      'x-ratelimit-limit-tokens': '1000',
      'x-ratelimit-remaining-tokens': '0',
      'x-ratelimit-reset-tokens': '1m0s',
    });
    expect(openai.reading).toMatchObject({ waitMs: 119.76, header: 'x-ratelimit-reset-requests' });
  });
});

describe('coarse resets: an upper bound and a lower bound', () => {
  it('a reset in whole seconds is rounded up: the true reset lies in the second before it', () => {
    const r = read(200, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(NEXT_S) });
    // ceil(epoch s) is 740 ms away; the provider's window may have reset at any time since the last whole second.
    expect(r.reading).toMatchObject({ waitMs: 740, until: NOW + 740, earliest: NOW, coarse: true });
    const t = read(200, { RateLimit: '"default";r=0;t=3' });
    expect(t.reading).toMatchObject({ waitMs: 3000, earliest: NOW + 2000, coarse: true });
  });

  it('exact values have earliest = until', () => {
    const exact: Record<string, string>[] = [
      { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(NOW + 1234) },
      {
        'x-ratelimit-limit-requests': '10',
        'x-ratelimit-remaining-requests': '0',
        'x-ratelimit-reset-requests': '12ms',
      },
      { 'X-Shopify-Shop-Api-Call-Limit': '40/40' },
    ];
    for (const headers of exact) {
      const r = read(200, headers).reading;
      expect(r?.earliest).toBe(r?.until);
      expect(r?.coarse).toBe(false);
    }
    // Tenths of a second: uncertain by 100 ms, not coarse.
    expect(read(429, { 'retry-after': '2.5' }).reading).toMatchObject({
      waitMs: 2500,
      earliest: NOW + 2400,
      coarse: false,
    });
  });

  it('a window length is an upper bound with no lower bound (RateLimit-Policy w, HubSpot)', () => {
    expect(
      read(429, { 'RateLimit-Policy': '"default";q=100;w=60', RateLimit: '"default";r=0' }).reading,
    ).toMatchObject({ waitMs: 60_000, earliest: NOW, coarse: true });
    expect(
      read(429, {
        'X-HubSpot-RateLimit-Remaining': '0',
        'X-HubSpot-RateLimit-Interval-Milliseconds': '10000',
      }).reading,
    ).toMatchObject({ waitMs: 10_000, earliest: NOW, coarse: true, model: 'window' });
  });

  it('across limits, the earliest is the latest lower bound', () => {
    const r = read(429, {
      'retry-after': '2',
      RateLimit: '"default";r=0;t=5',
    });
    expect(r.reading).toMatchObject({ waitMs: 5000, earliest: NOW + 4000 });
  });

  it('a capped wait keeps earliest within until', () => {
    const r = readFeedback(
      { status: 429, headers: { 'retry-after': '120' } },
      { now: NOW, maxPause: 60_000 },
    );
    expect(r.reading).toMatchObject({ waitMs: 60_000, earliest: NOW + 60_000, capped: true });
  });
});

describe('token buckets wait for the next unit', () => {
  it('OpenAI: remaining-requests 0 with reset-requests 59.88s on a 500-per-minute key waits ~120 ms', () => {
    const r = read(200, {
      'x-ratelimit-limit-requests': '500',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '59.88s',
    });
    expect(r.reading).toMatchObject({
      header: 'x-ratelimit-reset-requests',
      model: 'token-bucket',
      coarse: false,
    });
    expect(r.reading?.waitMs).toBeCloseTo(119.76, 6);
  });

  it('Anthropic: the bucket is full again at the RFC 3339 reset; one unit comes back every reset / limit', () => {
    const r = read(200, {
      'anthropic-ratelimit-requests-limit': '1000',
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': new Date(NOW - 260 + 60_000).toISOString(),
    });
    expect(r.reading).toMatchObject({ model: 'token-bucket', header: 'anthropic-ratelimit-requests-reset' });
    expect(r.reading?.waitMs).toBeCloseTo(59.74, 6);
  });

  it('without a usable size the whole reset is the upper bound, with no lower bound', () => {
    const r = read(200, {
      'x-ratelimit-limit-requests': 'lots',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '6s',
    });
    expect(r.reading).toMatchObject({ waitMs: 6000, earliest: NOW, coarse: true, model: 'token-bucket' });
    expect(r.ignored).toMatchObject([{ header: 'x-ratelimit-limit-requests', reason: 'unparseable' }]);
  });

  it('kinds named after a time unit are windows (Kong): the whole reset', () => {
    const r = read(429, {
      'x-ratelimit-remaining-minute': '0',
      'x-ratelimit-reset-minute': '30',
      'x-ratelimit-limit-minute': '5',
    });
    expect(r.reading).toMatchObject({ waitMs: 30_000, model: 'window' });
  });

  it('Shopify is a leaky bucket: one request leaks at limit / 20 per second', () => {
    expect(read(200, { 'X-Shopify-Shop-Api-Call-Limit': '40/40' }).reading).toMatchObject({
      waitMs: 500,
      model: 'leaky-bucket',
    });
  });
});

describe("'pause' events say which header and which model produced them", () => {
  it('the pause event of observe() carries the reading with its header and model', async () => {
    const clock = new FakeClock(NOW);
    const valve = createValve({
      id: 'choose',
      rules: { limit: 1000, interval: '1s' },
      store: memoryStore({ clock }),
      clock,
    });
    const events: unknown[] = [];
    valve.on('pause', (e) => events.push(e));
    valve.observe({
      status: 200,
      headers: {
        'x-ratelimit-limit-requests': '500',
        'x-ratelimit-remaining-requests': '0',
        'x-ratelimit-reset-requests': '59.88s',
      },
    });
    valve.observe({ status: 429 });
    await clock.runAllAsync();
    expect(events).toMatchObject([
      { source: 'ratelimit-header', detail: { header: 'x-ratelimit-reset-requests', model: 'token-bucket' } },
      { source: 'backoff', detail: { header: undefined, model: 'backoff' } },
    ]);
    await valve.close();
  });
});
