import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readFeedback } from '../../src/feedback/headers.js';
import { observe } from '../../src/feedback/observe.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { FakeInternals } from './fake-internals.js';

const NOW = 1_700_000_000_000;
const MAX_PAUSE = 3_600_000;

/** Every header name the parser reads. */
const KNOWN = [
  'retry-after',
  'retry-after-ms',
  'x-ms-retry-after-ms',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
  'x-ratelimit-reset-after',
  'x-rate-limit-remaining',
  'x-rate-limit-reset',
  'ratelimit',
  'ratelimit-policy',
  'ratelimit-remaining',
  'ratelimit-reset',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-tokens',
  'anthropic-ratelimit-requests-remaining',
  'anthropic-ratelimit-requests-reset',
  'x-shopify-shop-api-call-limit',
  'x-hubspot-ratelimit-remaining',
  'x-hubspot-ratelimit-interval-milliseconds',
  'x-hubspot-ratelimit-secondly-remaining',
  'date',
] as const;

/** Randomly re-cases a header name (plain objects may use any case). */
const recase = (name: string) =>
  fc
    .array(fc.boolean(), { minLength: name.length, maxLength: name.length })
    .map((flags) => [...name].map((c, i) => (flags[i] ? c.toUpperCase() : c)).join(''));

/** Values no header format accepts: '~' never starts a number, duration, date or structured item. */
const unparseable = fc.oneof(
  fc.constantFrom(
    '',
    '   ',
    'NaN',
    'Infinity',
    '-Infinity',
    '1e309',
    '0x1F',
    'null',
    'soon',
    '12abc',
    '--5',
    '5..5',
    '⏰',
    '1s2',
    'true',
  ),
  fc.string({ maxLength: 40 }).map((s) => `~${s}`),
);
const negative = fc.double({ min: 0.001, max: 1e12, noNaN: true }).map((n) => `-${n.toFixed(3)}`);
/** Waits far beyond maxPause (seconds for delta forms). */
const absurdSeconds = fc.integer({ min: MAX_PAUSE / 1000 + 1, max: 400_000_000 }).map(String);
const absurdEpochMs = fc.integer({ min: NOW + MAX_PAUSE + 1, max: NOW * 50 }).map(String);
const farDate = fc
  .integer({ min: NOW + MAX_PAUSE + 1000, max: 253_402_300_799_000 })
  .map((t) => new Date(t).toUTCString());
const farRfc3339 = fc
  .integer({ min: NOW + MAX_PAUSE + 1000, max: 253_402_300_799_000 })
  .map((t) => new Date(t).toISOString());
const pastEpochS = fc.integer({ min: NOW / 2000, max: NOW / 1000 - 1 }).map(String);
const pastDate = fc.integer({ min: 0, max: NOW - 1000 }).map((t) => new Date(t).toUTCString());

const badReset = fc.oneof(unparseable, negative, absurdSeconds, absurdEpochMs, farDate, pastEpochS, pastDate);
const badDelta = fc.oneof(unparseable, negative, absurdSeconds);
const badDuration = fc.oneof(
  unparseable,
  negative,
  fc.integer({ min: 2, max: 10_000 }).map((h) => `${h}h`),
  fc.integer({ min: 61, max: 1_000_000 }).map((m) => `${m}m0s`),
  farRfc3339,
);
const badRemaining = fc.oneof(unparseable, negative);

/** One malformed header in a position the parser consults, plus the header(s) it should be reported under. */
interface Slot {
  status: number | undefined;
  headers: Record<string, string>;
  reportedAs: string[];
}

const slot: fc.Arbitrary<Slot> = fc.oneof(
  fc
    .record({
      status: fc.constantFrom(429, 503, 403, undefined),
      value: fc.oneof(badDelta, farDate, pastDate),
    })
    .map(({ status, value }) => ({ status, headers: { 'retry-after': value }, reportedAs: ['retry-after'] })),
  fc
    .record({ status: fc.constantFrom(429, 503, 403, undefined), value: fc.oneof(unparseable, negative) })
    .map(({ status, value }) => ({
      status,
      headers: { 'retry-after-ms': value },
      reportedAs: ['retry-after-ms'],
    })),
  fc
    .record({ status: fc.constantFrom(200, 403, 429, undefined), value: badReset })
    .map(({ status, value }) => ({
      status,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': value },
      reportedAs: ['x-ratelimit-reset'],
    })),
  fc.record({ status: fc.constantFrom(200, 429), value: badDelta }).map(({ status, value }) => ({
    status,
    headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset-after': value },
    reportedAs: ['x-ratelimit-reset-after'],
  })),
  fc.record({ status: fc.constantFrom(200, 429), value: badRemaining }).map(({ status, value }) => ({
    status,
    headers: { 'x-ratelimit-remaining': value, 'x-ratelimit-reset': '30' },
    reportedAs: ['x-ratelimit-remaining'],
  })),
  fc.record({ status: fc.constantFrom(200, 429), value: badReset }).map(({ status, value }) => ({
    status,
    headers: { 'ratelimit-remaining': '0', 'ratelimit-reset': value },
    reportedAs: ['ratelimit-reset'],
  })),
  fc
    .record({
      status: fc.constantFrom(200, 429),
      value: badDuration,
      kind: fc.constantFrom('requests', 'tokens'),
    })
    .map(({ status, value, kind }) => ({
      status,
      headers: { [`x-ratelimit-remaining-${kind}`]: '0', [`x-ratelimit-reset-${kind}`]: value },
      reportedAs: [`x-ratelimit-reset-${kind}`],
    })),
  fc
    .record({
      status: fc.constantFrom(200, 429),
      value: fc.oneof(unparseable, farRfc3339, pastDate, negative),
    })
    .map(({ status, value }) => ({
      status,
      headers: { 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': value },
      reportedAs: ['anthropic-ratelimit-requests-reset'],
    })),
  fc
    .record({
      status: fc.constantFrom(200, 429),
      value: fc.oneof(
        unparseable,
        negative.map((n) => `"default";r=0;t=${n}`),
        absurdSeconds.map((n) => `"default";r=0;t=${n}`),
        negative.map((n) => `"default";r=${n};t=5`),
        fc.constant('"default";r=0'),
        absurdSeconds.map((n) => `limit=10, remaining=0, reset=${n}`),
      ),
    })
    .map(({ status, value }) => ({ status, headers: { ratelimit: value }, reportedAs: ['ratelimit'] })),
  fc
    .record({
      status: fc.constantFrom(200, 429),
      value: fc.oneof(
        unparseable,
        fc.nat(100).map((n) => `${n}/0`),
        negative.map((n) => `${n}/40`),
      ),
    })
    .map(({ status, value }) => ({
      status,
      headers: { 'x-shopify-shop-api-call-limit': value },
      reportedAs: ['x-shopify-shop-api-call-limit'],
    })),
  fc
    .record({ status: fc.constantFrom(200, 429), value: fc.oneof(unparseable, negative) })
    .map(({ status, value }) => ({
      status,
      headers: { 'x-hubspot-ratelimit-remaining': '0', 'x-hubspot-ratelimit-interval-milliseconds': value },
      reportedAs: ['x-hubspot-ratelimit-interval-milliseconds'],
    })),
);

/** Extra noise: unknown headers with any value. */
const noise = fc.dictionary(
  fc.string({ minLength: 1, maxLength: 12 }).map((s) => `x-noise-${s.replace(/[^a-z0-9-]/gi, 'a')}`),
  fc.string({ maxLength: 30 }),
  { maxKeys: 4 },
);

function fakeValve() {
  return new FakeInternals(new FakeClock(NOW), {
    maxPause: MAX_PAUSE,
    backoffInitial: 1000,
    backoffMax: 60_000,
  });
}

describe('malformed header sets (property)', () => {
  it('never throw, never pause beyond maxPause, and are always reported (>= 200 sets)', () => {
    let runs = 0;
    fc.assert(
      fc.property(
        slot,
        noise,
        fc.array(fc.boolean(), { maxLength: 0 }),
        fc.boolean(),
        (s, extra, _unused, asArrays) => {
          runs++;
          const headers: Record<string, string | string[]> = { ...extra };
          for (const [k, v] of Object.entries(s.headers)) headers[k] = asArrays ? [v] : v;
          const input = s.status === undefined ? headers : { status: s.status, headers };
          const parsed = readFeedback(input, { now: NOW, maxPause: MAX_PAUSE });
          if (parsed.reading) {
            expect(parsed.reading.waitMs).toBeGreaterThan(0);
            expect(parsed.reading.waitMs).toBeLessThanOrEqual(MAX_PAUSE);
            expect(parsed.reading.until).toBe(NOW + parsed.reading.waitMs);
          }
          const reported = parsed.ignored.map((i) => i.header);
          expect(reported.some((h) => s.reportedAs.includes(h))).toBe(true);

          // observe() through a valve: same reports as events, pauses capped, no throw.
          const valve = fakeValve();
          const reading = observe(valve, input);
          expect(valve.eventsOf('feedback-ignored')).toHaveLength(parsed.ignored.length);
          for (const p of valve.pauses) expect(p.ms).toBeLessThanOrEqual(MAX_PAUSE);
          if (s.status === 429 && !parsed.reading) expect(reading?.source).toBe('backoff');
        },
      ),
      { numRuns: 400, seed: 5 },
    );
    expect(runs).toBeGreaterThanOrEqual(200);
  });

  it('random values in every known header, random case, random status: never throw, never exceed the cap', () => {
    const anyValue = fc.oneof(
      fc.string({ maxLength: 40 }),
      unparseable,
      negative,
      absurdSeconds,
      absurdEpochMs,
      farDate,
      fc.double({ noNaN: false }).map(String),
      fc.integer().map(String),
      fc.constant('0'),
    );
    const entry = fc.tuple(
      fc.constantFrom(...KNOWN).chain(recase),
      fc.oneof(anyValue, fc.array(anyValue, { maxLength: 3 })),
    );
    const status = fc.oneof(
      fc.constantFrom(undefined, 200, 204, 301, 403, 429, 500, 503),
      fc.integer({ min: -1000, max: 1000 }),
      fc.constantFrom('429', 'abc', Number.NaN, null),
    );
    fc.assert(
      fc.property(fc.array(entry, { maxLength: 10 }), status, (entries, st) => {
        const headers: Record<string, string | string[]> = {};
        for (const [k, v] of entries) headers[k] = v;
        const input = { status: st, headers };
        const parsed = readFeedback(input, { now: NOW, maxPause: MAX_PAUSE });
        if (parsed.reading) {
          expect(Number.isFinite(parsed.reading.waitMs)).toBe(true);
          expect(parsed.reading.waitMs).toBeGreaterThan(0);
          expect(parsed.reading.waitMs).toBeLessThanOrEqual(MAX_PAUSE);
        }
        const valve = fakeValve();
        const reading = observe(valve, input);
        if (reading) expect(reading.waitMs).toBeLessThanOrEqual(MAX_PAUSE);
        for (const p of valve.pauses) {
          expect(p.ms).toBeGreaterThan(0);
          expect(p.ms).toBeLessThanOrEqual(MAX_PAUSE);
        }
      }),
      { numRuns: 1000, seed: 7 },
    );
  });
});
