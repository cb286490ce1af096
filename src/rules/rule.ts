import { describe, parseDuration } from '../duration.js';
import { checkKnownKeys } from '../stores/checks.js';

const RULE_KEYS = ['limit', 'interval', 'algorithm', 'burst'];

/** One provider quota as the user writes it: `limit` cost units per `interval`. */
export interface Rule {
  /** Cost units allowed per interval. Positive integer. */
  limit: number;
  /** Milliseconds (positive finite number) or a duration string: '250ms', '1s', '1.5s', '5m', '1h', '1d'. */
  interval: number | string;
  /** 'gcra' (default) spreads starts evenly; 'fixed-window' allows `limit` units in each aligned window. */
  algorithm?: 'gcra' | 'fixed-window';
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
 */
export interface StoreRule {
  /** Canonical digest of the configuration; part of the state key. Only identical rules share state. */
  readonly digest: string;
  readonly algorithm: 'gcra' | 'fixed-window';
  readonly limit: number;
  /** Interval in integer microseconds (≥ 1). */
  readonly intervalUs: number;
  /** GCRA burst (≥ 1); 1 for fixed windows. */
  readonly burst: number;
  /** GCRA: emission interval in integer µs, ceil(intervalUs / limit), rounded up so the bound always holds. */
  readonly emissionUs: number;
  /** The largest cost one job may have under this rule (burst for GCRA, limit for fixed windows). */
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
  const algorithm = r.algorithm ?? 'gcra';
  if (algorithm !== 'gcra' && algorithm !== 'fixed-window') {
    throw new TypeError(
      `Expected \`${path}.algorithm\` to be 'gcra' or 'fixed-window', got ${describe(algorithm)}`,
    );
  }
  let burst = 1;
  if (r.burst !== undefined) {
    if (algorithm !== 'gcra') {
      throw new TypeError(`\`${path}.burst\` applies only to algorithm 'gcra', got algorithm '${algorithm}'`);
    }
    burst = positiveInteger(r.burst, `${path}.burst`);
  }
  const intervalUs = Math.max(1, Math.round(intervalMs * 1000));
  if (!Number.isSafeInteger(intervalUs) || intervalUs > MAX_SPAN_US) {
    throw new RangeError(`Expected \`${path}.interval\` to be at most 365 days, got ${String(r.interval)}`);
  }
  const emissionUs = Math.ceil(intervalUs / limit);
  if (burst * emissionUs > MAX_SPAN_US) {
    // The GCRA state runs up to burst × emission interval ahead of the clock.
    throw new RangeError(
      `Expected \`${path}.burst\` × interval / limit (the burst tolerance) to be at most 365 days, got burst ${burst} × ${emissionUs} µs = ${((burst * emissionUs) / 86_400_000_000).toPrecision(4)} days`,
    );
  }
  const digest = algorithm === 'gcra' ? `g${limit}.${intervalUs}.${burst}` : `w${limit}.${intervalUs}`;
  const label =
    algorithm === 'gcra'
      ? `${limit} per ${intervalMs}ms (gcra, burst ${burst})`
      : `${limit} per ${intervalMs}ms (fixed-window)`;
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
