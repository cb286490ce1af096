/**
 * One reader per header family, and the table that says which run on which status.
 * See docs/provider-feedback.md for the formats and the providers that send them.
 */
import type { Reader } from './reader.js';
import { parseStructured, type SfBare } from './structured.js';
import { parseHttpDate } from './values.js';

/** A header family: the headers one provider convention uses, and how to read them. */
export interface Family {
  /** A short name for the family (for tests and docs). */
  readonly name: string;
  /** True when the family counts only on 429, 503 and 403 (or when no status is known). */
  readonly onlyWhenLimited: boolean;
  read(r: Reader): void;
}

/** Retry-After: delta seconds (decimals accepted) or an HTTP date; measured from the response's Date when present. */
function retryAfter(r: Reader): void {
  const name = 'retry-after';
  const raw = r.get(name);
  if (raw === undefined) return;
  let best: number | undefined;
  for (const v of r.list(name) ?? []) {
    const date = parseHttpDate(v);
    if (date !== undefined) {
      const wait = date - (r.serverDate() ?? r.now);
      if (wait <= 0) {
        r.ignore(name, raw, 'in-the-past');
        continue;
      }
      if (best === undefined || wait > best) best = wait;
      continue;
    }
    const nums = r.numbers(name, raw, v.includes(',') ? v.split(',') : [v]);
    if (nums === undefined) return;
    for (const n of nums) best = Math.max(best ?? 0, n * 1000);
  }
  if (best !== undefined && best > 0) r.offer('retry-after', name, raw, best);
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
    if (best > 0) r.offer('retry-after', name, raw, best);
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
    r.pair(remaining, ['x-ratelimit-reset']);
    return;
  }
  if (r.exhausted(remaining) !== true) return;
  const nums = r.numbers(name, raw, r.values(name));
  if (nums === undefined) {
    // An unusable Reset-After falls back to Reset.
    r.pair(remaining, ['x-ratelimit-reset']);
    return;
  }
  let best = 0;
  for (const n of nums) best = Math.max(best, n * 1000);
  if (best > 0) r.offer('ratelimit-header', name, raw, best);
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
    else if (rem === 0) {
      if (reset === undefined) r.ignore(name, raw, 'no-reset');
      else if (typeof reset !== 'number') r.ignore(name, raw, 'unparseable');
      else if (reset < 0) r.ignore(name, raw, 'negative');
      else if (reset > 0) r.offer('ratelimit-header', name, raw, reset * 1000);
    }
  }
  // Draft-08+ list form: "policy";r=0;t=30 (several policies allowed). `r` is required.
  if (!dict.has('remaining') && !members.some((m) => m.value === undefined && m.params.has('r'))) {
    r.ignore(name, raw, 'unparseable');
    return;
  }
  // The window `w` of each RateLimit-Policy by name, read once when a policy without `t` needs it.
  let windows: Map<string, SfBare | undefined> | undefined | null = null;
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
    if (rem > 0) continue;
    const t = m.params.get('t');
    if (t !== undefined) {
      if (typeof t !== 'number') r.ignore(name, raw, 'unparseable');
      else if (t < 0) r.ignore(name, raw, 'negative');
      else if (t > 0) r.offer('ratelimit-header', name, raw, t * 1000);
      continue;
    }
    // No `t`: wait the policy's whole window `w` (an upper bound).
    if (windows === null) windows = policyWindows(r);
    const w = windows?.get(m.name);
    if (typeof w === 'number' && w > 0)
      r.offer('ratelimit-header', 'ratelimit-policy', r.get('ratelimit-policy')!, w * 1000);
    else r.ignore(name, raw, 'no-reset');
  }
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

/** Every `<prefix><kind><suffix>` remaining header paired with its reset header (OpenAI, Anthropic). */
function perKind(r: Reader): void {
  for (const name of r.bag.headers.keys()) {
    let m = /^x-ratelimit-remaining-(.+)$/.exec(name);
    if (m) {
      r.pair(name, [`x-ratelimit-reset-${m[1]}`]);
      continue;
    }
    m = /^anthropic-ratelimit-(.+)-remaining$/.exec(name);
    if (m) r.pair(name, [`anthropic-ratelimit-${m[1]}-reset`]);
  }
}

/** X-Shopify-Shop-Api-Call-Limit: used/limit; a full bucket waits for one request to leak (limit / 20 per second). */
function shopify(r: Reader): void {
  const name = 'x-shopify-shop-api-call-limit';
  const raw = r.get(name);
  if (raw === undefined) return;
  const m = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(r.values(name)[0] ?? '');
  if (!m) {
    r.ignore(name, raw, 'unparseable');
    return;
  }
  const used = Number(m[1]);
  const limit = Number(m[2]);
  if (limit <= 0) {
    r.ignore(name, raw, 'unparseable');
    return;
  }
  if (used < limit) return;
  // Shopify's REST bucket leaks 2/s for a 40 bucket and 20/s for Plus's 400 bucket: limit / 20 per second.
  r.offer('ratelimit-header', name, raw, 20_000 / limit);
}

/** HubSpot: remaining 0 waits the whole rolling interval; secondly-remaining 0 waits one second. */
function hubspot(r: Reader): void {
  const rem = 'x-hubspot-ratelimit-remaining';
  if (r.exhausted(rem) === true) {
    const name = 'x-hubspot-ratelimit-interval-milliseconds';
    const raw = r.get(name);
    if (raw === undefined) r.ignore(rem, r.get(rem) ?? '', 'no-reset');
    else {
      const nums = r.numbers(name, raw, [raw]);
      if (nums !== undefined && nums[0]! > 0) r.offer('ratelimit-header', name, raw, nums[0]!);
    }
  }
  const sec = 'x-hubspot-ratelimit-secondly-remaining';
  if (r.exhausted(sec) === true) r.offer('ratelimit-header', sec, r.get(sec) ?? '', 1000);
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
    read: (r) => r.pair('x-rate-limit-remaining', ['x-rate-limit-reset']),
  },
  {
    name: 'ratelimit-remaining',
    onlyWhenLimited: false,
    read: (r) => r.pair('ratelimit-remaining', ['ratelimit-reset']),
  },
  { name: 'ratelimit', onlyWhenLimited: false, read: structured },
  { name: 'per-kind', onlyWhenLimited: false, read: perKind },
  { name: 'shopify', onlyWhenLimited: false, read: shopify },
  { name: 'hubspot', onlyWhenLimited: false, read: hubspot },
];
