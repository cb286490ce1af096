/**
 * Pure parsers for provider rate-limit feedback. Nothing here reads the system clock,
 * sets a timer or throws on header values: `now` comes from the caller (the valve's
 * clock), and every value that cannot be used is returned in `ignored` instead.
 *
 * See docs/provider-feedback.md for the table of formats and how each is read.
 */

/** Where a reading came from. `backoff` readings are made by backoff.ts, never here. */
export type FeedbackSource = 'retry-after' | 'ratelimit-header' | 'backoff';

/** What observe() read from a response. */
export interface FeedbackReading {
  /** How long the valve pauses (ms), already capped to `maxPause`. */
  readonly waitMs: number;
  /** `now + waitMs` on the valve's clock (epoch ms). */
  readonly until: number;
  readonly source: FeedbackSource;
  /** Lower-case name of the header that gave the wait; undefined for backoff. */
  readonly header: string | undefined;
  /** That header's value as received; undefined for backoff. */
  readonly raw: string | undefined;
  /** The response status, when the input carried one. */
  readonly status: number | undefined;
  /** True when the provider asked for more than `maxPause` and the wait was cut to it. */
  readonly capped?: boolean;
  /** Backoff readings only: how many header-less 429s in a row this one is (1 for the first). */
  readonly attempt?: number;
}

/** Why a header value was not used as sent. */
export type IgnoredReason =
  /** Not a number, date or duration that this header allows. */
  | 'unparseable'
  /** A negative wait or count. */
  | 'negative'
  /** An absolute reset time (date or epoch) that has already passed. */
  | 'in-the-past'
  /** A wait longer than `maxPause`: used, but cut to `maxPause` (see `cappedTo`). */
  | 'capped'
  /** A remaining count of 0 with no usable reset time next to it. */
  | 'no-reset'
  /** The input object itself could not be read (a getter threw). */
  | 'unreadable-input';

/** Payload of the `'feedback-ignored'` event: one header value that was not used as sent. */
export interface FeedbackIgnored {
  readonly header: string;
  /** The value as received (at most 200 characters). */
  readonly value: string;
  readonly reason: IgnoredReason;
  readonly status: number | undefined;
  /** For `reason: 'capped'`: the wait that was used instead (ms). */
  readonly cappedTo?: number;
  /** For `reason: 'capped'`: the wait the header asked for (ms). */
  readonly requestedMs?: number;
}

/** The parser's answer: the header-derived reading (if any), what was ignored, and whether backoff applies. */
export interface ParsedFeedback {
  readonly status: number | undefined;
  /** The longest usable wait any header gave, capped; undefined when none did. */
  readonly reading: FeedbackReading | undefined;
  readonly ignored: FeedbackIgnored[];
  /** A 429 without a usable wait: the caller should pause with exponential backoff. */
  readonly needsBackoff: boolean;
}

export interface ParseOptions {
  /** Current time, epoch ms, from the valve's clock. */
  readonly now: number;
  /** Longest wait ever returned (ms). */
  readonly maxPause: number;
}

/** Headers of one response: lower-case name → every value received for it. */
export type HeaderMap = Map<string, string[]>;

/** A response reduced to what the parser needs. */
export interface HeaderBag {
  readonly status: number | undefined;
  readonly headers: HeaderMap;
}

/** Statuses on which Retry-After / retry-after-ms pause (403: GitHub's secondary limits). */
const RETRY_AFTER_STATUSES = new Set([403, 429, 503]);

/** The longest value echoed in an ignored report. */
const MAX_ECHO = 200;

// ---------------------------------------------------------------------------
// Input normalisation
// ---------------------------------------------------------------------------

/**
 * Reduces a fetch `Response` (global or undici), a `Headers`, `{ status, headers }`
 * (also `{ statusCode, headers }` as Node's IncomingMessage and got use), or a bare
 * header object (plain object with any-case keys, arrays for repeated headers,
 * Node's IncomingHttpHeaders, a Map) to a status and a header map.
 * Throws TypeError only when `input` is not an object at all.
 */
export function toHeaderBag(input: unknown): HeaderBag {
  if (input === null || (typeof input !== 'object' && typeof input !== 'function')) {
    throw new TypeError(
      `Expected a Response, a Headers, or { status, headers }, got ${input === null ? 'null' : typeof input}`,
    );
  }
  const headers: HeaderMap = new Map();
  if (isHeadersLike(input)) {
    addAll(headers, input);
    return { status: undefined, headers };
  }
  const record = input as Record<string, unknown>;
  const responseLike = 'headers' in record || 'status' in record || 'statusCode' in record;
  if (!responseLike) {
    addAll(headers, input);
    return { status: undefined, headers };
  }
  addAll(headers, record.headers);
  return { status: toStatus(record.status ?? record.statusCode), headers };
}

function isHeadersLike(value: unknown): value is { forEach(cb: (v: unknown, k: unknown) => void): void } {
  const v = value as { forEach?: unknown; get?: unknown };
  return typeof v.forEach === 'function' && typeof v.get === 'function';
}

function toStatus(value: unknown): number | undefined {
  const n = typeof value === 'string' && /^\s*\d{3}\s*$/.test(value) ? Number(value) : value;
  return typeof n === 'number' && Number.isInteger(n) && n >= 100 && n <= 599 ? n : undefined;
}

function addAll(map: HeaderMap, headers: unknown): void {
  if (headers === null || headers === undefined || typeof headers !== 'object') return;
  if (isHeadersLike(headers)) {
    headers.forEach((value, key) => {
      add(map, key, value);
    });
    return;
  }
  for (const key of Object.keys(headers)) add(map, key, (headers as Record<string, unknown>)[key]);
}

function add(map: HeaderMap, key: unknown, value: unknown): void {
  if (value === undefined || value === null) return;
  const name = String(key).trim().toLowerCase();
  if (name === '') return;
  let list = map.get(name);
  if (!list) {
    list = [];
    map.set(name, list);
  }
  if (Array.isArray(value)) {
    for (const v of value) if (v !== undefined && v !== null) list.push(String(v));
  } else {
    list.push(String(value));
  }
}

// ---------------------------------------------------------------------------
// Value parsers (exported for tests)
// ---------------------------------------------------------------------------

const NUMBER = /^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*$/;

/** A plain decimal number (no exponent, no units), or undefined. */
export function parseNumber(text: string): number | undefined {
  const m = NUMBER.exec(text);
  if (!m) return undefined;
  const n = Number(m[1]);
  return Number.isFinite(n) ? n : undefined;
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
  let s = text.trim();
  let sign = 1;
  if (s.startsWith('-')) {
    sign = -1;
    s = s.slice(1);
  } else if (s.startsWith('+')) {
    s = s.slice(1);
  }
  if (s === '') return undefined;
  if (s === '0') return 0;
  let total = 0;
  DURATION_PART.lastIndex = 0;
  let at = 0;
  while (at < s.length) {
    DURATION_PART.lastIndex = at;
    const m = DURATION_PART.exec(s);
    if (!m) return undefined;
    total += Number(m[1]) * DURATION_UNITS[m[2]!]!;
    at = DURATION_PART.lastIndex;
  }
  return Number.isFinite(total) ? sign * total : undefined;
}

const HTTP_DATE = /^\s*[A-Za-z]{3,9},?\s+.*\d{1,2}:\d{2}:\d{2}.*$/;
const RFC3339 =
  /^\s*(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)\s*([Zz]|[+-]\d{2}:?\d{2})\s*$/;

/** An HTTP date (IMF-fixdate, RFC 850 or asctime), in epoch ms. */
export function parseHttpDate(text: string): number | undefined {
  if (!HTTP_DATE.test(text)) return undefined;
  // asctime carries no zone; HTTP dates are always GMT.
  const zoned = /\b(?:GMT|UTC|UT)\b|[+-]\d{4}\s*$/i.test(text) ? text : `${text.trim()} GMT`;
  const t = Date.parse(zoned);
  return Number.isFinite(t) ? t : undefined;
}

/** An RFC 3339 timestamp (`2024-05-01T12:00:30Z`, fractional seconds and offsets allowed), in epoch ms. */
export function parseRfc3339(text: string): number | undefined {
  const m = RFC3339.exec(text);
  if (!m) return undefined;
  let zone = m[3]!;
  if (zone === 'z') zone = 'Z';
  else if (zone.length === 5) zone = `${zone.slice(0, 3)}:${zone.slice(3)}`;
  // Date.parse keeps milliseconds only; longer fractions are truncated by trimming them here.
  const time = m[2]!.replace(/(\.\d{3})\d+$/, '$1');
  const t = Date.parse(`${m[1]}T${time}${zone}`);
  return Number.isFinite(t) ? t : undefined;
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

// ---------------------------------------------------------------------------
// Structured fields (IETF RateLimit / RateLimit-Policy)
// ---------------------------------------------------------------------------

type SfBare = string | number | boolean;
interface SfMember {
  /** The item's value (a string or token), or for a dictionary member its key. */
  readonly name: string;
  /** A dictionary member's value (`limit=10`); undefined for list items. */
  readonly value: SfBare | undefined;
  readonly params: ReadonlyMap<string, SfBare>;
}

/**
 * A lenient parser for the RFC 8941 shapes the RateLimit drafts use: a List of items
 * with parameters (`"default";r=0;t=30, "day";r=10;t=3600`, drafts 08+) or a Dictionary
 * (`limit=10, remaining=0, reset=5`, draft 07). Returns undefined when malformed.
 */
export function parseStructured(text: string): SfMember[] | undefined {
  const members: SfMember[] = [];
  let i = 0;
  const s = text;
  const skipWs = () => {
    while (i < s.length && (s[i] === ' ' || s[i] === '\t')) i++;
  };
  const bare = (): SfBare | undefined => {
    if (s[i] === '"') {
      let out = '';
      i++;
      while (i < s.length && s[i] !== '"') {
        if (s[i] === '\\' && i + 1 < s.length) i++;
        out += s[i];
        i++;
      }
      if (s[i] !== '"') return undefined;
      i++;
      return out;
    }
    if (s[i] === '?') {
      i++;
      const b = s[i++];
      return b === '1' ? true : b === '0' ? false : undefined;
    }
    const num = /^-?\d+(?:\.\d+)?/.exec(s.slice(i));
    if (num) {
      i += num[0].length;
      return Number(num[0]);
    }
    const tok = /^[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*/.exec(s.slice(i));
    if (tok) {
      i += tok[0].length;
      return tok[0];
    }
    return undefined;
  };
  const key = (): string | undefined => {
    const k = /^[a-z*][a-z0-9_\-.*]*/.exec(s.slice(i));
    if (!k) return undefined;
    i += k[0].length;
    return k[0];
  };
  skipWs();
  if (i >= s.length) return undefined;
  while (i < s.length) {
    skipWs();
    let name: string;
    let value: SfBare | undefined;
    const start = i;
    const k = s[i] === '"' ? undefined : key();
    if (k !== undefined && s[i] === '=') {
      i++;
      const v = bare();
      if (v === undefined) return undefined;
      name = k;
      value = v;
    } else {
      i = start;
      const v = bare();
      if (typeof v !== 'string') return undefined;
      name = v;
      value = undefined;
    }
    const params = new Map<string, SfBare>();
    while (s[i] === ';') {
      i++;
      skipWs();
      const pk = key();
      if (pk === undefined) return undefined;
      if (s[i] === '=') {
        i++;
        const pv = bare();
        if (pv === undefined) return undefined;
        params.set(pk, pv);
      } else {
        params.set(pk, true);
      }
    }
    members.push({ name, value, params });
    skipWs();
    if (i >= s.length) break;
    if (s[i] !== ',') return undefined;
    i++;
    skipWs();
    if (i >= s.length) return undefined;
  }
  return members;
}

// ---------------------------------------------------------------------------
// The reader
// ---------------------------------------------------------------------------

interface Candidate {
  waitMs: number;
  source: 'retry-after' | 'ratelimit-header';
  header: string;
  raw: string;
}

class Reader {
  readonly candidates: Candidate[] = [];
  readonly ignored: FeedbackIgnored[] = [];

  constructor(
    readonly bag: HeaderBag,
    readonly now: number,
  ) {}

  /** Every value of a header joined as Headers would join them (", "). */
  get(name: string): string | undefined {
    const list = this.bag.headers.get(name);
    return list && list.length > 0 ? list.join(', ') : undefined;
  }

  /**
   * Values of a single-valued header. A Headers object joins repeated values with ", ",
   * so a value with commas is split again, unless it is one HTTP date ("Wed, 21 Oct …").
   */
  values(name: string): string[] {
    const list = this.bag.headers.get(name) ?? [];
    const out: string[] = [];
    for (const v of list) {
      if (v.includes(',') && parseHttpDate(v) === undefined) out.push(...v.split(',').map((p) => p.trim()));
      else out.push(v);
    }
    return out;
  }

  ignore(header: string, value: string, reason: IgnoredReason, extra?: Partial<FeedbackIgnored>): void {
    this.ignored.push({
      header,
      value: value.length > MAX_ECHO ? value.slice(0, MAX_ECHO) : value,
      reason,
      status: this.bag.status,
      ...extra,
    });
  }

  offer(source: Candidate['source'], header: string, raw: string, waitMs: number): void {
    this.candidates.push({ source, header, raw, waitMs });
  }

  /**
   * Parses a remaining count. Returns true when it is 0 (the budget is spent), false when
   * budget is left, undefined when the header is absent or unusable (negative or
   * unparseable counts are reported and ignored).
   */
  exhausted(name: string): boolean | undefined {
    const raw = this.get(name);
    if (raw === undefined) return undefined;
    // Repeated remaining headers: the smallest count wins.
    const nums = this.values(name).map(parseNumber);
    if (nums.some((n) => n === undefined)) {
      this.ignore(name, raw, 'unparseable');
      return undefined;
    }
    const min = Math.min(...(nums as number[]));
    if (min < 0) {
      this.ignore(name, raw, 'negative');
      return undefined;
    }
    return min === 0;
  }

  /**
   * A reset value of any supported form: a Go duration (`6m0s`), a number (by magnitude,
   * see interpretReset), an RFC 3339 timestamp or an HTTP date. Offers a candidate or reports.
   */
  reset(name: string, source: Candidate['source']): boolean {
    const raw = this.get(name);
    if (raw === undefined) return false;
    let best: number | undefined;
    let absolute = false;
    for (const v of this.values(name)) {
      let wait: number | undefined;
      let abs = false;
      const n = parseNumber(v);
      if (n !== undefined) {
        if (n < 0) {
          this.ignore(name, raw, 'negative');
          return true;
        }
        const r = interpretReset(n, this.now);
        wait = r.waitMs;
        abs = r.form !== 'delta-s';
      } else {
        const d = parseGoDuration(v);
        if (d !== undefined) {
          if (d < 0) {
            this.ignore(name, raw, 'negative');
            return true;
          }
          wait = d;
        } else {
          const t = parseRfc3339(v) ?? parseHttpDate(v);
          if (t !== undefined) {
            wait = t - this.now;
            abs = true;
          }
        }
      }
      if (wait === undefined) {
        this.ignore(name, raw, 'unparseable');
        return true;
      }
      if (best === undefined || wait > best) {
        best = wait;
        absolute = abs;
      }
    }
    if (best === undefined) return false;
    if (best <= 0) {
      if (absolute) this.ignore(name, raw, 'in-the-past');
      return true;
    }
    this.offer(source, name, raw, best);
    return true;
  }

  /** Retry-After: delta seconds (decimals accepted) or an HTTP date; measured from the response's Date when present. */
  retryAfter(): void {
    const name = 'retry-after';
    const raw = this.get(name);
    if (raw === undefined) return;
    let best: number | undefined;
    for (const v of this.bag.headers.get(name) ?? []) {
      let wait: number | undefined;
      let absolute = false;
      const date = parseHttpDate(v);
      if (date !== undefined) {
        const serverNow = this.serverDate();
        wait = date - (serverNow ?? this.now);
        absolute = true;
      } else {
        const parts = v.includes(',') ? v.split(',') : [v];
        for (const p of parts) {
          const n = parseNumber(p);
          if (n === undefined) {
            this.ignore(name, raw, 'unparseable');
            return;
          }
          if (n < 0) {
            this.ignore(name, raw, 'negative');
            return;
          }
          wait = Math.max(wait ?? 0, n * 1000);
        }
      }
      if (wait === undefined) continue;
      if (wait <= 0 && absolute) {
        this.ignore(name, raw, 'in-the-past');
        continue;
      }
      if (best === undefined || wait > best) best = wait;
    }
    if (best !== undefined && best > 0) this.offer('retry-after', name, raw, best);
  }

  /** The response's own Date header (to measure an HTTP-date Retry-After against the server's clock). */
  serverDate(): number | undefined {
    const raw = this.bag.headers.get('date');
    if (raw?.length !== 1) return undefined;
    return parseHttpDate(raw[0]!);
  }

  /** retry-after-ms (OpenAI, Azure): milliseconds, decimals accepted. Also x-ms-retry-after-ms (Azure). */
  retryAfterMs(name: string): void {
    const raw = this.get(name);
    if (raw === undefined) return;
    let best = 0;
    for (const v of this.values(name)) {
      const n = parseNumber(v);
      if (n === undefined) {
        this.ignore(name, raw, 'unparseable');
        return;
      }
      if (n < 0) {
        this.ignore(name, raw, 'negative');
        return;
      }
      best = Math.max(best, n);
    }
    if (best > 0) this.offer('retry-after', name, raw, best);
  }

  /** A remaining/reset pair: pauses until the reset when the remaining count is 0. */
  pair(remaining: string, resets: readonly string[]): void {
    if (this.exhausted(remaining) !== true) return;
    for (const r of resets) if (this.reset(r, 'ratelimit-header')) return;
    this.ignore(remaining, this.get(remaining) ?? '', 'no-reset');
  }

  /** X-RateLimit-Reset-After (Discord): seconds from now, fractional. Returns true when the header was present. */
  resetAfter(remaining: string, name: string): boolean {
    const raw = this.get(name);
    if (raw === undefined) return false;
    if (this.exhausted(remaining) !== true) return true;
    let best: number | undefined;
    for (const v of this.values(name)) {
      const n = parseNumber(v);
      if (n === undefined) {
        this.ignore(name, raw, 'unparseable');
        return false;
      }
      if (n < 0) {
        this.ignore(name, raw, 'negative');
        return false;
      }
      best = Math.max(best ?? 0, n * 1000);
    }
    if (best !== undefined && best > 0) this.offer('ratelimit-header', name, raw, best);
    return true;
  }

  /** IETF RateLimit structured field (+ RateLimit-Policy for a missing `t`). */
  structured(): void {
    const name = 'ratelimit';
    const raw = this.get(name);
    if (raw === undefined) return;
    const members = parseStructured(raw);
    if (!members) {
      this.ignore(name, raw, 'unparseable');
      return;
    }
    // Draft-07 dictionary form: limit=10, remaining=0, reset=5.
    const dict = new Map<string, SfBare>();
    for (const m of members) if (m.value !== undefined) dict.set(m.name, m.value);
    if (dict.has('remaining')) {
      const rem = dict.get('remaining');
      const reset = dict.get('reset');
      if (typeof rem !== 'number') this.ignore(name, raw, 'unparseable');
      else if (rem < 0) this.ignore(name, raw, 'negative');
      else if (rem === 0) {
        if (reset === undefined) this.ignore(name, raw, 'no-reset');
        else if (typeof reset !== 'number') this.ignore(name, raw, 'unparseable');
        else if (reset < 0) this.ignore(name, raw, 'negative');
        else if (reset > 0) this.offer('ratelimit-header', name, raw, reset * 1000);
      }
    }
    // Draft-08+ list form: "policy";r=0;t=30 (several policies allowed). `r` is required.
    if (!dict.has('remaining') && !members.some((m) => m.value === undefined && m.params.has('r'))) {
      this.ignore(name, raw, 'unparseable');
      return;
    }
    let policies: SfMember[] | undefined | null = null;
    for (const m of members) {
      if (m.value !== undefined) continue;
      const r = m.params.get('r');
      if (r === undefined) continue;
      if (typeof r !== 'number') {
        this.ignore(name, raw, 'unparseable');
        continue;
      }
      if (r < 0) {
        this.ignore(name, raw, 'negative');
        continue;
      }
      if (r > 0) continue;
      const t = m.params.get('t');
      if (t !== undefined) {
        if (typeof t !== 'number') this.ignore(name, raw, 'unparseable');
        else if (t < 0) this.ignore(name, raw, 'negative');
        else if (t > 0) this.offer('ratelimit-header', name, raw, t * 1000);
        continue;
      }
      // No `t`: wait the policy's whole window `w` (an upper bound).
      if (policies === null) {
        const p = this.get('ratelimit-policy');
        policies = p === undefined ? undefined : parseStructured(p);
        if (p !== undefined && policies === undefined) this.ignore('ratelimit-policy', p, 'unparseable');
      }
      const w = policies?.find((p) => p.value === undefined && p.name === m.name)?.params.get('w');
      if (typeof w === 'number' && w > 0)
        this.offer('ratelimit-header', 'ratelimit-policy', this.get('ratelimit-policy')!, w * 1000);
      else this.ignore(name, raw, 'no-reset');
    }
  }

  /** X-Shopify-Shop-Api-Call-Limit: used/limit; a full bucket waits for one request to leak (limit / 20 per second). */
  shopify(): void {
    const name = 'x-shopify-shop-api-call-limit';
    const raw = this.get(name);
    if (raw === undefined) return;
    const m = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(this.values(name)[0] ?? '');
    if (!m) {
      this.ignore(name, raw, 'unparseable');
      return;
    }
    const used = Number(m[1]);
    const limit = Number(m[2]);
    if (limit <= 0) {
      this.ignore(name, raw, 'unparseable');
      return;
    }
    if (used < limit) return;
    // Shopify's REST bucket leaks 2/s for a 40 bucket and 20/s for Plus's 400 bucket: limit / 20 per second.
    this.offer('ratelimit-header', name, raw, 20_000 / limit);
  }

  /** HubSpot: remaining 0 waits the whole rolling interval; secondly-remaining 0 waits one second. */
  hubspot(): void {
    const rem = 'x-hubspot-ratelimit-remaining';
    if (this.exhausted(rem) === true) {
      const name = 'x-hubspot-ratelimit-interval-milliseconds';
      const raw = this.get(name);
      const n = raw === undefined ? undefined : parseNumber(raw);
      if (raw === undefined) this.ignore(rem, this.get(rem) ?? '', 'no-reset');
      else if (n === undefined) this.ignore(name, raw, 'unparseable');
      else if (n < 0) this.ignore(name, raw, 'negative');
      else if (n > 0) this.offer('ratelimit-header', name, raw, n);
    }
    const sec = 'x-hubspot-ratelimit-secondly-remaining';
    if (this.exhausted(sec) === true) this.offer('ratelimit-header', sec, this.get(sec) ?? '', 1000);
  }

  /** Every `<prefix><kind><suffix>` remaining header paired with its reset header (OpenAI, Anthropic). */
  families(): void {
    for (const name of this.bag.headers.keys()) {
      let m = /^x-ratelimit-remaining-(.+)$/.exec(name);
      if (m) {
        this.pair(name, [`x-ratelimit-reset-${m[1]}`]);
        continue;
      }
      m = /^anthropic-ratelimit-(.+)-remaining$/.exec(name);
      if (m) this.pair(name, [`anthropic-ratelimit-${m[1]}-reset`]);
    }
  }
}

/**
 * Reads every supported rate-limit header of a response. Never throws on header
 * values; throws TypeError only when `input` is not an object.
 *
 * - Retry-After / retry-after-ms / x-ms-retry-after-ms count only on 429, 503 and 403
 *   (or when no status is known, i.e. a bare Headers or header object was given).
 * - Remaining/reset pairs count on any status: remaining 0 with a reset still ahead.
 * - Of all usable waits, the longest wins; it is capped to `maxPause` (reported).
 * - A 429 with no usable wait sets `needsBackoff`.
 */
export function readFeedback(input: unknown, options: ParseOptions): ParsedFeedback {
  const bag = toHeaderBag(input);
  return readBag(bag, options);
}

/** readFeedback() on an already normalised bag. */
export function readBag(bag: HeaderBag, options: ParseOptions): ParsedFeedback {
  const { now, maxPause } = options;
  const r = new Reader(bag, now);
  const status = bag.status;
  if (status === undefined || RETRY_AFTER_STATUSES.has(status)) {
    r.retryAfter();
    r.retryAfterMs('retry-after-ms');
    r.retryAfterMs('x-ms-retry-after-ms');
  }
  // Discord sends Reset-After (delta) next to Reset (epoch): prefer the delta.
  if (!r.resetAfter('x-ratelimit-remaining', 'x-ratelimit-reset-after')) {
    r.pair('x-ratelimit-remaining', ['x-ratelimit-reset']);
  }
  r.pair('x-rate-limit-remaining', ['x-rate-limit-reset']);
  r.pair('ratelimit-remaining', ['ratelimit-reset']);
  r.structured();
  r.families();
  r.shopify();
  r.hubspot();

  let best: Candidate | undefined;
  for (const c of r.candidates) if (!best || c.waitMs > best.waitMs) best = c;
  for (const c of r.candidates) {
    if (c.waitMs > maxPause) {
      r.ignore(c.header, c.raw, 'capped', { cappedTo: maxPause, requestedMs: c.waitMs });
    }
  }
  let reading: FeedbackReading | undefined;
  if (best) {
    const capped = best.waitMs > maxPause;
    const waitMs = capped ? maxPause : best.waitMs;
    reading = {
      waitMs,
      until: now + waitMs,
      source: best.source,
      header: best.header,
      raw: best.raw.length > MAX_ECHO ? best.raw.slice(0, MAX_ECHO) : best.raw,
      status,
      ...(capped ? { capped: true } : {}),
    };
  }
  // A spent counter without its own reset is only worth reporting when nothing else gave a
  // wait (Kong, for one, sends X-RateLimit-Remaining-Minute next to a RateLimit-Reset).
  const ignored = reading ? r.ignored.filter((i) => i.reason !== 'no-reset') : r.ignored;
  return { status, reading, ignored, needsBackoff: status === 429 && reading === undefined };
}
