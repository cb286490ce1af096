import { describe, expect, it } from 'vitest';
import { readFeedback } from '../../src/feedback/headers.js';
import { toHeaderBag } from '../../src/feedback/input.js';
import { parseStructured } from '../../src/feedback/structured.js';
import { interpretReset, parseGoDuration, parseHttpDate, parseRfc3339 } from '../../src/feedback/values.js';

/** 2023-11-14T22:13:20.000Z */
const NOW = 1_700_000_000_000;
const NOW_S = NOW / 1000;
const HOUR = 3_600_000;
const opts = { now: NOW, maxPause: HOUR };

function read(status: number | undefined, headers: Record<string, string | string[]>, maxPause = HOUR) {
  return readFeedback(status === undefined ? headers : { status, headers }, { now: NOW, maxPause });
}

describe('value parsers', () => {
  it('reads Go-style durations as OpenAI sends them', () => {
    expect(parseGoDuration('1s')).toBe(1000);
    expect(parseGoDuration('6m0s')).toBe(360_000);
    expect(parseGoDuration('20ms')).toBe(20);
    expect(parseGoDuration('1h2m3.5s')).toBe(3_723_500);
    expect(parseGoDuration('7.66s')).toBeCloseTo(7660);
    expect(parseGoDuration('0')).toBe(0);
    expect(parseGoDuration('500us')).toBe(0.5);
    expect(parseGoDuration('-2s')).toBe(-2000);
    for (const bad of ['', 's', '1', '1x', '1s2', 'abc', '1 s', 'NaN', '1s-2s']) {
      expect(parseGoDuration(bad)).toBeUndefined();
    }
  });

  it('reads HTTP dates in all three RFC 9110 forms, as GMT', () => {
    const t = Date.UTC(2015, 9, 21, 7, 28, 0);
    expect(parseHttpDate('Wed, 21 Oct 2015 07:28:00 GMT')).toBe(t);
    expect(parseHttpDate('Wednesday, 21-Oct-15 07:28:00 GMT')).toBe(t);
    expect(parseHttpDate('Wed Oct 21 07:28:00 2015')).toBe(t);
    expect(parseHttpDate('120')).toBeUndefined();
    expect(parseHttpDate('tomorrow')).toBeUndefined();
    expect(parseHttpDate('Wed, 99 Foo 2015 07:28:00 GMT')).toBeUndefined();
  });

  it('reads RFC 3339 timestamps as Anthropic sends them', () => {
    expect(parseRfc3339('2023-11-14T22:13:50Z')).toBe(NOW + 30_000);
    expect(parseRfc3339('2023-11-14T22:13:50.123456Z')).toBe(NOW + 30_123);
    expect(parseRfc3339('2023-11-14T23:13:50+01:00')).toBe(NOW + 30_000);
    expect(parseRfc3339('2023-11-14 22:13:50z')).toBe(NOW + 30_000);
    expect(parseRfc3339('2023-11-14T22:13:50')).toBeUndefined();
    expect(parseRfc3339('2023-13-45T22:13:50Z')).toBeUndefined();
  });

  it('tells epoch ms, epoch seconds and delta seconds apart by magnitude relative to now', () => {
    expect(interpretReset(NOW_S + 30, NOW)).toEqual({ waitMs: 30_000, form: 'epoch-s' });
    expect(interpretReset(NOW + 1500, NOW)).toEqual({ waitMs: 1500, form: 'epoch-ms' });
    expect(interpretReset(30, NOW)).toEqual({ waitMs: 30_000, form: 'delta-s' });
    expect(interpretReset(86_400, NOW)).toEqual({ waitMs: 86_400_000, form: 'delta-s' });
    // The boundaries: now/2 (ms) and now/2000 (s).
    expect(interpretReset(NOW / 2, NOW).form).toBe('epoch-ms');
    expect(interpretReset(NOW / 2 - 1, NOW).form).toBe('epoch-s');
    expect(interpretReset(NOW / 2000, NOW).form).toBe('epoch-s');
    expect(interpretReset(NOW / 2000 - 1, NOW).form).toBe('delta-s');
    // A stale epoch time is in the past, not a 31-year delta.
    expect(interpretReset(NOW_S - 10, NOW).waitMs).toBe(-10_000);
  });

  it('parses RateLimit structured fields in list and dictionary forms', () => {
    const list = parseStructured('"default";r=0;t=30, "daily";r=100;t=3600');
    expect(list?.map((m) => [m.name, Object.fromEntries(m.params)])).toEqual([
      ['default', { r: 0, t: 30 }],
      ['daily', { r: 100, t: 3600 }],
    ]);
    expect(parseStructured('burst;r=0;t=5')?.[0]?.name).toBe('burst');
    const dict = parseStructured('limit=100, remaining=0, reset=30');
    expect(dict?.map((m) => [m.name, m.value])).toEqual([
      ['limit', 100],
      ['remaining', 0],
      ['reset', 30],
    ]);
    for (const bad of ['', '"unterminated;r=0', '"a";r=', '"a",', ';r=0', '"a" "b"']) {
      expect(parseStructured(bad)).toBeUndefined();
    }
  });
});

describe('inputs', () => {
  it('accepts a fetch Response, a Headers, { status, headers }, { statusCode, headers } and bare objects', () => {
    const response = new Response(null, { status: 429, headers: { 'Retry-After': '5' } });
    expect(readFeedback(response, opts).reading?.waitMs).toBe(5000);
    expect(readFeedback(new Headers({ 'retry-after': '5' }), opts).reading?.waitMs).toBe(5000);
    expect(
      readFeedback({ status: 429, headers: new Headers({ 'retry-after': '5' }) }, opts).reading?.waitMs,
    ).toBe(5000);
    // Node's IncomingMessage and got expose statusCode and IncomingHttpHeaders.
    expect(readFeedback({ statusCode: 429, headers: { 'retry-after': '5' } }, opts).reading?.waitMs).toBe(
      5000,
    );
    // Any-case keys in a plain object.
    expect(readFeedback({ 'RETRY-AFTER': '5' }, opts).reading?.waitMs).toBe(5000);
    expect(readFeedback(new Map([['Retry-After', '5']]), opts).reading?.waitMs).toBe(5000);
  });

  it('collects repeated headers given as arrays, in different cases, or joined by Headers', () => {
    const bag = toHeaderBag({
      headers: { 'X-RateLimit-Remaining': ['3', '0'], 'x-ratelimit-remaining': '7' },
    });
    expect(bag.headers.get('x-ratelimit-remaining')).toEqual(['3', '0', '7']);
    // The smallest remaining and the longest wait win.
    const r = read(200, { 'x-ratelimit-remaining': ['5', '0'], 'x-ratelimit-reset': ['10', '20'] });
    expect(r.reading?.waitMs).toBe(20_000);
    const h = new Headers();
    h.append('retry-after', '10');
    h.append('retry-after', '20');
    expect(readFeedback({ status: 429, headers: h }, opts).reading?.waitMs).toBe(20_000);
  });

  it('reads numbers given as header values and ignores undefined ones (IncomingHttpHeaders)', () => {
    const r = readFeedback(
      { statusCode: 429, headers: { 'retry-after': 7 as unknown as string, foo: undefined } },
      opts,
    );
    expect(r.reading?.waitMs).toBe(7000);
  });

  it('throws TypeError only when the input is not an object', () => {
    expect(() => readFeedback(42, opts)).toThrow(TypeError);
    expect(() => readFeedback(null, opts)).toThrow(TypeError);
    expect(readFeedback({}, opts)).toEqual({
      status: undefined,
      reading: undefined,
      ignored: [],
      needsBackoff: false,
    });
    expect(readFeedback({ status: 429 }, opts).needsBackoff).toBe(true);
  });
});

describe('Retry-After and retry-after-ms', () => {
  it('reads delta seconds on 429, 503 and 403 (GitHub secondary limits)', () => {
    for (const status of [429, 503, 403]) {
      const r = read(status, { 'retry-after': '60' });
      expect(r.reading).toMatchObject({
        waitMs: 60_000,
        source: 'retry-after',
        header: 'retry-after',
        raw: '60',
      });
      expect(r.reading?.until).toBe(NOW + 60_000);
    }
  });

  it('accepts fractional seconds (Shopify sends "2.0")', () => {
    expect(read(429, { 'Retry-After': '2.0' }).reading?.waitMs).toBe(2000);
  });

  it('reads an HTTP date, measured against the response Date header when present', () => {
    const at = new Date(NOW + 120_000).toUTCString();
    expect(read(503, { 'retry-after': at }).reading?.waitMs).toBe(120_000);
    // The server's clock is 10 s behind ours: the wait is what the server meant.
    const serverNow = new Date(NOW - 10_000).toUTCString();
    const skewed = new Date(NOW - 10_000 + 120_000).toUTCString();
    expect(read(503, { 'retry-after': skewed, date: serverNow }).reading?.waitMs).toBe(120_000);
  });

  it('is not read on other statuses, but is read when no status is known', () => {
    expect(read(200, { 'retry-after': '60' }).reading).toBeUndefined();
    expect(read(500, { 'retry-after': '60' }).reading).toBeUndefined();
    expect(read(301, { 'retry-after': '60' }).reading).toBeUndefined();
    expect(read(undefined, { 'retry-after': '60' }).reading?.waitMs).toBe(60_000);
  });

  it('reads retry-after-ms (OpenAI, Azure) and prefers it to Retry-After, the same wait in whole seconds', () => {
    expect(read(429, { 'retry-after-ms': '1500' }).reading).toMatchObject({
      waitMs: 1500,
      header: 'retry-after-ms',
    });
    expect(read(429, { 'x-ms-retry-after-ms': '250' }).reading?.waitMs).toBe(250);
    expect(read(429, { 'retry-after-ms': '1500', 'retry-after': '2' }).reading).toMatchObject({
      waitMs: 1500,
      header: 'retry-after-ms',
    });
  });

  it('falls back to backoff on a 429 whose Retry-After is 0 or a date already passed', () => {
    // The 0 is not used as sent (the 429 backs off instead): reported as 'zero'.
    expect(read(429, { 'retry-after': '0' })).toMatchObject({
      reading: undefined,
      needsBackoff: true,
      ignored: [{ header: 'retry-after', value: '0', reason: 'zero', status: 429 }],
    });
    const past = read(429, { 'retry-after': new Date(NOW - 5000).toUTCString() });
    expect(past.needsBackoff).toBe(true);
    expect(past.ignored).toMatchObject([{ header: 'retry-after', reason: 'in-the-past' }]);
  });

  it('a 503 backs off too when its Retry-After is 0 or a date already passed, not when it is nonsense', () => {
    expect(read(503, { 'retry-after': '0' })).toMatchObject({
      reading: undefined,
      needsBackoff: true,
      ignored: [{ header: 'retry-after', value: '0', reason: 'zero', status: 503 }],
    });
    const past = read(503, { 'retry-after': new Date(NOW - 5000).toUTCString() });
    expect(past.needsBackoff).toBe(true);
    expect(past.ignored).toMatchObject([{ header: 'retry-after', reason: 'in-the-past' }]);
    expect(read(503, { 'retry-after': 'soon' })).toMatchObject({
      needsBackoff: false,
      ignored: [{ header: 'retry-after', reason: 'unparseable' }],
    });
    // Another header's 0 on a 503 (no Retry-After) asks for nothing.
    expect(read(503, { 'ratelimit-remaining': '0', 'ratelimit-reset': '0' }).needsBackoff).toBe(false);
  });
});

describe('provider fixtures (documented shapes)', () => {
  it('GitHub primary limit: x-ratelimit-remaining 0 with x-ratelimit-reset in epoch seconds', () => {
    const headers = {
      'x-ratelimit-limit': '5000',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-used': '5000',
      'x-ratelimit-reset': String(NOW_S + 1800),
      'x-ratelimit-resource': 'core',
    };
    for (const status of [200, 403, 429]) {
      const r = read(status, headers);
      expect(r.reading).toMatchObject({
        waitMs: 1_800_000,
        source: 'ratelimit-header',
        header: 'x-ratelimit-reset',
      });
      expect(r.needsBackoff).toBe(false);
    }
    expect(read(200, { ...headers, 'x-ratelimit-remaining': '4999' }).reading).toBeUndefined();
  });

  it('GitHub secondary limit: 403 with retry-after', () => {
    const r = read(403, {
      'retry-after': '60',
      'x-ratelimit-limit': '5000',
      'x-ratelimit-remaining': '4990',
      'x-ratelimit-reset': String(NOW_S + 3000),
    });
    expect(r.reading).toMatchObject({ waitMs: 60_000, source: 'retry-after' });
  });

  it('a 403 without rate-limit headers is not a rate limit', () => {
    expect(read(403, { 'content-type': 'application/json' })).toMatchObject({
      reading: undefined,
      needsBackoff: false,
    });
  });

  it('X-RateLimit-Reset in epoch milliseconds and in delta seconds', () => {
    expect(
      read(429, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(NOW + 2500) }).reading?.waitMs,
    ).toBe(2500);
    expect(read(429, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '42' }).reading?.waitMs).toBe(
      42_000,
    );
  });

  it('Twitter/X: x-rate-limit-remaining and x-rate-limit-reset (epoch seconds)', () => {
    const r = read(429, {
      'x-rate-limit-limit': '900',
      'x-rate-limit-remaining': '0',
      'x-rate-limit-reset': `${NOW_S + 600}`,
    });
    expect(r.reading).toMatchObject({ waitMs: 600_000, header: 'x-rate-limit-reset' });
  });

  it('Discord: X-RateLimit-Reset-After (fractional seconds) is preferred to X-RateLimit-Reset', () => {
    const r = read(200, {
      'X-RateLimit-Limit': '5',
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': `${NOW_S + 64.57}`,
      'X-RateLimit-Reset-After': '64.57',
      'X-RateLimit-Bucket': 'abcd1234',
    });
    expect(r.reading).toMatchObject({ header: 'x-ratelimit-reset-after', raw: '64.57' });
    expect(r.reading?.waitMs).toBeCloseTo(64_570);
    const limited = read(429, {
      'Retry-After': '65',
      'X-RateLimit-Global': 'true',
      'X-RateLimit-Scope': 'global',
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset-After': '64.57',
    });
    expect(limited.reading).toMatchObject({ waitMs: 65_000, header: 'retry-after' });
    // Budget left: nothing to do.
    expect(
      read(200, { 'X-RateLimit-Remaining': '4', 'X-RateLimit-Reset-After': '1.5' }).reading,
    ).toBeUndefined();
  });

  it('OpenAI: remaining/reset pairs for requests and tokens, with Go durations, read as token buckets', () => {
    const base = {
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-limit-tokens': '150000',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-remaining-tokens': '149984',
      'x-ratelimit-reset-requests': '1s',
      'x-ratelimit-reset-tokens': '6m0s',
    };
    expect(read(200, base).reading).toBeUndefined();
    // The bucket is full again in 1 s; one of its 60 requests comes back every 1/60 s.
    expect(read(200, { ...base, 'x-ratelimit-remaining-requests': '0' }).reading).toMatchObject({
      waitMs: 1000 / 60,
      header: 'x-ratelimit-reset-requests',
      raw: '1s',
      model: 'token-bucket',
    });
    expect(read(429, { ...base, 'x-ratelimit-remaining-tokens': '0' }).reading).toMatchObject({
      waitMs: 360_000 / 150_000,
      header: 'x-ratelimit-reset-tokens',
      model: 'token-bucket',
    });
    // Without the bucket's size, the whole reset (an upper bound).
    expect(
      read(429, { 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '20ms' }).reading
        ?.waitMs,
    ).toBe(20);
    expect(
      read(429, { 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '1h2m3.5s' }, 2 * HOUR)
        .reading?.waitMs,
    ).toBe(3_723_500);
  });

  it('Anthropic: anthropic-ratelimit-*-remaining with RFC 3339 -reset, read as token buckets', () => {
    const r = read(429, {
      'retry-after': '20',
      'anthropic-ratelimit-requests-limit': '50',
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': '2023-11-14T22:13:50Z',
      'anthropic-ratelimit-tokens-limit': '40000',
      'anthropic-ratelimit-tokens-remaining': '1200',
      'anthropic-ratelimit-tokens-reset': '2023-11-14T22:13:30Z',
      'anthropic-ratelimit-input-tokens-limit': '20000',
      'anthropic-ratelimit-input-tokens-remaining': '0',
      'anthropic-ratelimit-input-tokens-reset': '2023-11-14T22:13:25Z',
    });
    // Requests: full again in 30 s, one of 50 back every 600 ms; input tokens: one every 1.25 ms.
    // The server's own Retry-After is the longest wait.
    expect(r.reading).toMatchObject({ waitMs: 20_000, header: 'retry-after', model: 'wait' });
    const spent = read(200, {
      'anthropic-ratelimit-requests-limit': '50',
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': '2023-11-14T22:13:50Z',
    });
    expect(spent.reading).toMatchObject({
      waitMs: 600,
      header: 'anthropic-ratelimit-requests-reset',
      model: 'token-bucket',
    });
    const ok = read(200, {
      'anthropic-ratelimit-output-tokens-remaining': '0',
      'anthropic-ratelimit-output-tokens-reset': '2023-11-14T22:13:21.5Z',
    });
    expect(ok.reading?.waitMs).toBe(1500);
  });

  it('Shopify: a full leaky bucket waits for one request to leak', () => {
    expect(read(200, { 'X-Shopify-Shop-Api-Call-Limit': '39/40' }).reading).toBeUndefined();
    expect(read(200, { 'X-Shopify-Shop-Api-Call-Limit': '40/40' }).reading).toMatchObject({
      waitMs: 500,
      header: 'x-shopify-shop-api-call-limit',
    });
    expect(read(200, { 'X-Shopify-Shop-Api-Call-Limit': '400/400' }).reading?.waitMs).toBe(50);
    expect(
      read(429, { 'X-Shopify-Shop-Api-Call-Limit': '40/40', 'Retry-After': '2.0' }).reading?.waitMs,
    ).toBe(2000);
  });

  it('Stripe: a bare 429 needs backoff', () => {
    const r = read(429, {
      'content-type': 'application/json',
      'request-id': 'req_123',
      'stripe-should-retry': 'true',
    });
    expect(r).toMatchObject({ reading: undefined, needsBackoff: true, ignored: [] });
  });

  it('HubSpot: remaining 0 waits the rolling interval; secondly-remaining 0 waits a second', () => {
    const base = {
      'X-HubSpot-RateLimit-Daily': '250000',
      'X-HubSpot-RateLimit-Daily-Remaining': '249000',
      'X-HubSpot-RateLimit-Interval-Milliseconds': '10000',
      'X-HubSpot-RateLimit-Max': '100',
      'X-HubSpot-RateLimit-Remaining': '0',
    };
    expect(read(429, base).reading).toMatchObject({
      waitMs: 10_000,
      header: 'x-hubspot-ratelimit-interval-milliseconds',
    });
    expect(
      read(200, {
        'X-HubSpot-RateLimit-Secondly': '10',
        'X-HubSpot-RateLimit-Secondly-Remaining': '0',
      }).reading?.waitMs,
    ).toBe(1000);
    expect(read(200, { ...base, 'X-HubSpot-RateLimit-Remaining': '42' }).reading).toBeUndefined();
  });

  it('IETF draft 08+: RateLimit list with r and t, RateLimit-Policy for a missing t', () => {
    const r = read(200, {
      'RateLimit-Policy': '"default";q=100;w=60',
      RateLimit: '"default";r=0;t=30',
    });
    expect(r.reading).toMatchObject({ waitMs: 30_000, header: 'ratelimit', raw: '"default";r=0;t=30' });
    expect(read(200, { RateLimit: '"default";r=5;t=30' }).reading).toBeUndefined();
    // Several policies: the exhausted one with the longest t wins.
    expect(
      read(429, { RateLimit: '"burst";r=0;t=5, "day";r=0;t=3600, "minute";r=3;t=50' }).reading?.waitMs,
    ).toBe(3_600_000);
    // No t: the matching policy's window is an upper bound.
    expect(
      read(429, { 'RateLimit-Policy': '"burst";q=10;w=5, "default";q=100;w=60', RateLimit: '"default";r=0' })
        .reading,
    ).toMatchObject({ waitMs: 60_000, header: 'ratelimit-policy' });
  });

  it('IETF draft 07 dictionary form and the older RateLimit-Limit/-Remaining/-Reset fields (drafts 00-06)', () => {
    expect(read(429, { RateLimit: 'limit=100, remaining=0, reset=30' }).reading?.waitMs).toBe(30_000);
    const old = read(429, { 'RateLimit-Limit': '100', 'RateLimit-Remaining': '0', 'RateLimit-Reset': '30' });
    expect(old.reading).toMatchObject({ waitMs: 30_000, header: 'ratelimit-reset' });
    // Some servers put an epoch time in RateLimit-Reset: read by magnitude.
    expect(
      read(429, { 'RateLimit-Remaining': '0', 'RateLimit-Reset': String(NOW_S + 45) }).reading?.waitMs,
    ).toBe(45_000);
  });

  it('the longest wait of all usable headers wins', () => {
    const r = read(429, {
      'retry-after': '10',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': String(NOW_S + 300),
    });
    expect(r.reading).toMatchObject({ waitMs: 300_000, source: 'ratelimit-header' });
  });
});

describe('nonsense is capped or ignored, and always reported', () => {
  it('caps absurdly far waits to maxPause and reports them', () => {
    const r = read(429, { 'retry-after': '99999999' });
    expect(r.reading).toMatchObject({ waitMs: HOUR, capped: true, source: 'retry-after' });
    expect(r.ignored).toEqual([
      {
        header: 'retry-after',
        value: '99999999',
        reason: 'capped',
        status: 429,
        cappedTo: HOUR,
        requestedMs: 99_999_999_000,
      },
    ]);
    const far = read(200, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '99999999999999999' });
    expect(far.reading).toMatchObject({ waitMs: HOUR, capped: true });
    expect(read(429, { 'retry-after': 'Fri, 31 Dec 9999 23:59:59 GMT' }).reading?.waitMs).toBe(HOUR);
    expect(read(429, { 'retry-after': '60' }, 30_000).reading).toMatchObject({
      waitMs: 30_000,
      capped: true,
    });
  });

  it('reads a plain number too large for a double (400 digits) as a wait further away than any: capped', () => {
    const huge = '9'.repeat(400);
    const r = read(429, { 'retry-after': huge });
    expect(r.reading).toMatchObject({ waitMs: HOUR, capped: true, source: 'retry-after' });
    expect(r.needsBackoff).toBe(false);
    expect(r.ignored).toEqual([
      {
        header: 'retry-after',
        value: huge.slice(0, 200),
        reason: 'capped',
        status: 429,
        cappedTo: HOUR,
        requestedMs: Number.POSITIVE_INFINITY,
      },
    ]);
    const capped = (status: number, headers: Record<string, string>, header: string) => {
      const got = read(status, headers);
      expect(got.reading, header).toMatchObject({ waitMs: HOUR, capped: true, header });
      expect(got.ignored, header).toMatchObject([{ header, reason: 'capped', cappedTo: HOUR }]);
    };
    capped(429, { 'retry-after-ms': huge }, 'retry-after-ms');
    capped(200, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': huge }, 'x-ratelimit-reset');
    capped(
      200,
      { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset-after': `${huge}.5` },
      'x-ratelimit-reset-after',
    );
    capped(
      200,
      { 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': `${huge}s` },
      'x-ratelimit-reset-tokens',
    );
    capped(
      200,
      {
        'x-ratelimit-remaining-tokens': '0',
        'x-ratelimit-reset-tokens': huge,
        'x-ratelimit-limit-tokens': '100',
      },
      'x-ratelimit-reset-tokens',
    );
    capped(
      200,
      { 'x-hubspot-ratelimit-remaining': '0', 'x-hubspot-ratelimit-interval-milliseconds': huge },
      'x-hubspot-ratelimit-interval-milliseconds',
    );
    // A remaining count that large has budget left; a negative one is negative.
    expect(read(200, { 'x-ratelimit-remaining': huge, 'x-ratelimit-reset': '30' })).toMatchObject({
      reading: undefined,
      ignored: [],
    });
    expect(read(429, { 'retry-after': `-${huge}` }).ignored).toMatchObject([{ reason: 'negative' }]);
    // Not plain numbers: unparseable, as before.
    for (const odd of ['Infinity', '1e400']) {
      expect(read(429, { 'retry-after': odd }).ignored, odd).toMatchObject([{ reason: 'unparseable' }]);
      expect(
        read(200, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': odd }).ignored,
        odd,
      ).toMatchObject([{ header: 'x-ratelimit-reset', reason: 'unparseable' }]);
    }
  });

  it('reports unparseable and negative values; a 429 then backs off', () => {
    const r = read(429, { 'retry-after': 'soon', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '-5' });
    expect(r.reading).toBeUndefined();
    expect(r.needsBackoff).toBe(true);
    expect(r.ignored.map((i) => [i.header, i.reason])).toEqual([
      ['retry-after', 'unparseable'],
      ['x-ratelimit-reset', 'negative'],
    ]);
    expect(read(200, { 'x-ratelimit-remaining': 'lots' }).ignored).toMatchObject([{ reason: 'unparseable' }]);
    expect(read(200, { 'x-ratelimit-remaining': '-1' }).ignored).toMatchObject([{ reason: 'negative' }]);
    expect(read(429, { 'retry-after': '-3' }).ignored).toMatchObject([{ reason: 'negative' }]);
    expect(
      read(429, { 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '6 minutes' }).ignored,
    ).toMatchObject([{ header: 'x-ratelimit-reset-tokens', reason: 'unparseable' }]);
    expect(read(200, { RateLimit: '"default";r=zero;t=1' }).ignored).toMatchObject([
      { reason: 'unparseable' },
    ]);
    expect(read(200, { RateLimit: '"default;r=0' }).ignored).toMatchObject([{ reason: 'unparseable' }]);
    expect(read(200, { 'X-Shopify-Shop-Api-Call-Limit': 'full' }).ignored).toMatchObject([
      { reason: 'unparseable' },
    ]);
  });

  it('reports a remaining 0 with no reset, and an epoch reset in the past', () => {
    expect(read(200, { 'x-ratelimit-remaining': '0' }).ignored).toMatchObject([
      { header: 'x-ratelimit-remaining', reason: 'no-reset' },
    ]);
    expect(
      read(200, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(NOW_S - 30) }).ignored,
    ).toMatchObject([{ header: 'x-ratelimit-reset', reason: 'in-the-past' }]);
  });

  it('does not report a counter without reset when another header gave the wait (Kong)', () => {
    const r = read(429, {
      'X-RateLimit-Limit-Minute': '5',
      'X-RateLimit-Remaining-Minute': '0',
      'RateLimit-Limit': '5',
      'RateLimit-Remaining': '0',
      'RateLimit-Reset': '42',
    });
    expect(r.reading).toMatchObject({ waitMs: 42_000, header: 'ratelimit-reset' });
    expect(r.ignored).toEqual([]);
  });

  it('echoes at most 200 characters of a value', () => {
    const r = read(429, { 'retry-after': 'x'.repeat(10_000) });
    expect(r.ignored[0]?.value).toHaveLength(200);
  });
});

describe('repeated values joined by Headers', () => {
  it('splits joined durations, RFC 3339 times and numbers; keeps one HTTP date whole', () => {
    const h = new Headers();
    h.append('x-ratelimit-remaining-requests', '0');
    h.append('x-ratelimit-reset-requests', '1s');
    h.append('x-ratelimit-reset-requests', '6m0s');
    expect(readFeedback({ status: 429, headers: h }, opts).reading?.waitMs).toBe(360_000);
    const a = new Headers();
    a.append('anthropic-ratelimit-tokens-remaining', '0');
    a.append('anthropic-ratelimit-tokens-reset', '2023-11-14T22:13:30Z');
    a.append('anthropic-ratelimit-tokens-reset', '2023-11-14T22:13:50Z');
    expect(readFeedback({ status: 200, headers: a }, opts).reading?.waitMs).toBe(30_000);
    const d = new Headers({
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': new Date(NOW + 5000).toUTCString(),
    });
    expect(readFeedback({ status: 200, headers: d }, opts).reading?.waitMs).toBe(5000);
  });

  it('splits joined HTTP dates and mixed dates and seconds in Retry-After: the longest wait wins', () => {
    const dates = new Headers();
    dates.append('retry-after', new Date(NOW + 60_000).toUTCString());
    dates.append('retry-after', new Date(NOW + 120_000).toUTCString());
    const two = readFeedback({ status: 429, headers: dates }, opts);
    expect(two.ignored).toEqual([]);
    expect(two.reading).toMatchObject({ source: 'retry-after', waitMs: 120_000 });
    const mixed = new Headers();
    mixed.append('retry-after', '200');
    mixed.append('retry-after', new Date(NOW + 60_000).toUTCString());
    expect(readFeedback({ status: 429, headers: mixed }, opts).reading?.waitMs).toBe(200_000);
    // The same values given as an array read the same.
    const list = [new Date(NOW + 60_000).toUTCString(), new Date(NOW + 120_000).toUTCString()];
    expect(read(429, { 'retry-after': list }).reading?.waitMs).toBe(120_000);
  });

  it('a repeated Retry-After with an item that is neither a date nor a number is invalid as a whole, wherever that item is', () => {
    const date = new Date(NOW + 60_000).toUTCString();
    for (const items of [
      [date, 'soon'],
      ['soon', date],
      ['120', 'soon'],
      [date, '120', 'soon'],
    ]) {
      const joined = new Headers();
      for (const item of items) joined.append('retry-after', item);
      for (const headers of [joined, { 'retry-after': items }]) {
        const r = readFeedback({ status: 429, headers }, opts);
        expect(r.reading).toBeUndefined();
        expect(r.needsBackoff).toBe(true);
        expect(r.ignored).toEqual([
          expect.objectContaining({ header: 'retry-after', value: items.join(', '), reason: 'unparseable' }),
        ]);
      }
    }
    // A date already passed is skipped (reported), the other values still count.
    const past = new Date(NOW - 60_000).toUTCString();
    const r = read(429, { 'retry-after': [past, '30'] });
    expect(r.reading).toMatchObject({ source: 'retry-after', waitMs: 30_000 });
    expect(r.ignored).toEqual([expect.objectContaining({ header: 'retry-after', reason: 'in-the-past' })]);
  });

  it('reads a repeated HubSpot interval: a spent budget still pauses for the longest', () => {
    const h = new Headers();
    h.append('x-hubspot-ratelimit-remaining', '0');
    h.append('x-hubspot-ratelimit-interval-milliseconds', '10000');
    h.append('x-hubspot-ratelimit-interval-milliseconds', '10000');
    const r = readFeedback({ status: 200, headers: h }, opts);
    expect(r.ignored).toEqual([]);
    expect(r.reading?.waitMs).toBe(10_000);
    expect(
      read(200, {
        'x-hubspot-ratelimit-remaining': '0',
        'x-hubspot-ratelimit-interval-milliseconds': ['5000', '10000'],
      }).reading?.waitMs,
    ).toBe(10_000);
  });
});
