/**
 * One reader per header family, and the table that says which run on which status.
 * See docs/provider-feedback.md for the formats and the providers that send them.
 */
import type { Reader } from './reader.js';
import { parseStructured, type SfBare } from './structured.js';
import { decimals, parseHttpDate } from './values.js';

/** A header family: the headers one provider convention uses, and how to read them. */
export interface Family {
  /** A short name for the family (for tests and docs). */
  readonly name: string;
  /** True when the family counts only on 429, 503 and 403 (or when no status is known). */
  readonly onlyWhenLimited: boolean;
  read(r: Reader): void;
}

/** The limit key of the headers by which the server states the wait for this request. */
const RETRY = 'retry';
/** The limit key of the generic single-limit families (X-RateLimit-*, RateLimit-*, a one-policy RateLimit). */
const PRIMARY = 'primary';

/** The precision (ms) of a number of seconds as written: 1000 for `1`, 10 for `64.57`. */
function secondsPrecision(text: string): number {
  return 1000 / 10 ** decimals(text);
}

/**
 * Retry-After: delta seconds (decimals accepted) or an HTTP date; measured from the
 * response's Date when present. Repeated values: the longest wait wins.
 */
function retryAfter(r: Reader): void {
  const name = 'retry-after';
  const raw = r.get(name);
  if (raw === undefined) return;
  let best: { waitMs: number; precisionMs: number; relative: boolean } | undefined;
  // Each value, and each item of a value a Headers object joined (dates kept whole).
  for (const v of r.values(name)) {
    const date = parseHttpDate(v);
    if (date !== undefined) {
      const serverNow = r.serverDate();
      const wait = date - (serverNow ?? r.now);
      if (wait <= 0) {
        r.ignore(name, raw, 'in-the-past');
        continue;
      }
      if (best === undefined || wait > best.waitMs) {
        best = { waitMs: wait, precisionMs: 1000, relative: serverNow !== undefined };
      }
      continue;
    }
    const nums = r.numbers(name, raw, [v]);
    if (nums === undefined) return;
    const wait = nums[0]! * 1000;
    if (best === undefined || wait > best.waitMs) {
      best = { waitMs: wait, precisionMs: secondsPrecision(v), relative: true };
    }
  }
  if (best !== undefined && best.waitMs > 0) {
    r.offer({ ...best, limit: RETRY, model: 'wait', source: 'retry-after', header: name, raw });
  } else if (best !== undefined) r.zero(name, raw);
}

/** retry-after-ms (OpenAI, Azure) and x-ms-retry-after-ms (Azure): milliseconds, decimals accepted. */
function retryAfterMs(name: string): (r: Reader) => void {
  return (r) => {
    const raw = r.get(name);
    if (raw === undefined) return;
    const nums = r.numbers(name, raw, r.values(name));
    if (nums === undefined) return;
    let best = 0;
    for (const n of nums) best = Math.max(best, n);
    if (best > 0) {
      r.offer({
        waitMs: best,
        precisionMs: 1,
        relative: true,
        limit: RETRY,
        model: 'wait',
        source: 'retry-after',
        header: name,
        raw,
      });
    } else r.zero(name, raw);
  };
}

/**
 * X-RateLimit-Remaining with X-RateLimit-Reset-After (Discord: fractional seconds from now),
 * else with X-RateLimit-Reset (GitHub and many others): Discord sends both; the delta wins.
 */
function xRateLimit(r: Reader): void {
  const remaining = 'x-ratelimit-remaining';
  const name = 'x-ratelimit-reset-after';
  const raw = r.get(name);
  if (raw === undefined) {
    r.pair(remaining, 'x-ratelimit-reset', PRIMARY);
    return;
  }
  if (r.exhausted(remaining) !== true) return;
  const items = r.values(name);
  const nums = r.numbers(name, raw, items);
  if (nums === undefined) {
    // An unusable Reset-After falls back to Reset.
    r.pair(remaining, 'x-ratelimit-reset', PRIMARY);
    return;
  }
  let best = 0;
  let precisionMs = 1000;
  for (let i = 0; i < nums.length; i++) {
    if (nums[i]! * 1000 > best) {
      best = nums[i]! * 1000;
      precisionMs = secondsPrecision(items[i]!);
    }
  }
  if (best > 0) {
    r.offer({
      waitMs: best,
      precisionMs,
      relative: true,
      limit: PRIMARY,
      model: 'window',
      source: 'ratelimit-header',
      header: name,
      raw,
    });
  } else r.zero(name, raw);
}

/** IETF RateLimit structured field (+ RateLimit-Policy for a missing `t`). */
function structured(r: Reader): void {
  const name = 'ratelimit';
  const raw = r.get(name);
  if (raw === undefined) return;
  const members = parseStructured(raw);
  if (!members) {
    r.ignore(name, raw, 'unparseable');
    return;
  }
  // Draft-07 dictionary form: limit=10, remaining=0, reset=5.
  const dict = new Map<string, SfBare>();
  for (const m of members) if (m.value !== undefined) dict.set(m.name, m.value);
  if (dict.has('remaining')) {
    const rem = dict.get('remaining');
    const reset = dict.get('reset');
    if (typeof rem !== 'number') r.ignore(name, raw, 'unparseable');
    else if (rem < 0) r.ignore(name, raw, 'negative');
    else if (rem > r.ahead) {
      if (typeof reset === 'number' && reset > 0) noteSeconds(r, name, rem, reset, PRIMARY);
    } else {
      if (reset === undefined) r.ignore(name, raw, 'no-reset');
      else if (typeof reset !== 'number') r.ignore(name, raw, 'unparseable');
      else if (reset < 0) r.ignore(name, raw, 'negative');
      else if (reset > 0) offerSeconds(r, name, raw, rem, reset, PRIMARY);
      else r.zero(name, raw);
    }
  }
  // Draft-08+ list form: "policy";r=0;t=30 (several policies allowed). `r` is required.
  if (!dict.has('remaining') && !members.some((m) => m.value === undefined && m.params.has('r'))) {
    r.ignore(name, raw, 'unparseable');
    return;
  }
  // The window `w` of each RateLimit-Policy by name, read once when a policy without `t` needs it.
  let windows: Map<string, SfBare | undefined> | undefined | null = null;
  // One policy is the server's one limit, which X-RateLimit-* (sent next to it) describe too.
  let policyCount = 0;
  for (const m of members) if (m.value === undefined && m.params.has('r')) policyCount++;
  for (const m of members) {
    if (m.value !== undefined) continue;
    const rem = m.params.get('r');
    if (rem === undefined) continue;
    if (typeof rem !== 'number') {
      r.ignore(name, raw, 'unparseable');
      continue;
    }
    if (rem < 0) {
      r.ignore(name, raw, 'negative');
      continue;
    }
    const limit = policyCount === 1 ? PRIMARY : `ratelimit:${m.name}`;
    const t = m.params.get('t');
    if (rem > r.ahead) {
      if (typeof t === 'number' && t > 0) noteSeconds(r, name, rem, t, limit);
      continue;
    }
    if (t !== undefined) {
      if (typeof t !== 'number') r.ignore(name, raw, 'unparseable');
      else if (t < 0) r.ignore(name, raw, 'negative');
      else if (t > 0) offerSeconds(r, name, raw, rem, t, limit);
      else r.zero(name, raw);
      continue;
    }
    // No `t`: wait the policy's whole window `w` (an upper bound).
    if (windows === null) windows = policyWindows(r);
    const w = windows?.get(m.name);
    if (typeof w === 'number' && w > 0) {
      // The whole window is an upper bound: the reset may come at any time before it.
      r.offer({
        waitMs: w * 1000,
        precisionMs: w * 1000,
        relative: true,
        limit,
        model: 'window',
        source: 'ratelimit-header',
        header: 'ratelimit-policy',
        raw: r.get('ratelimit-policy')!,
      });
    } else r.ignore(name, raw, 'no-reset');
  }
}

/**
 * Offers a delta in seconds of a structured field (`t`, `reset`) as a window reset, tightened
 * by what earlier responses said of the same window; `remaining` is the count beside it.
 */
function offerSeconds(
  r: Reader,
  name: string,
  raw: string,
  remaining: number,
  seconds: number,
  limit: string,
): void {
  const precisionMs = secondsPrecision(String(seconds));
  const waitMs = r.tightened(`${limit} ${name}`, remaining, seconds * 1000, precisionMs);
  if (!(waitMs > 0)) return;
  r.offer({
    ...(waitMs < seconds * 1000 ? { statedMs: seconds * 1000 } : {}),
    waitMs,
    precisionMs,
    relative: true,
    limit,
    model: 'window',
    source: 'ratelimit-header',
    header: name,
    raw,
  });
}

/** Records the reset of a structured field whose count has budget left (a bound of its window). */
function noteSeconds(r: Reader, name: string, remaining: number, seconds: number, limit: string): void {
  r.tightened(`${limit} ${name}`, remaining, seconds * 1000, secondsPrecision(String(seconds)));
}

/** RateLimit-Policy's windows by policy name (the first policy of a name wins); undefined when absent or unparseable. */
function policyWindows(r: Reader): Map<string, SfBare | undefined> | undefined {
  const p = r.get('ratelimit-policy');
  if (p === undefined) return undefined;
  const policies = parseStructured(p);
  if (policies === undefined) {
    r.ignore('ratelimit-policy', p, 'unparseable');
    return undefined;
  }
  const windows = new Map<string, SfBare | undefined>();
  for (const policy of policies) {
    if (policy.value === undefined && !windows.has(policy.name))
      windows.set(policy.name, policy.params.get('w'));
  }
  return windows;
}

/** Kinds named after a time unit are windows (Kong's X-RateLimit-Remaining-Minute); others are buckets. */
const WINDOW_KINDS = /^(?:second|minute|hour|day|week|month|year)s?$/;

/**
 * Every `x-ratelimit-remaining-<kind>` with `x-ratelimit-reset-<kind>` (OpenAI and the APIs
 * that copy its names) and every `anthropic-ratelimit-<kind>-remaining` with its `-reset`.
 * Both providers document the reset as the time the limit is fully replenished: token
 * buckets, read with their `-limit-` header as a wait for the next unit.
 */
function perKind(r: Reader): void {
  for (const name of r.bag.headers.keys()) {
    let m = /^x-ratelimit-remaining-(.+)$/.exec(name);
    if (m) {
      const kind = m[1]!;
      const reset = `x-ratelimit-reset-${kind}`;
      if (WINDOW_KINDS.test(kind)) r.pair(name, reset, `x-ratelimit-${kind}`);
      else r.bucket(name, reset, `x-ratelimit-limit-${kind}`, `x-ratelimit-${kind}`);
      continue;
    }
    m = /^anthropic-ratelimit-(.+)-remaining$/.exec(name);
    if (m) {
      const kind = m[1]!;
      r.bucket(
        name,
        `anthropic-ratelimit-${kind}-reset`,
        `anthropic-ratelimit-${kind}-limit`,
        `anthropic-${kind}`,
      );
    }
  }
}

/**
 * X-Shopify-Shop-Api-Call-Limit: used/limit; a full bucket waits for one request to leak (limit / 20
 * per second). Repeated values: the longest wait wins; one that is not `used/limit` (with a limit
 * above 0) makes the whole field unusable, as for every single-valued header.
 */
function shopify(r: Reader): void {
  const name = 'x-shopify-shop-api-call-limit';
  const raw = r.get(name);
  if (raw === undefined) return;
  let full = Number.POSITIVE_INFINITY;
  for (const v of r.values(name)) {
    const m = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(v);
    const limit = m ? Number(m[2]) : 0;
    if (!(limit > 0)) {
      r.ignore(name, raw, 'unparseable');
      return;
    }
    if (Number(m![1]) >= limit) full = Math.min(full, limit);
  }
  if (full === Number.POSITIVE_INFINITY) return;
  // Shopify's REST bucket leaks 2/s for a 40 bucket and 20/s for Plus's 400 bucket: limit / 20 per second.
  r.offer({
    waitMs: 20_000 / full,
    precisionMs: 1,
    relative: true,
    limit: 'shopify',
    model: 'leaky-bucket',
    source: 'ratelimit-header',
    header: name,
    raw,
  });
}

/** HubSpot: remaining 0 waits the whole rolling interval; secondly-remaining 0 waits one second. */
function hubspot(r: Reader): void {
  const rem = 'x-hubspot-ratelimit-remaining';
  if (r.exhausted(rem) === true) {
    const name = 'x-hubspot-ratelimit-interval-milliseconds';
    const raw = r.get(name);
    if (raw === undefined) r.ignore(rem, r.get(rem) ?? '', 'no-reset');
    else {
      const nums = r.numbers(name, raw, r.values(name));
      // The whole rolling interval is an upper bound: HubSpot does not say when the oldest
      // request leaves it. Repeated values: the longest wins.
      const interval = nums === undefined ? undefined : Math.max(...nums);
      if (interval === 0) r.zero(name, raw);
      else if (interval !== undefined) {
        r.offer({
          waitMs: interval,
          precisionMs: interval,
          relative: true,
          limit: 'hubspot',
          model: 'window',
          source: 'ratelimit-header',
          header: name,
          raw,
        });
      }
    }
  }
  const sec = 'x-hubspot-ratelimit-secondly-remaining';
  if (r.exhausted(sec) === true) {
    r.offer({
      waitMs: 1000,
      precisionMs: 1000,
      relative: true,
      limit: 'hubspot-secondly',
      model: 'window',
      source: 'ratelimit-header',
      header: sec,
      raw: r.get(sec) ?? '',
    });
  }
}

/** Every family read, in order. Retry-After and friends count only on a limited status. */
export const FAMILIES: readonly Family[] = [
  { name: 'retry-after', onlyWhenLimited: true, read: retryAfter },
  { name: 'retry-after-ms', onlyWhenLimited: true, read: retryAfterMs('retry-after-ms') },
  { name: 'x-ms-retry-after-ms', onlyWhenLimited: true, read: retryAfterMs('x-ms-retry-after-ms') },
  { name: 'x-ratelimit', onlyWhenLimited: false, read: xRateLimit },
  {
    name: 'x-rate-limit',
    onlyWhenLimited: false,
    read: (r) => r.pair('x-rate-limit-remaining', 'x-rate-limit-reset', PRIMARY),
  },
  {
    name: 'ratelimit-remaining',
    onlyWhenLimited: false,
    read: (r) => r.pair('ratelimit-remaining', 'ratelimit-reset', PRIMARY),
  },
  { name: 'ratelimit', onlyWhenLimited: false, read: structured },
  { name: 'per-kind', onlyWhenLimited: false, read: perKind },
  { name: 'shopify', onlyWhenLimited: false, read: shopify },
  { name: 'hubspot', onlyWhenLimited: false, read: hubspot },
];
