/**
 * Rule changes (`valve.setRules()`): the arithmetic that converts the old rules' states into
 * the new rules' (see docs/architecture.md, "Rule changes"). Pure functions on integer µs; the
 * memory store runs them, acquire.lua mirrors them.
 *
 * A new rule's state gets U added: an upper bound of the units granted in its current window
 * (fixed window: since the window's start; sliding window and GCRA: in the last interval),
 * the smallest of what each old rule's state proves. When an old state cannot tell (a window
 * it no longer holds), the old rule's whole limit is assumed spent there; with no old rule at
 * all, U is infinite (the new rule starts full).
 */
import type { StoreRule } from './rule.js';

/** Where a new rule's current window starts (µs): the units granted since then (inclusive) count against it. */
export function convertFrom(rule: StoreRule, nowUs: number, windowK: number): number {
  if (rule.algorithm === 'fixed-window') return windowK * rule.intervalUs;
  // Sliding window and GCRA: the windows (g − I, g] of grants g from now on.
  return nowUs - rule.intervalUs + 1;
}

/**
 * An upper bound of the units granted in [startUs, nowUs] that an old rule's state proves.
 * `value`: GCRA tat as stored (µs, possibly in the past), or now − interval when the state is
 * missing; fixed-window count of window `windowK`; or sliding-window live sum (entries after
 * now − interval).
 *
 * A GCRA state is kept one interval past its tat (gcraExpiry()), so a missing one was last
 * spent up to a tat at most now − interval: that bounds what it granted, as a stored tat does.
 */
export function spentSince(
  rule: StoreRule,
  value: number,
  windowK: number,
  nowUs: number,
  startUs: number,
): number {
  const I = rule.intervalUs;
  if (rule.algorithm === 'gcra') {
    // Each grant in [start, now] pushed tat at least its increment past start (from
    // max(tat, g) >= start), so the tat stored after them bounds their units. A state is dropped
    // (or its key expires) no earlier than one interval after its tat: an older tat counts as
    // now − interval, as a missing state does (the test clock keeps Redis keys longer).
    const tat = Math.max(value, nowUs - I);
    return tat > startUs ? Math.floor((tat - startUs) / rule.emissionUs) : 0;
  }
  let covered: number;
  if (rule.algorithm === 'fixed-window') covered = windowK * I;
  else covered = nowUs - I + 1;
  // Earlier windows the state no longer holds: assume each spent its whole limit.
  const older = startUs < covered ? Math.ceil((covered - startUs) / I) : 0;
  return value + older * rule.limit;
}

/** A new rule's state value after adding `units` (U, possibly Infinity) to it. */
export function converted(rule: StoreRule, value: number, units: number, nowUs: number): number {
  if (rule.algorithm === 'gcra') {
    // Nothing to add: the state stays as it is (a missing one stays missing).
    if (units <= 0) return value;
    // At most one interval beyond the burst tolerance: the old spend, however long ago it was
    // granted in the new rule's window, is counted until that window has passed. Below 2^53:
    // the interval and the tolerance are each at most 365 days (rule.ts).
    const cap = rule.burst * rule.emissionUs;
    const most = nowUs + cap + rule.intervalUs;
    const tat = Math.max(value, nowUs) + Math.min(units, rule.limit + rule.burst) * rule.emissionUs;
    return Math.min(tat, most);
  }
  if (rule.algorithm === 'fixed-window') {
    const count = value + units;
    return Math.min(count, rule.limit);
  }
  // Sliding window: one entry of the units at now (leaving one interval from now).
  return value + Math.min(units, rule.limit);
}
