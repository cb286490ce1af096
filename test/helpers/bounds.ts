import type { Rule, StoreRule } from '../../src/rules/rule.js';
import { normalizeRule } from '../../src/rules/rule.js';

/**
 * An independent checker for the "Rate bounds" table of the Guarantees page. It
 * knows nothing of the stores' arithmetic: it takes the grants that happened and a
 * rule, and lists every violated bound.
 *
 * Input: one entry per granted job, `t` = the store's clock at admission in epoch ms
 * (a fraction is fine), `cost` = the job's cost in units: a positive integer (anything else
 * throws: valve refuses other costs, and the bounds are stated for whole units); `t` must be a
 * finite number (NaN, ±Infinity or a missing time throw a RangeError). Times are rounded to the nearest µs
 * (every store clock has µs resolution), so ms values such as `now` from an
 * AcquireResult compare exactly. Entries may come in any order; grants with the same
 * `t` keep their given order.
 *
 * Bounds checked, with I = interval, L = limit, B = burst:
 *
 * - GCRA (any burst), "window": every half-open window [s, s + I) holds at most
 *   L + B − 1 units. With B = 1 this is "at most L per I".
 * - GCRA (any burst), "spacing": for any grants i ≤ j in time order,
 *   t_j − t_i ≥ (cost_i + … + cost_j − B) × I / L. This is the GCRA envelope; with B = 1
 *   and unit costs it says consecutive starts are at least I / L apart, i.e.
 *   "spaced interval / limit apart" with no rounding allowance at all: the store's
 *   emission interval is rounded up to whole µs, so it is never shorter than I / L.
 * - Fixed window, "aligned-window": each aligned window [k × I, (k + 1) × I) of the
 *   epoch-µs clock holds at most L units.
 * - Fixed window, "sliding-2x": any half-open window of length I holds at most 2 × L
 *   units (the documented worst case near a window boundary).
 * - Sliding window, "window": any half-open window [s, s + I) holds at most L units.
 * - Several rules: call {@link checkRules}; each rule is checked on its own.
 */
export interface Grant {
  /** Store clock at admission, epoch ms (fraction allowed). */
  readonly t: number;
  readonly cost: number;
}

export type BoundKind = 'window' | 'spacing' | 'aligned-window' | 'sliding-2x';

export interface Violation {
  /** The rule, e.g. "10 per 1000ms (gcra, burst 1)". */
  readonly rule: string;
  readonly bound: BoundKind;
  /** First and last grant involved (ms, as given). */
  readonly from: number;
  readonly to: number;
  /** Units admitted in the offending span, and what the bound allows. */
  readonly units: number;
  readonly allowed: number;
  readonly message: string;
}

interface Point {
  us: number;
  cost: number;
  t: number;
}

function toRule(rule: Rule | StoreRule): {
  label: string;
  algorithm: string;
  L: number;
  I: number;
  B: number;
} {
  const r = 'digest' in rule ? rule : normalizeRule(rule, 'rule');
  return { label: r.label, algorithm: r.algorithm, L: r.limit, I: r.intervalUs, B: r.burst };
}

const tol = (x: number) => 1e-9 * Math.max(1, Math.abs(x));

/** Lists every bound of `rule` that `grants` violate (empty when all hold). */
export function checkBounds(grants: readonly Grant[], rule: Rule | StoreRule): Violation[] {
  const { label, algorithm, L, I, B } = toRule(rule);
  for (const g of grants) {
    // A time that is not a finite number would sort nowhere and fall in no window (and a NaN
    // never leaves the fixed-window loop): refused like a cost that is not whole units.
    if (typeof g.t !== 'number' || !Number.isFinite(g.t)) {
      throw new RangeError(
        `checkBounds: times are finite epoch ms, got ${typeof g.t === 'string' ? JSON.stringify(g.t) : String(g.t)} (cost ${g.cost})`,
      );
    }
    if (!Number.isSafeInteger(g.cost) || g.cost < 1) {
      throw new RangeError(`checkBounds: costs are whole units (positive integers), got ${g.cost} at ${g.t}`);
    }
  }
  const points: Point[] = grants
    .map((g, index) => ({ us: Math.round(g.t * 1000), cost: g.cost, t: g.t, index }))
    .sort((a, b) => a.us - b.us || a.index - b.index);
  const out: Violation[] = [];
  const push = (bound: BoundKind, i: number, j: number, units: number, allowed: number, what: string) => {
    out.push({
      rule: label,
      bound,
      from: points[i]!.t,
      to: points[j]!.t,
      units,
      allowed,
      message: `${label}: ${what} (grants ${i}..${j} at ${points[i]!.t}..${points[j]!.t} ms, ${units} units, allowed ${allowed})`,
    });
  };

  // Sliding half-open windows [t_i, t_i + I): the worst windows start at a grant.
  const sliding = (allowed: number, bound: BoundKind, what: string) => {
    let end = 0;
    let sum = 0;
    for (let i = 0; i < points.length; i++) {
      while (end < points.length && points[end]!.us < points[i]!.us + I) sum += points[end++]!.cost;
      if (sum > allowed) push(bound, i, end - 1, sum, allowed, what);
      sum -= points[i]!.cost;
    }
  };

  if (algorithm === 'gcra') {
    sliding(L + B - 1, 'window', `more than limit + burst - 1 units in a window of ${I}µs`);
    // Spacing envelope in O(n): t_j − P_j·I/L + B·I/L ≥ max_{i≤j} (t_i − P_{i−1}·I/L).
    if (points.length > 0) {
      const t0 = points[0]!.us;
      const per = I / L;
      let prefix = 0; // P_{j-1}
      let best = Number.NEGATIVE_INFINITY;
      let bestAt = 0;
      for (let j = 0; j < points.length; j++) {
        const g = points[j]!.us - t0 - prefix * per;
        if (g >= best) {
          // Ties: the latest start gives the shortest offending span.
          best = g;
          bestAt = j;
        }
        prefix += points[j]!.cost;
        const lhs = points[j]!.us - t0 - prefix * per + B * per;
        if (lhs < best - 1e-6 - tol(prefix * per)) {
          let units = 0;
          for (let m = bestAt; m <= j; m++) units += points[m]!.cost;
          const gap = points[j]!.us - points[bestAt]!.us;
          push(
            'spacing',
            bestAt,
            j,
            units,
            B + (gap * L) / I,
            `starts closer than the GCRA envelope: ${gap}µs apart, needed ${((units - B) * per).toFixed(3)}µs`,
          );
        }
      }
    }
  } else if (algorithm === 'fixed-window') {
    let i = 0;
    while (i < points.length) {
      const k = Math.floor(points[i]!.us / I);
      let j = i;
      let sum = 0;
      while (j < points.length && Math.floor(points[j]!.us / I) === k) sum += points[j++]!.cost;
      if (sum > L) push('aligned-window', i, j - 1, sum, L, `more than limit units in window ${k}`);
      i = j;
    }
    sliding(2 * L, 'sliding-2x', `more than 2 × limit units in a window of ${I}µs`);
  } else {
    sliding(L, 'window', `more than limit units in a window of ${I}µs`);
  }
  return out;
}

/** Several rules: each must hold on its own. */
export function checkRules(grants: readonly Grant[], rules: readonly (Rule | StoreRule)[]): Violation[] {
  return rules.flatMap((rule) => checkBounds(grants, rule));
}
