/**
 * Header parsing is linear in the size of the values: a value of 100 KB of any shape,
 * in any header the parser reads, is read in a few milliseconds. A regular expression
 * that backtracks (an HTTP date pattern once took 24.7 s on 100 KB of "Mon" + spaces +
 * ",x") fails the time bound by orders of magnitude. The bound is generous (100 ms of CPU time, the
 * fastest of three calls); a linear parse of 100 KB takes 0.1–2 ms.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readFeedback } from '../../src/feedback/headers.js';
import { parseStructured } from '../../src/feedback/structured.js';
import { parseGoDuration, parseHttpDate, parseNumber, parseRfc3339 } from '../../src/feedback/values.js';

const NOW = 1_700_000_000_000;
const SIZE = 100_000;
const BOUND_MS = 100;

/** Every header the parser reads, with the partner that makes it be read (a spent remaining count). */
const HEADERS: readonly [string, Record<string, string>][] = [
  ['retry-after', {}],
  ['retry-after-ms', {}],
  ['x-ms-retry-after-ms', {}],
  ['date', { 'retry-after': 'Wed, 21 Oct 2015 07:28:00 GMT' }],
  ['x-ratelimit-remaining', { 'x-ratelimit-reset': '30' }],
  ['x-ratelimit-reset', { 'x-ratelimit-remaining': '0' }],
  ['x-ratelimit-reset-after', { 'x-ratelimit-remaining': '0' }],
  ['x-rate-limit-remaining', { 'x-rate-limit-reset': '30' }],
  ['x-rate-limit-reset', { 'x-rate-limit-remaining': '0' }],
  ['ratelimit-remaining', { 'ratelimit-reset': '30' }],
  ['ratelimit-reset', { 'ratelimit-remaining': '0' }],
  ['ratelimit', { 'ratelimit-policy': '"default";q=10;w=60' }],
  ['ratelimit-policy', { ratelimit: '"default";r=0' }],
  ['x-ratelimit-remaining-requests', { 'x-ratelimit-reset-requests': '1s' }],
  ['x-ratelimit-reset-requests', { 'x-ratelimit-remaining-requests': '0' }],
  [
    'x-ratelimit-limit-requests',
    { 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '1s' },
  ],
  [
    'anthropic-ratelimit-requests-remaining',
    { 'anthropic-ratelimit-requests-reset': '2023-11-14T22:13:50Z' },
  ],
  ['anthropic-ratelimit-requests-reset', { 'anthropic-ratelimit-requests-remaining': '0' }],
  ['x-shopify-shop-api-call-limit', {}],
  ['x-hubspot-ratelimit-remaining', { 'x-hubspot-ratelimit-interval-milliseconds': '10000' }],
  ['x-hubspot-ratelimit-interval-milliseconds', { 'x-hubspot-ratelimit-remaining': '0' }],
  ['x-hubspot-ratelimit-secondly-remaining', {}],
];

/** The headers a 429 with their partners makes the parser read. */
const READ_ON_429 = new Set(
  HEADERS.map(([name]) => name).filter((name) => name !== 'x-ratelimit-limit-requests'),
);

/** Starts that lead a parser into a form (a weekday, a number, a date, a structured item…). */
const PREFIXES = [
  '',
  'Mon',
  'Mon,',
  'Wed, 21 Oct 2015 ',
  'Wednesday, ',
  '1',
  '-',
  '0.',
  '1s',
  '2023-11-14T22:13:50',
  '"default"',
  '"default";r=0;t=',
  'limit=10, remaining=',
  'a;b=',
  '40/',
  '+0000',
];
/** Units repeated to fill the value: the shapes backtracking regular expressions choke on. */
const UNITS = [
  ' ',
  '\t',
  ',',
  ', ',
  '0',
  '9',
  '1.',
  'a',
  'Mon ',
  'GMT ',
  '"',
  '\\"',
  ';',
  '=',
  ';a=1',
  'a=1,',
  '1s',
  '1h',
  ':00',
  '12:00:00 ',
  '-0000',
  ' ,x',
  '"a";r=0,',
  '/',
];
const SUFFIXES = ['', ',x', 'x', ' GMT', 'Z', '=', ';', '"', ' 12:00:00', 's', ':', '/40'];

/** A value of about SIZE characters: a prefix, a unit (or two alternating) repeated, a suffix. */
function shape(prefix: string, unit: string, other: string | undefined, suffix: string): string {
  const block = other === undefined ? unit : unit + other;
  return prefix + block.repeat(Math.ceil(SIZE / block.length)).slice(0, SIZE) + suffix;
}

/** The rest of a shape that each run draws; every run then tries every unit (and prefix). */
const rest = fc.record({
  other: fc.option(fc.constantFrom(...UNITS), { freq: 1, nil: undefined }),
  suffix: fc.constantFrom(...SUFFIXES),
});

/**
 * The CPU time `fn` takes (ms), read from the process's CPU clock rather than the wall clock:
 * on a loaded machine a call waits for a core for many times its own work, which is no
 * parser's fault. A call over the bound is measured twice more and the fastest counts (a
 * garbage collection on another thread of the process counts too); a backtracking parser is
 * slow every time.
 */
function timed(fn: () => unknown): number {
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 3; i++) {
    const start = process.cpuUsage();
    fn();
    const used = process.cpuUsage(start);
    best = Math.min(best, (used.user + used.system) / 1000);
    // Within the bound: done. Ten times over it is no stall: it fails at once.
    if (best < BOUND_MS || best >= 10 * BOUND_MS) break;
  }
  return best;
}

const parsers: [string, (s: string) => unknown][] = [
  ['parseNumber', parseNumber],
  ['parseGoDuration', parseGoDuration],
  ['parseHttpDate', parseHttpDate],
  ['parseRfc3339', parseRfc3339],
  ['parseStructured', parseStructured],
];

function expectFast(ms: number, what: string, value: string): void {
  expect(ms, `${what}: ${JSON.stringify(value.slice(0, 40))}… took ${ms.toFixed(1)} ms of CPU`).toBeLessThan(
    BOUND_MS,
  );
}

describe('header parsing is linear (property)', () => {
  it('each value parser reads a 100 KB value of any adversarial shape within the time bound', () => {
    fc.assert(
      fc.property(fc.constantFrom(...parsers), rest, ([name, parse], { other, suffix }) => {
        for (const prefix of PREFIXES) {
          for (const unit of UNITS) {
            const value = shape(prefix, unit, other, suffix);
            expectFast(
              timed(() => parse(value)),
              name,
              value,
            );
          }
        }
      }),
      { numRuns: 40, seed: 12, endOnFailure: true },
    );
  });

  it('every header reader reads a 100 KB value of any adversarial shape within the time bound, with no length cap', () => {
    const options = { now: NOW, maxPause: 3_600_000, maxValueLength: Number.POSITIVE_INFINITY };
    fc.assert(
      fc.property(
        fc.constantFrom(...HEADERS),
        fc.constantFrom(...PREFIXES),
        rest,
        fc.constantFrom(200, 429, undefined),
        ([name, partners], prefix, { other, suffix }, status) => {
          for (const unit of UNITS) {
            const value = shape(prefix, unit, other, suffix);
            const headers = { ...partners, [name]: value };
            const input = status === undefined ? headers : { status, headers };
            expectFast(
              timed(() => readFeedback(input, options)),
              name,
              value,
            );
          }
        },
      ),
      { numRuns: 60, seed: 11, endOnFailure: true },
    );
  });

  it('a value longer than the cap is reported as too long and not parsed, in every header', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...HEADERS.filter(([name]) => READ_ON_429.has(name))),
        fc.constantFrom(...PREFIXES),
        fc.constantFrom(...UNITS),
        rest,
        fc.constantFrom(429, undefined),
        ([name, partners], prefix, unit, { other, suffix }, status) => {
          const value = shape(prefix, unit, other, suffix);
          const headers = { ...partners, [name]: value };
          const input = status === undefined ? headers : { status, headers };
          let parsed: ReturnType<typeof readFeedback> | undefined;
          expectFast(
            timed(() => {
              parsed = readFeedback(input, { now: NOW, maxPause: 3_600_000 });
            }),
            name,
            value,
          );
          expect(parsed?.ignored).toContainEqual({
            header: name,
            value: value.slice(0, 200),
            reason: 'too-long',
            status,
          });
          // The header is read as if it were absent: it gives no wait.
          expect(parsed?.reading?.header).not.toBe(name);
        },
      ),
      { numRuns: 300, seed: 13, endOnFailure: true },
    );
  });

  it('the reported shape: "Mon" + spaces + ",x" in X-RateLimit-Remaining on a 200', () => {
    const value = `Mon${' '.repeat(SIZE)},x`;
    const headers = { 'x-ratelimit-remaining': value };
    const options = { now: NOW, maxPause: 3_600_000, maxValueLength: Number.POSITIVE_INFINITY };
    expectFast(
      timed(() => readFeedback({ status: 200, headers }, options)),
      'x-ratelimit-remaining',
      value,
    );
    expectFast(
      timed(() => parseHttpDate(value)),
      'parseHttpDate',
      value,
    );
  });
});
