import { describe, expect, it } from 'vitest';
import { readFeedback } from '../../src/feedback/headers.js';
import { createValve, type FeedbackIgnored } from '../../src/index.js';
import { FakeClock } from '../helpers/fake-clock.js';

/**
 * docs/provider-feedback.md, "Nonsense, caps and 'feedback-ignored'": every header value
 * observe() does not use as sent is reported, one 'feedback-ignored' event each.
 */

/** 2023-11-14T22:13:20.000Z */
const NOW = 1_700_000_000_000;
const NOW_S = NOW / 1000;
const opts = { now: NOW, maxPause: 3_600_000 };

function read(status: number | undefined, headers: Record<string, string | string[]>) {
  return readFeedback(status === undefined ? headers : { status, headers }, opts);
}

const reasons = (r: ReturnType<typeof read>) => r.ignored.map((i) => `${i.header}:${i.reason}`);

describe('repeated values: every one is read or reported', () => {
  it('a past epoch among repeated X-RateLimit-Reset values is reported, the other used', () => {
    const r = read(200, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': ['30', String(NOW_S - 100)] });
    expect(r.reading?.waitMs).toBe(30_000);
    expect(r.ignored).toEqual([
      { header: 'x-ratelimit-reset', value: `30, ${NOW_S - 100}`, reason: 'in-the-past', status: 200 },
    ]);
    // The same for an RFC 3339 reset (Anthropic) joined by a Headers object.
    const a = read(429, {
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': `${new Date(NOW - 5000).toISOString()}, ${new Date(NOW + 30_000).toISOString()}`,
    });
    expect(a.reading?.waitMs).toBe(30_000);
    expect(reasons(a)).toEqual(['anthropic-ratelimit-requests-reset:in-the-past']);
    // All of them past: each reported, and a spent count is not also reported as 'no-reset'.
    const p = read(200, {
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': [String(NOW_S - 9), String(NOW_S - 5)],
    });
    expect(p.reading).toBeUndefined();
    expect(reasons(p)).toEqual(['x-ratelimit-reset:in-the-past', 'x-ratelimit-reset:in-the-past']);
  });

  it('reads every value of a repeated Shopify call limit; one that is not used/limit makes the field unusable', () => {
    expect(read(200, { 'x-shopify-shop-api-call-limit': ['39/40', '80/80'] }).reading?.waitMs).toBe(250);
    expect(read(200, { 'x-shopify-shop-api-call-limit': '40/40, 80/80' }).reading?.waitMs).toBe(500);
    const bad = read(200, { 'x-shopify-shop-api-call-limit': ['40/40', 'zzz'] });
    expect(bad.reading).toBeUndefined();
    expect(bad.ignored).toEqual([
      { header: 'x-shopify-shop-api-call-limit', value: '40/40, zzz', reason: 'unparseable', status: 200 },
    ]);
    expect(reasons(read(200, { 'x-shopify-shop-api-call-limit': ['1/40', '3/0'] }))).toEqual([
      'x-shopify-shop-api-call-limit:unparseable',
    ]);
  });
});

describe("the response's Date header", () => {
  const retryAt = new Date(NOW + 60_000).toUTCString();

  it('an unparseable Date next to an HTTP-date Retry-After is reported; the local clock measures the wait', () => {
    const r = read(429, { 'retry-after': retryAt, date: 'garbage' });
    expect(r.reading?.waitMs).toBe(60_000);
    expect(r.ignored).toEqual([{ header: 'date', value: 'garbage', reason: 'unparseable', status: 429 }]);
  });

  it('a Date repeated with the same time is used; with different times it is reported', () => {
    const server = new Date(NOW + 20_000).toUTCString();
    const same = read(429, { 'retry-after': retryAt, date: [server, server] });
    expect(same.reading?.waitMs).toBe(40_000);
    expect(same.ignored).toEqual([]);
    const other = new Date(NOW + 10_000).toUTCString();
    const diff = read(429, { 'retry-after': retryAt, date: [server, other] });
    expect(diff.reading?.waitMs).toBe(60_000);
    expect(reasons(diff)).toEqual(['date:unparseable']);
  });

  it('is not reported when no HTTP-date Retry-After needs it', () => {
    expect(read(429, { 'retry-after': '5', date: 'garbage' }).ignored).toEqual([]);
  });
});

describe('a wait of 0 means now', () => {
  const zeros: [string, Record<string, string>][] = [
    ['Retry-After: 0', { 'retry-after': '0' }],
    ['retry-after-ms: 0', { 'retry-after-ms': '0' }],
    ['x-ms-retry-after-ms: 0', { 'x-ms-retry-after-ms': '0' }],
    ['t=0', { ratelimit: '"d";r=0;t=0' }],
    ['draft 7 reset=0', { ratelimit: 'limit=10, remaining=0, reset=0' }],
    ['RateLimit-Reset: 0', { 'ratelimit-remaining': '0', 'ratelimit-reset': '0' }],
    ['X-RateLimit-Reset-After: 0', { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset-after': '0' }],
    ['reset-requests: 0s', { 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '0s' }],
    [
      'HubSpot interval 0',
      { 'x-hubspot-ratelimit-remaining': '0', 'x-hubspot-ratelimit-interval-milliseconds': '0' },
    ],
  ];

  for (const [name, headers] of zeros) {
    it(`${name}: a 429 whose only wait it is backs off and reports it as 'zero'`, () => {
      const r = read(429, headers);
      expect(r.needsBackoff).toBe(true);
      expect(r.ignored.map((i) => i.reason)).toEqual(['zero']);
      const zero = r.ignored[0]!;
      expect(zero.status).toBe(429);
      expect(zero.value).toBe(headers[zero.header]);
    });
    // A 503's Retry-After of 0 asks for a retry: it backs off as a 429 (wrapFetch retries it).
    const retryAfter = Object.keys(headers).some((h) => h.includes('retry-after'));
    it(`${name}: on a 200${retryAfter ? '' : ' or 503'} it is used (nothing to wait for), no event`, () => {
      for (const status of retryAfter ? [200] : [200, 503]) {
        const r = read(status, headers);
        expect(r.reading).toBeUndefined();
        expect(r.needsBackoff).toBe(false);
        expect(r.ignored).toEqual([]);
      }
    });
    if (retryAfter) {
      it(`${name}: a 503 whose only wait it is backs off as a 429 does and reports it as 'zero'`, () => {
        const r = read(503, headers);
        expect(r.needsBackoff).toBe(true);
        expect(r.ignored).toMatchObject([{ reason: 'zero', status: 503 }]);
      });
    }
  }

  it('a 0 next to another wait on a 429 is used: the other wait wins, no event', () => {
    const r = read(429, { 'retry-after-ms': '0', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '5' });
    expect(r.reading?.waitMs).toBe(5000);
    expect(r.ignored).toEqual([]);
  });

  it('the reset of a count with budget left is not reported', () => {
    expect(read(429, { 'ratelimit-remaining': '5', 'ratelimit-reset': '0' }).ignored).toEqual([]);
  });
});

describe('Retry-After on other statuses', () => {
  it("on an error status other than 429, 503 and 403 it is reported as 'other-status'", () => {
    for (const status of [500, 413, 404]) {
      const r = read(status, { 'retry-after': '30', 'retry-after-ms': '30000', 'x-ms-retry-after-ms': '5' });
      expect(r.reading).toBeUndefined();
      expect(reasons(r)).toEqual([
        'retry-after:other-status',
        'retry-after-ms:other-status',
        'x-ms-retry-after-ms:other-status',
      ]);
      expect(r.ignored[0]).toEqual({ header: 'retry-after', value: '30', reason: 'other-status', status });
    }
  });

  it('on a 2xx or 3xx it means something else (a polling interval, a redirect delay): not read, no event', () => {
    for (const status of [200, 202, 301, 302])
      expect(read(status, { 'retry-after': '30' }).ignored).toEqual([]);
  });
});

describe('observe() emits these reports', () => {
  it("one 'feedback-ignored' event each", async () => {
    const clock = new FakeClock(NOW);
    const valve = createValve({ id: 'ignored-reports', clock });
    const events: FeedbackIgnored[] = [];
    valve.on('feedback-ignored', (e) => events.push(e));
    valve.observe({ status: 500, headers: { 'retry-after': '30' } });
    valve.observe({ status: 429, headers: { 'retry-after-ms': '0' } });
    valve.observe({ status: 200, headers: { 'x-shopify-shop-api-call-limit': ['40/40', 'zzz'] } });
    expect(events.map((e) => `${e.header}:${e.reason}`)).toEqual([
      'retry-after:other-status',
      'retry-after-ms:zero',
      'x-shopify-shop-api-call-limit:unparseable',
    ]);
    await valve.close();
  });
});

describe('a bare header object with a status key', () => {
  it('is read as headers when `status` is not a number (a CGI-style Status header)', async () => {
    const r = readFeedback({ status: '429 Too Many Requests', 'retry-after': '5' }, opts);
    expect(r.status).toBeUndefined();
    expect(r.reading?.waitMs).toBe(5000);
    const clock = new FakeClock(NOW);
    const valve = createValve({ id: 'status-header', clock });
    expect(valve.observe({ status: '429 Too Many Requests', 'retry-after': '5' })?.waitMs).toBe(5000);
    expect(valve.observe({ Status: '429', 'Retry-After': '6' })?.waitMs).toBe(6000);
    await valve.close();
  });

  it('is a response when `status` or `statusCode` is a number, or when it has `headers`', () => {
    expect(readFeedback({ status: 429 }, opts).needsBackoff).toBe(true);
    expect(readFeedback({ statusCode: 429 }, opts).needsBackoff).toBe(true);
    expect(readFeedback({ status: '429', headers: { 'retry-after': '5' } }, opts)).toMatchObject({
      status: 429,
      reading: { waitMs: 5000 },
    });
  });
});

describe('a repeated Retry-After with a negative item', () => {
  it("is unusable as a whole, reported 'negative' (as an item that is neither a date nor a number is 'unparseable')", () => {
    const r = read(429, { 'retry-after': '30, -5' });
    expect(r.reading).toBeUndefined();
    expect(r.needsBackoff).toBe(true);
    expect(r.ignored).toEqual([{ header: 'retry-after', value: '30, -5', reason: 'negative', status: 429 }]);
    expect(reasons(read(429, { 'retry-after': '30, soon' }))).toEqual(['retry-after:unparseable']);
  });
});

describe('coarse: a window length or a bucket without its size', () => {
  it('is coarse when it is 1 s or longer, not when shorter', () => {
    const bucket = (reset: string) =>
      read(200, { 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': reset }).reading;
    expect(bucket('20ms')).toMatchObject({ waitMs: 20, earliest: NOW, coarse: false });
    expect(bucket('2s')).toMatchObject({ waitMs: 2000, earliest: NOW, coarse: true });
    const hubspot = (ms: string) =>
      read(429, { 'x-hubspot-ratelimit-remaining': '0', 'x-hubspot-ratelimit-interval-milliseconds': ms })
        .reading;
    expect(hubspot('500')).toMatchObject({ waitMs: 500, earliest: NOW, coarse: false });
    expect(hubspot('10000')).toMatchObject({ waitMs: 10_000, earliest: NOW, coarse: true });
  });
});
