/**
 * Value parsers for rate-limit headers: plain numbers, Go durations (`6m0s`), HTTP dates,
 * RFC 3339 timestamps, and numeric resets read by magnitude (epoch ms, epoch s, delta s).
 * Pure functions: no clock, no throws; undefined when a value is not of the form.
 */

const NUMBER = /^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*$/;

/**
 * A plain decimal number (no exponent, no units), or undefined. One too large for a double
 * (309 digits and more) is ±Infinity: a wait or reset further away than any, which callers cap.
 */
export function parseNumber(text: string): number | undefined {
  const m = NUMBER.exec(text);
  return m ? Number(m[1]) : undefined;
}

const DURATION_PART = /(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|μs|ns)/y;
const DURATION_UNITS: Record<string, number> = {
  h: 3_600_000,
  m: 60_000,
  s: 1000,
  ms: 1,
  us: 0.001,
  µs: 0.001,
  μs: 0.001,
  ns: 0.000_001,
};

/**
 * A Go-style duration as OpenAI sends it (`1s`, `6m0s`, `20ms`, `1h2m3.5s`), in ms.
 * A leading `-` gives a negative number (which callers report as negative).
 */
export function parseGoDuration(text: string): number | undefined {
  return readGoDuration(text)?.ms;
}

/**
 * parseGoDuration() with the precision of the value as sent (ms): the unit of its last
 * part over its decimals (`59.88s` → 10, `6m0s` → 1000, `20ms` → 1).
 */
export function readGoDuration(text: string): { ms: number; precisionMs: number } | undefined {
  let s = text.trim();
  let sign = 1;
  if (s.startsWith('-')) {
    sign = -1;
    s = s.slice(1);
  } else if (s.startsWith('+')) {
    s = s.slice(1);
  }
  if (s === '') return undefined;
  if (s === '0') return { ms: 0, precisionMs: 1 };
  let total = 0;
  let precisionMs = 1;
  let at = 0;
  while (at < s.length) {
    DURATION_PART.lastIndex = at;
    const m = DURATION_PART.exec(s);
    if (!m) return undefined;
    const unit = DURATION_UNITS[m[2]!]!;
    total += Number(m[1]) * unit;
    precisionMs = unit / 10 ** decimals(m[1]!);
    at = DURATION_PART.lastIndex;
  }
  // Digits too many for a double add up to Infinity: further away than any wait, capped by callers.
  return { ms: sign * total, precisionMs };
}

/** Digits after the decimal point of a plain decimal number as written (`"64.57"` → 2). */
export function decimals(text: string): number {
  const dot = text.indexOf('.');
  if (dot < 0) return 0;
  let n = 0;
  for (let i = dot + 1; i < text.length && text.charCodeAt(i) >= 48 && text.charCodeAt(i) <= 57; i++) n++;
  return n;
}

/** Longer than any HTTP date ("Wednesday, 21-Oct-15 07:28:00 GMT" has 33 characters). */
const MAX_DATE_LENGTH = 64;
/** A day name (or month, for asctime), then an optional comma and a space. */
const DATE_START = /^[A-Za-z]{3,9},?\s/;
const DATE_TIME = /\d:\d\d:\d\d/;
/** A day name alone (before the comma of an IMF-fixdate or RFC 850 date). */
const DAY_NAME = /^\s*[A-Za-z]{3,9}$/;
const LINE_BREAK = /[\n\r\u2028\u2029]/;
const DATE_ZONE = /\b(?:GMT|UTC|UT)\b|[+-]\d{4}$/i;
const RFC3339 =
  /^\s*(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)\s*([Zz]|[+-]\d{2}:?\d{2})\s*$/;

/** An HTTP date (IMF-fixdate, RFC 850 or asctime), in epoch ms. */
export function parseHttpDate(text: string): number | undefined {
  // Each check is linear, and the length is bounded before Date.parse sees the text.
  const trimmed = text.trim();
  if (trimmed.length > MAX_DATE_LENGTH) return undefined;
  if (!DATE_START.test(trimmed) || !DATE_TIME.test(trimmed) || LINE_BREAK.test(trimmed)) return undefined;
  // asctime carries no zone; HTTP dates are always GMT.
  const t = Date.parse(DATE_ZONE.test(trimmed) ? trimmed : `${trimmed} GMT`);
  return Number.isFinite(t) ? t : undefined;
}

/**
 * The items of a header value that a Headers object joined (", "), split again at every comma
 * except the one inside an HTTP date ("Wed, 21 Oct 2015 07:28:00 GMT, 120" is two items).
 * Linear: each date check sees at most MAX_DATE_LENGTH characters.
 */
export function splitJoined(value: string): string[] {
  const parts = value.split(',');
  const out: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (i + 1 < parts.length && DAY_NAME.test(part)) {
      const date = `${part},${parts[i + 1]}`;
      if (parseHttpDate(date) !== undefined) {
        out.push(date);
        i++;
        continue;
      }
    }
    out.push(part);
  }
  return out;
}

/** An RFC 3339 timestamp (`2024-05-01T12:00:30Z`, fractional seconds and offsets allowed), in epoch ms. */
export function parseRfc3339(text: string): number | undefined {
  return readRfc3339(text)?.ms;
}

/** parseRfc3339() with the precision of the value as sent (ms): 1000 for whole seconds, 100 for tenths… */
export function readRfc3339(text: string): { ms: number; precisionMs: number } | undefined {
  const m = RFC3339.exec(text);
  if (!m) return undefined;
  let zone = m[3]!;
  if (zone === 'z') zone = 'Z';
  else if (zone.length === 5) zone = `${zone.slice(0, 3)}:${zone.slice(3)}`;
  // Date.parse keeps milliseconds only; longer fractions are truncated by trimming them here.
  const time = m[2]!.replace(/(\.\d{3})\d+$/, '$1');
  const t = Date.parse(`${m[1]}T${time}${zone}`);
  if (!Number.isFinite(t)) return undefined;
  const precisionMs = m[2]!.length === 5 ? 60_000 : Math.max(1, 1000 / 10 ** decimals(m[2]!));
  return { ms: t, precisionMs };
}

/**
 * Interprets a numeric reset value by its magnitude relative to `now` (epoch ms):
 * - `value ≥ now / 2`        → epoch milliseconds (today ≈ 8.5e11 and up);
 * - `value ≥ now / 2000`     → epoch seconds (today ≈ 8.5e8 and up; GitHub, Twitter);
 * - otherwise                → seconds from now (delta).
 * The boundaries sit a factor of 2 below the present in each unit, so a real epoch
 * value is never read in the wrong unit, and a delta would need to exceed ~27 years
 * to be taken for an epoch time (it would be capped anyway).
 * Returns the wait in ms (negative when an epoch time has passed) and which form was read.
 */
export function interpretReset(
  value: number,
  now: number,
): { waitMs: number; form: 'epoch-ms' | 'epoch-s' | 'delta-s' } {
  if (value >= now / 2) return { waitMs: value - now, form: 'epoch-ms' };
  if (value >= now / 2000) return { waitMs: value * 1000 - now, form: 'epoch-s' };
  return { waitMs: value * 1000, form: 'delta-s' };
}
