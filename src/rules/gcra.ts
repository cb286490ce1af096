/**
 * GCRA arithmetic in integer microseconds on the store's clock (see
 * docs/architecture.md, "The arithmetic"). Pure functions on numbers, so the memory
 * store can run them per job without allocating; the Redis Lua script mirrors them.
 *
 * State: `tat`, the theoretical arrival time (µs). A missing state, or a tat in the past, admits
 * as `tat = now`. A job of cost c needs inc = ceil(c × emissionUs); next = max(tat, now) + inc.
 * It fits when next − now ≤ burst × emissionUs, and then tat = next.
 */

/**
 * When a GCRA state may be dropped (µs): one interval of its rule after `tat`, the moment it is
 * fresh again. Kept that long, a missing state proves its last tat was at least one interval
 * ago, which a rule change's conversion counts on (src/rules/convert.ts, spentSince()): a state
 * dropped at tat could have been spent at full rate until a moment before.
 */
export function gcraExpiry(tat: number, intervalUs: number): number {
  return tat + intervalUs;
}

/** GCRA time one job of `cost` consumes, in µs: ceil(cost × emissionUs), rounded up so the bound holds. */
export function gcraIncrement(cost: number, emissionUs: number): number {
  return Math.ceil(cost * emissionUs);
}

/**
 * The increment a store charges a job of `cost` in its checks (never in a grant):
 * gcraIncrement(), but at most (burst + 1) × emissionUs. A cost above the burst can never fit
 * (the valve only sends one for a previous rule of a rule change, docs/architecture.md, "Rule
 * changes"): it is checked, refused and waits as a cost of burst + 1 would, so its wait stays
 * one the stores can answer (below 2^53 µs) instead of (cost − burst) emission intervals. Every
 * cost up to the burst gets gcraIncrement() unchanged.
 */
export function gcraCharge(cost: number, emissionUs: number, burst: number): number {
  const inc = Math.ceil(cost * emissionUs);
  const most = (burst + 1) * emissionUs;
  return Math.min(inc, most);
}

/** The `tat` the rule would have after granting a job of increment `inc` at `nowUs`. */
export function gcraNext(tat: number, nowUs: number, inc: number): number {
  return Math.max(tat, nowUs) + inc;
}

/**
 * How long (µs) the job whose would-be tat is `next` must wait before it fits:
 * next − now − burst × emissionUs, or 0 when it fits now. A positive result is exact:
 * at now + wait (with no other spend meanwhile) the same job fits.
 */
export function gcraWait(next: number, nowUs: number, burst: number, emissionUs: number): number {
  const over = next - nowUs - burst * emissionUs;
  return Math.max(over, 0);
}
