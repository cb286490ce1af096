import { describe, parseDuration, quote } from '../duration.js';
import { checkKnownKeys, msToUs } from '../stores/checks.js';

const RULE_KEYS = ['limit', 'interval', 'algorithm', 'burst'];

/** The rate algorithms a rule can use. */
export type Algorithm = 'gcra' | 'fixed-window' | 'sliding-window';

/**
 * The largest `limit` a sliding-window rule accepts. Its state is a log of grants (one entry
 * per store call that granted, each of at least one unit), so it holds up to `limit` entries per
 * id: the cap bounds that memory (about 12 bytes an entry on Redis, 16 in the memory store).
 */
export const MAX_SLIDING_LIMIT = 10_000;

/** One provider quota as the user writes it: `limit` cost units per `interval`. */
export interface Rule {
  /** Cost units allowed per interval. Positive integer. */
  limit: number;
  /** Milliseconds (positive finite number) or a duration string: '250ms', '1s', '1.5s', '5m', '1h', '1d'. */
  interval: number | string;
  /**
   * 'gcra' (default) spreads starts evenly; 'fixed-window' allows `limit` units in each aligned
   * window; 'sliding-window' allows `limit` units in any window of length `interval`.
   */
  algorithm?: Algorithm;
  /** GCRA only: how many units may start back to back. Positive integer, default 1. */
  burst?: number;
}

/**
 * A rule as every store sees it: normalised, in integer microseconds, with a
 * canonical digest. Both stores implement exactly the same arithmetic on it
 * (see docs/how-it-works.md, "The arithmetic"):
 *
 * GCRA: T = emission (µs per unit), capacity = burst × T. State: tat (µs).
 *   A job of cost c needs inc = ceil(c × T); new = max(tat, now) + inc.
 *   It fits when new − now ≤ capacity, and then tat = new. Otherwise the wait is
 *   new − now − capacity.
 * Fixed window: window k = floor(now / intervalUs); state: (k, count).
 *   A job fits when count + c ≤ limit; otherwise the wait is (k + 1) × intervalUs − now.
 * Sliding window: state: a log of grants (t, c), oldest first; an entry counts while
 *   t > now − intervalUs. A job fits when the live sum + c ≤ limit; otherwise it waits until
 *   enough of the oldest entries have left (see sliding-window.ts).
 */
export interface StoreRule {
  /** Canonical digest of the configuration; part of the state key. Only identical rules share state. */
  readonly digest: string;
  readonly algorithm: Algorithm;
  readonly limit: number;
  /** Interval in integer microseconds (≥ 1). */
  readonly intervalUs: number;
  /** GCRA burst (≥ 1); 1 for the window algorithms. */
  readonly burst: number;
  /** GCRA: emission interval in integer µs, ceil(intervalUs / limit), rounded up so the bound always holds. */
  readonly emissionUs: number;
  /** The largest cost one job may have under this rule (burst for GCRA, limit for the windows). */
  readonly maxCost: number;
  /** Human-readable form for messages, e.g. "10 per 1000ms (gcra, burst 1)". */
  readonly label: string;
}

function positiveInteger(value: unknown, option: string): number {
  if (typeof value !== 'number') {
    throw new TypeError(`Expected \`${option}\` to be a positive integer, got ${describe(value)}`);
  }
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`Expected \`${option}\` to be a positive integer, got ${String(value)}`);
  }
  return value;
}

/**
 * Bounds that keep every value the stores compute an integer below 2^53 µs, exact in a float64
 * (JS and Lua alike): an interval and a GCRA burst tolerance (burst × emission interval) of at
 * most 365 days, a limit of at most 1e15 units (a fixed-window count stays below 2 × 1e15).
 * With costs being positive integers no larger than the rule's maxCost, a GCRA state is at
 * most now + 2 × 365 days, a fixed-window end at most now + 365 days: exact until about the
 * year 2250 (2^53 µs after the epoch).
 */
export const MAX_SPAN_US = 365 * 86_400_000_000;
export const MAX_LIMIT = 1e15;

/** Validates one user rule and returns its normalised form. `path` names it in messages, e.g. "rules[1]". */
export function normalizeRule(rule: unknown, path: string): StoreRule {
  if (typeof rule !== 'object' || rule === null || Array.isArray(rule)) {
    throw new TypeError(
      `Expected \`${path}\` to be an object like { limit: 10, interval: '1s' }, got ${describe(rule)}`,
    );
  }
  const r = rule as Record<string, unknown>;
  checkKnownKeys(r, RULE_KEYS, 'a rule', `${path}.`);
  const limit = positiveInteger(r.limit, `${path}.limit`);
  if (limit > MAX_LIMIT) {
    throw new RangeError(`Expected \`${path}.limit\` to be at most ${MAX_LIMIT} (1e15), got ${limit}`);
  }
  const intervalMs = parseDuration(r.interval, `${path}.interval`);
  const algorithm = r.algorithm === undefined ? 'gcra' : r.algorithm; // null is refused
  if (algorithm !== 'gcra' && algorithm !== 'fixed-window' && algorithm !== 'sliding-window') {
    throw new TypeError(
      `Expected \`${path}.algorithm\` to be 'gcra', 'fixed-window' or 'sliding-window', got ${describe(algorithm)}`,
    );
  }
  if (algorithm === 'sliding-window' && limit > MAX_SLIDING_LIMIT) {
    throw new RangeError(
      `Expected \`${path}.limit\` to be at most ${MAX_SLIDING_LIMIT} with algorithm 'sliding-window' (its state is a log of up to \`limit\` grants), got ${limit}`,
    );
  }
  let burst = 1;
  if (r.burst !== undefined) {
    if (algorithm !== 'gcra') {
      throw new TypeError(`\`${path}.burst\` applies only to algorithm 'gcra', got algorithm '${algorithm}'`);
    }
    burst = positiveInteger(r.burst, `${path}.burst`);
  }
  // Rounded up to whole µs (a float's error below 1e-6 µs aside), like every duration: a
  // shorter interval would let a GCRA or sliding-window rule admit more than stated.
  const intervalUs = Math.max(1, msToUs(intervalMs));
  if (!Number.isSafeInteger(intervalUs) || intervalUs > MAX_SPAN_US) {
    throw new RangeError(
      `Expected \`${path}.interval\` to be at most 365 days, got ${typeof r.interval === 'string' ? quote(r.interval) : String(r.interval)}`,
    );
  }
  const emissionUs = Math.ceil(intervalUs / limit);
  if (burst * emissionUs > MAX_SPAN_US) {
    // The GCRA state runs up to burst × emission interval ahead of the clock.
    throw new RangeError(
      `Expected \`${path}.burst\` × interval / limit (the burst tolerance) to be at most 365 days, got burst ${burst} × ${emissionUs} µs = ${((burst * emissionUs) / 86_400_000_000).toPrecision(4)} days`,
    );
  }
  const digest =
    algorithm === 'gcra'
      ? `g${limit}.${intervalUs}.${burst}`
      : algorithm === 'fixed-window'
        ? `w${limit}.${intervalUs}`
        : `s${limit}.${intervalUs}`;
  const label =
    algorithm === 'gcra'
      ? `${limit} per ${intervalMs}ms (gcra, burst ${burst})`
      : `${limit} per ${intervalMs}ms (${algorithm})`;
  return {
    digest,
    algorithm,
    limit,
    intervalUs,
    burst,
    emissionUs,
    maxCost: algorithm === 'gcra' ? burst : limit,
    label,
  };
}

/** A rule back from its digest (as the store records it), or undefined for a digest valve never writes. */
export function ruleFromDigest(digest: string): (Rule & { interval: number }) | undefined {
  const m = /^([gws])(\d+)\.(\d+)(?:\.(\d+))?$/.exec(digest);
  if (m === null || (m[1] === 'g') !== (m[4] !== undefined)) return undefined;
  const rule: Rule & { interval: number } = { limit: Number(m[2]), interval: Number(m[3]) / 1000 };
  if (m[1] === 'g') {
    rule.algorithm = 'gcra';
    rule.burst = Number(m[4]);
  } else rule.algorithm = m[1] === 'w' ? 'fixed-window' : 'sliding-window';
  return rule;
}
