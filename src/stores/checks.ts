/**
 * The argument checks every store shares (memory and Redis), and the id rule that
 * createValve() applies too. A store validates what it is given even though the valve
 * validated it first: users may call a store directly, and a third-party scheduler may too.
 *
 * Bounds: every value a store computes from these arguments stays an integer below 2^53 µs
 * (exact in a float64, in JS and in Lua) for the next centuries of epoch time:
 * durations are at most {@link MAX_DURATION_MS}, a batch has at most {@link MAX_BATCH} jobs,
 * costs are positive integers no larger than the rule's `maxCost`.
 */
import { describe, quote } from '../duration.js';
import type { StoreRule } from '../rules/rule.js';
import type { LeaseRequest } from './store.js';

/** The longest duration a store accepts (a pause, a lease TTL): 365 days in ms. */
export const MAX_DURATION_MS = 365 * 86_400_000;

/** The most jobs one acquire call (and so a valve's `batch`) may carry. */
export const MAX_BATCH = 1000;

/** The longest id, in Unicode characters (code points, not UTF-16 units). */
export const MAX_ID_CHARACTERS = 200;

const ID_RULE = `a string of 1 to ${MAX_ID_CHARACTERS} characters without '{' or '}'`;

/**
 * The valve id rule, the same everywhere: a well-formed Unicode string (no lone surrogate,
 * which UTF-8 cannot encode: Redis would see `'x\ud800'` and `'x\ufffd'` as one key) of 1 to
 * 200 characters (code points), without `{` or `}` (Redis hash-tag delimiters). Every id
 * problem is a TypeError, as the API contract says (the length included).
 */
export function checkId(id: unknown, name = 'id'): string {
  if (typeof id !== 'string') {
    throw new TypeError(`Expected \`${name}\` to be ${ID_RULE}, got ${describe(id)}`);
  }
  // One pass: count code points and find lone surrogates.
  let characters = 0;
  const units = id.length;
  for (let i = 0; i < units; i++) {
    const unit = id.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdfff) {
      const next = i + 1 < units ? id.charCodeAt(i + 1) : 0;
      if (unit > 0xdbff || next < 0xdc00 || next > 0xdfff) {
        throw new TypeError(
          `Expected \`${name}\` to be well-formed Unicode, got a lone surrogate \\u${unit.toString(16)} at index ${i} of ${quote(id)}`,
        );
      }
      i++;
    } else if (unit === 0x7b || unit === 0x7d) {
      throw new TypeError(`Expected \`${name}\` to contain no '{' or '}', got ${quote(id)}`);
    }
    characters++;
  }
  if (characters < 1 || characters > MAX_ID_CHARACTERS) {
    throw new TypeError(
      `Expected \`${name}\` to be 1 to ${MAX_ID_CHARACTERS} characters long, got ${characters} characters`,
    );
  }
  return id;
}

/**
 * Rejects keys of an options object other than `allowed`, in the one form every entry point
 * uses: "Unknown option `x`; <owner> takes `a`, `b` and `c`". `path` prefixes the key
 * (e.g. "rules[0]." or "feedback.").
 */
export function checkKnownKeys(value: object, allowed: readonly string[], owner: string, path = ''): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) throw new TypeError(unknownOption(path + key, owner, allowed));
  }
}

/** The message of {@link checkKnownKeys}. */
export function unknownOption(key: string, owner: string, allowed: readonly string[]): string {
  const names = allowed.map((k) => `\`${k}\``);
  const list = names.length < 2 ? names.join('') : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
  // A very long option name (a key of the caller's object) is shown cut, as quote() cuts it.
  const name = key.length > 200 ? quote(key) : `\`${key}\``;
  return `Unknown option ${name}; ${owner} takes ${list}`;
}

/** ms → µs, rounded up (a float's error below 1 ns is ignored) so a duration is never shortened. */
export function msToUs(ms: number): number {
  return Math.max(0, Math.ceil(ms * 1000 - 1e-6));
}

/**
 * A duration argument in ms: a finite number from 0 (or above 0 when `zeroOk` is false) to
 * {@link MAX_DURATION_MS}. Returns it in µs, rounded up, at least 1 µs unless zero is allowed.
 */
export function checkMs(ms: unknown, name: string, zeroOk: boolean): number {
  if (typeof ms !== 'number') {
    throw new TypeError(`Expected \`${name}\` to be a number of milliseconds, got ${describe(ms)}`);
  }
  if (!(ms >= 0) || (!zeroOk && ms === 0) || ms > MAX_DURATION_MS) {
    throw new RangeError(
      `Expected \`${name}\` to be a ${zeroOk ? 'non-negative' : 'positive'} number of milliseconds up to ${MAX_DURATION_MS} (365 days), got ${String(ms)}`,
    );
  }
  const us = msToUs(ms);
  return zeroOk ? us : Math.max(1, us);
}

/** Lease tokens: an array of strings. */
export function checkTokens(tokens: unknown): readonly string[] {
  if (!Array.isArray(tokens)) {
    throw new TypeError(`Expected \`tokens\` to be an array of lease tokens, got ${describe(tokens)}`);
  }
  for (let i = 0; i < tokens.length; i++) {
    if (typeof tokens[i] !== 'string') {
      throw new TypeError(`Expected \`tokens[${i}]\` to be a string, got ${describe(tokens[i])}`);
    }
  }
  return tokens as readonly string[];
}

/** The lease part of a request: its TTL in µs (at least 1), or 0 without one. */
export function checkLease(lease: LeaseRequest | undefined): number {
  if (lease === undefined) return 0;
  if (typeof lease !== 'object' || lease === null) {
    throw new TypeError(`Expected \`request.lease\` to be { limit, ttl }, got ${describe(lease)}`);
  }
  if (!Number.isSafeInteger(lease.limit) || lease.limit < 1) {
    throw new RangeError(
      `Expected \`request.lease.limit\` to be a positive integer, got ${describe(lease.limit)}`,
    );
  }
  return checkMs(lease.ttl, 'request.lease.ttl', false);
}

/**
 * Checks an acquire request (everything but the lease, see {@link checkLease}) before any
 * state is touched, and writes its distinct rules (a repeated digest is one quota, spent
 * once) into `distinct` from index 0. Returns how many. On a throw, `distinct` holds no rule,
 * so a store's reused scratch array retains nothing. Allocates nothing.
 */
export function checkRequest(request: unknown, distinct: (StoreRule | undefined)[]): number {
  if (typeof request !== 'object' || request === null) {
    throw new TypeError(`Expected \`request\` to be an object, got ${describe(request)}`);
  }
  const { id, rules, costs, count } = request as Record<string, unknown>;
  checkId(id, 'request.id');
  if (!Array.isArray(rules)) {
    throw new TypeError(`Expected \`request.rules\` to be an array of rules, got ${describe(rules)}`);
  }
  if (!Array.isArray(costs)) {
    throw new TypeError(`Expected \`request.costs\` to be an array of numbers, got ${describe(costs)}`);
  }
  if (!Number.isInteger(count) || (count as number) < 1 || (count as number) > costs.length) {
    throw new RangeError(
      `Expected \`request.count\` to be an integer from 1 to costs.length (${costs.length}), got ${describe(count)}`,
    );
  }
  if ((count as number) > MAX_BATCH) {
    throw new RangeError(`Expected \`request.count\` to be at most ${MAX_BATCH}, got ${String(count)}`);
  }
  let n = 0;
  try {
    for (let i = 0; i < rules.length; i++) {
      const rule = rules[i] as StoreRule | undefined;
      if (typeof rule !== 'object' || rule === null || typeof rule.digest !== 'string') {
        throw new TypeError(
          `Expected \`request.rules[${i}]\` to be a normalised StoreRule, got ${describe(rule)}`,
        );
      }
      let seen = false;
      for (let j = 0; j < n; j++) if (distinct[j]!.digest === rule.digest) seen = true;
      if (!seen) distinct[n++] = rule;
    }
    // Every cost before anything is spent: the batch is atomic.
    for (let j = 0; j < (count as number); j++) {
      const c = costs[j];
      if (typeof c !== 'number' || !Number.isSafeInteger(c) || c < 1) {
        throw new RangeError(`Expected \`request.costs[${j}]\` to be a positive integer, got ${describe(c)}`);
      }
      for (let i = 0; i < n; i++) {
        const rule = distinct[i]!;
        if (c > rule.maxCost) {
          throw new RangeError(
            `\`request.costs[${j}]\` (${c}) exceeds the largest cost rule ${rule.label} can ever admit (${rule.maxCost})`,
          );
        }
      }
    }
  } catch (err) {
    for (let i = 0; i < n; i++) distinct[i] = undefined;
    throw err;
  }
  return n;
}

/**
 * Empties the first `m` slots of a store's scratch array of distinct rules (see
 * {@link checkRequest}), keeping its storage: an array's length set to 0 drops it in V8, and
 * the next call would allocate it again.
 */
export function emptyRules(distinct: (StoreRule | undefined)[], m: number): void {
  for (let r = 0; r < m; r++) distinct[r] = undefined;
}

/** The longest rule-set record (digests joined by ','). */
const MAX_RECORD = 4096;
/** The longest `recordTtl` (365 days, in ms). */
const MAX_RECORD_TTL_MS = 365 * 86_400_000;

/**
 * Checks the rule-change fields of an acquire request (`previous`, `convert`, `record`) and
 * appends the previous rules that are not among the first `n` of `distinct` (by digest) after
 * them: they are checked and spent like the others, but never refuse a cost outright (a cost
 * above their maxCost just does not fit). Returns the new count. On a throw, `distinct` holds
 * no rule.
 */
export function checkChange(request: unknown, distinct: (StoreRule | undefined)[], n: number): number {
  const { previous, convert, record, recordTtl, previousSince } = request as Record<string, unknown>;
  let total = n;
  try {
    if (
      recordTtl !== undefined &&
      (typeof recordTtl !== 'number' || !(recordTtl >= 0) || recordTtl > MAX_RECORD_TTL_MS)
    ) {
      throw new RangeError(
        `Expected \`request.recordTtl\` to be a number of ms from 0 to 365 days, got ${describe(recordTtl)}`,
      );
    }
    if (
      record !== undefined &&
      (typeof record !== 'string' || record.length > MAX_RECORD || !/^[gws0-9.,]*$/.test(record))
    ) {
      throw new TypeError(
        `Expected \`request.record\` to be rule digests joined by ',', got ${describe(record)}`,
      );
    }
    if (convert !== undefined && typeof convert !== 'boolean') {
      throw new TypeError(`Expected \`request.convert\` to be a boolean, got ${describe(convert)}`);
    }
    if (previous === undefined) return n;
    if (!Array.isArray(previous)) {
      throw new TypeError(`Expected \`request.previous\` to be an array of rules, got ${describe(previous)}`);
    }
    for (let i = 0; i < previous.length; i++) {
      const rule = previous[i] as StoreRule | undefined;
      if (typeof rule !== 'object' || rule === null || typeof rule.digest !== 'string') {
        throw new TypeError(
          `Expected \`request.previous[${i}]\` to be a normalised StoreRule, got ${describe(rule)}`,
        );
      }
      let seen = false;
      for (let j = 0; j < total; j++) if (distinct[j]!.digest === rule.digest) seen = true;
      if (!seen) distinct[total++] = rule;
    }
    if (previousSince !== undefined) checkSince(previousSince, previous.length);
  } catch (err) {
    for (let i = 0; i < total; i++) distinct[i] = undefined;
    throw err;
  }
  return total;
}

/** `request.previousSince`: one number (not NaN) per previous rule. */
function checkSince(since: unknown, length: number): void {
  if (!Array.isArray(since) || since.length !== length) {
    throw new TypeError(
      `Expected \`request.previousSince\` to be an array of ${length} numbers (one per previous rule), got ${describe(since)}`,
    );
  }
  for (let i = 0; i < length; i++) {
    const t = since[i] as unknown;
    if (typeof t !== 'number' || Number.isNaN(t)) {
      throw new TypeError(
        `Expected \`request.previousSince[${i}]\` to be a number of ms, got ${describe(t)}`,
      );
    }
  }
}

/**
 * The store-clock µs from which `rule`'s state has counted every grant (see
 * AcquireRequest.previousSince): -Infinity without `since` or when `rule` is not among
 * `previous`.
 */
export function sinceUs(
  rule: StoreRule,
  previous: readonly StoreRule[] | undefined,
  since: readonly number[] | undefined,
): number {
  if (previous === undefined || since === undefined) return Number.NEGATIVE_INFINITY;
  for (let i = 0; i < previous.length; i++) {
    if (previous[i]!.digest !== rule.digest) continue;
    const t = since[i]!;
    return Number.isFinite(t) ? Math.round(t * 1000) : t;
  }
  return Number.NEGATIVE_INFINITY;
}

/** Whether `rule` is among `previous` (by digest). */
export function inPrevious(rule: StoreRule, previous: readonly StoreRule[] | undefined): boolean {
  if (previous === undefined) return false;
  for (let i = 0; i < previous.length; i++) if (previous[i]!.digest === rule.digest) return true;
  return false;
}

/**
 * How long a rule-set record lives (µs): the longest interval of the rules (a minute without
 * rules), or `least` ms (the request's `recordTtl`) when that is longer.
 */
export function recordTtlUs(rules: readonly (StoreRule | undefined)[], n: number, least = 0): number {
  let ttl = 0;
  for (let i = 0; i < n; i++) if (rules[i]!.intervalUs > ttl) ttl = rules[i]!.intervalUs;
  if (ttl === 0) ttl = 60_000_000;
  return Math.max(least * 1000, ttl);
}

/** Checks an acquire request's `turn` (see AcquireRequest.turn): undefined, or a ticket ≥ 0. */
export function checkTurn(turn: unknown): number | undefined {
  if (turn === undefined) return undefined;
  if (typeof turn !== 'number' || !Number.isSafeInteger(turn) || turn < 0) {
    throw new TypeError(
      `Expected \`request.turn\` to be a non-negative integer (an answer's \`turn\`, or 0), got ${describe(turn)}`,
    );
  }
  return turn;
}
