/**
 * Rule changes on a store, as a valve drives them (src/rulesets.ts): acquisitions under the
 * old rules, then the first one under the new rules with `previous` and `convert`, then the new
 * rules with `previous` until one interval of the longest old rule has passed on the store's
 * clock, then the new rules alone. Records every grant with the store's clock, and checks
 * "the stricter of the two rule sets" per window:
 *
 * - every old rule o, on every window of o that starts before the change (so ends before
 *   change + o's interval): its bound (test/helpers/bounds.ts), over every grant that window
 *   can hold (those before change + I_o);
 * - every new rule r, on every window of r that holds a grant made after the change: the units
 *   granted after the change fit in what r leaves once the units granted before the change in
 *   that window are counted: units(W) ≤ max(before(W), bound_r) where bound_r is L for the
 *   windows (fixed: each aligned window; sliding: each (g − I, g]) and L + B − 1 for GCRA on
 *   each (g − I, g].
 *
 * So a window that contains the change holds no more than the stricter of the two sets allows;
 * a window wholly before it obeys the old set, one wholly after it the new set.
 */
import { normalizeRule, type Rule, type StoreRule } from '../../src/rules/rule.js';
import { recordOf } from '../../src/rulesets.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';
import { checkRules, type Grant } from './bounds.js';
import type { FakeClock } from './fake-clock.js';

export interface Step {
  /** µs to advance before the call. */
  readonly dt: number;
  readonly costs: readonly number[];
  /** ms of a pause written just before the call (another process's), if any. */
  readonly pause?: number;
}

export interface ChangeRun {
  readonly grants: (Grant & { after: boolean })[];
  /** Store clock of the conversion (ms). */
  readonly changeAt: number;
  readonly answers: AcquireResult[];
}

const norm = (rules: readonly Rule[], tag: string): StoreRule[] =>
  rules.map((r, i) => normalizeRule(r, `${tag}[${i}]`));

export function maxCostOf(rules: readonly StoreRule[]): number {
  return rules.reduce((m, r) => Math.min(m, r.maxCost), Number.POSITIVE_INFINITY);
}

/** Runs `before` steps under `oldRules`, then `after` steps under `newRules`, on `store`. */
export async function runChange(
  store: Store,
  clock: FakeClock,
  id: string,
  oldRules: readonly Rule[],
  newRules: readonly Rule[],
  before: readonly Step[],
  after: readonly Step[],
): Promise<ChangeRun> {
  const O = norm(oldRules, 'old');
  const N = norm(newRules, 'new');
  const oldMax = maxCostOf(O);
  const newMax = maxCostOf(N);
  const span = Math.max(...O.map((r) => r.intervalUs / 1000));
  const grants: (Grant & { after: boolean })[] = [];
  const answers: AcquireResult[] = [];
  const take = (r: AcquireResult, costs: readonly number[], isAfter: boolean) => {
    answers.push(r);
    for (let i = 0; i < r.granted; i++) grants.push({ t: r.now, cost: costs[i]!, after: isAfter });
  };
  for (const step of before) {
    clock.advance(step.dt / 1000);
    if (step.pause) await store.pause(id, step.pause);
    const costs = step.costs.map((c) => Math.min(c, oldMax));
    take(
      await store.acquire({ id, rules: O, costs, count: costs.length, record: recordOf(O) }),
      costs,
      false,
    );
  }
  let changeAt = Number.NaN;
  let convert = true;
  for (const step of after) {
    clock.advance(step.dt / 1000);
    // A pause met by the conversion too: the store converts whatever it answers.
    if (step.pause) await store.pause(id, step.pause);
    const costs = step.costs.map((c) => Math.min(c, newMax));
    const inTransition = convert || answers.at(-1)!.now < changeAt + span;
    const r = await store.acquire({
      id,
      rules: N,
      costs,
      count: costs.length,
      record: recordOf(N),
      ...(inTransition ? { previous: O, convert } : {}),
    });
    if (convert) changeAt = r.now;
    convert = false;
    take(r, costs, true);
  }
  if (Number.isNaN(changeAt)) changeAt = clock.now();
  return { grants, changeAt, answers };
}

/** Every violation of "the stricter of the two rule sets" (see the top of this file). */
export function stricterViolations(
  run: ChangeRun,
  oldRules: readonly Rule[],
  newRules: readonly Rule[],
): string[] {
  const out: string[] = [];
  const us = (t: number) => Math.round(t * 1000);
  const tc = us(run.changeAt);
  for (const o of norm(oldRules, 'old')) {
    const held = run.grants.filter((g) => us(g.t) < tc + o.intervalUs);
    for (const v of checkRules(held, [o])) out.push(`old ${v.message}`);
  }
  for (const r of norm(newRules, 'new')) {
    const bound = r.algorithm === 'gcra' ? r.limit + r.burst - 1 : r.limit;
    const after = run.grants.filter((g) => g.after);
    for (const g of after) {
      const e = us(g.t);
      let lo: number;
      let hi: number;
      if (r.algorithm === 'fixed-window') {
        lo = Math.floor(e / r.intervalUs) * r.intervalUs;
        hi = lo + r.intervalUs;
      } else {
        lo = e - r.intervalUs + 1;
        hi = e + 1;
      }
      let units = 0;
      let beforeUnits = 0;
      for (const h of run.grants) {
        const t = us(h.t);
        if (t >= lo && t < hi && (r.algorithm === 'fixed-window' || t <= e)) {
          units += h.cost;
          if (!h.after) beforeUnits += h.cost;
        }
      }
      if (units > Math.max(beforeUnits, bound)) {
        out.push(
          `new ${r.label}: ${units} units in [${lo}, ${hi}) µs (${beforeUnits} before the change at ${tc}), allowed ${Math.max(beforeUnits, bound)}`,
        );
      }
    }
  }
  return out;
}
