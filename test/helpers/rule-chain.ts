/**
 * Chains of rule changes on a store, driven by the valve's own RuleSet (src/rulesets.ts): each
 * segment's first step follows a `setRules()`, every call is filled and answered by the
 * RuleSet as a valve's is (so a change may come while the last one's transition is still on,
 * and the old rules are sent with the times from which their states count, `previousSince`).
 *
 * The bound, per rule "instance" (a rule from the first call that carries it, as a rule or a
 * previous rule, up to the first call that no longer does): in every window of the rule that
 * holds a grant of the instance, the units granted by the instance fit in what the rule
 * leaves once the units granted in that window before the instance began are counted:
 * under(W) ≤ max(0, bound − before(W)), where bound is L for the windows (fixed: each
 * aligned window; sliding: each (g − I, g]) and L + B − 1 for GCRA on each (g − I, g].
 * A valve's first rules have nothing before them: their windows hold their plain bound.
 * This is the Guarantees page's "Rule changes" per window, for any number of changes.
 */
import { normalizeRule, type Rule, type StoreRule } from '../../src/rules/rule.js';
import { RuleSet, type RulesRequest } from '../../src/rulesets.js';
import type { AcquireRequest, AcquireResult, Store } from '../../src/stores/store.js';
import type { FakeClock } from './fake-clock.js';
import type { Step } from './rule-change.js';

export interface ChainCall {
  /** Store clock of the decision (ms). */
  readonly t: number;
  /** The costs granted, in order. */
  readonly granted: readonly number[];
  /** The digests the call was checked against (its rules and previous rules). */
  readonly digests: ReadonlySet<string>;
}

export interface ChainRun {
  readonly calls: ChainCall[];
  readonly answers: AcquireResult[];
  /** Every rule by digest. */
  readonly rules: Map<string, StoreRule>;
}

const norm = (rules: readonly Rule[], tag: string): StoreRule[] =>
  rules.map((r, i) => normalizeRule(r, `${tag}[${i}]`));

/**
 * Runs segment i's steps under `sets[i]` (setRules() before each segment after the first; a
 * segment may be empty: two changes before any call). The calls whose index is in `lost` are
 * made on the store but their answers never reach the RuleSet (a reply lost on the way back):
 * their grants count as the store's.
 */
export async function runChain(
  store: Store,
  clock: FakeClock,
  id: string,
  sets: readonly (readonly Rule[])[],
  segments: readonly (readonly Step[])[],
  lost: ReadonlySet<number> = new Set(),
): Promise<ChainRun> {
  const normalized = sets.map((s, i) => norm(s, `set${i}`));
  const rules = new Map<string, StoreRule>();
  for (const s of normalized) for (const r of s) rules.set(r.digest, r);
  const ruleSet = new RuleSet(normalized[0]!, undefined, clock);
  const calls: ChainCall[] = [];
  const answers: AcquireResult[] = [];
  for (let i = 0; i < segments.length; i++) {
    if (i > 0) ruleSet.set(normalized[i]!);
    for (const step of segments[i]!) {
      clock.advance(step.dt / 1000);
      if (step.pause) await store.pause(id, step.pause);
      const request: RulesRequest & { id: string; costs: number[]; count: number } = {
        id,
        rules: [],
        previous: undefined,
        previousSince: undefined,
        convert: undefined,
        record: undefined,
        recordTtl: undefined,
        costs: [],
        count: 0,
      };
      ruleSet.fill(request, clock.now());
      const checked = [...request.rules, ...(request.previous ?? [])];
      // A cost above an old rule's maxCost never fits it; above a rule's own, it is refused.
      const max = Math.min(...request.rules.map((r) => r.maxCost));
      request.costs = step.costs.map((c) => Math.min(c, max));
      request.count = request.costs.length;
      const result = await store.acquire(request as AcquireRequest);
      if (!lost.has(calls.length)) ruleSet.answered(request, result, id);
      answers.push(result);
      calls.push({
        t: result.now,
        granted: request.costs.slice(0, result.granted),
        digests: new Set(checked.map((r) => r.digest)),
      });
    }
  }
  return { calls, answers, rules };
}

/** Every violation of the bound described at the top of this file. */
export function chainViolations(run: ChainRun): string[] {
  const out: string[] = [];
  const us = (t: number) => Math.round(t * 1000);
  const { calls } = run;
  for (const [digest, rule] of run.rules) {
    let c = 0;
    while (c < calls.length) {
      if (!calls[c]!.digests.has(digest)) {
        c++;
        continue;
      }
      // An instance: calls [start, end).
      const start = c;
      while (c < calls.length && calls[c]!.digests.has(digest)) c++;
      out.push(...instanceViolations(calls, rule, start, c, us));
    }
  }
  return out;
}

function instanceViolations(
  calls: readonly ChainCall[],
  rule: StoreRule,
  start: number,
  end: number,
  us: (t: number) => number,
): string[] {
  const out: string[] = [];
  const bound = rule.algorithm === 'gcra' ? rule.limit + rule.burst - 1 : rule.limit;
  const I = rule.intervalUs;
  const sum = (from: number, to: number, lo: number, hi: number) => {
    let units = 0;
    for (let i = from; i < to; i++) {
      const t = us(calls[i]!.t);
      if (t < lo || t >= hi) continue;
      for (const cost of calls[i]!.granted) units += cost;
    }
    return units;
  };
  for (let i = start; i < end; i++) {
    if (calls[i]!.granted.length === 0) continue;
    const e = us(calls[i]!.t);
    let lo: number;
    let hi: number;
    if (rule.algorithm === 'fixed-window') {
      lo = Math.floor(e / I) * I;
      hi = lo + I;
    } else {
      lo = e - I + 1;
      hi = e + 1;
    }
    // Sliding windows and GCRA: (g − I, g] holds the calls up to this one (later ones at the
    // same time are checked with their own window).
    const under = sum(start, rule.algorithm === 'fixed-window' ? end : i + 1, lo, hi);
    const before = sum(0, start, lo, hi);
    const allowed = Math.max(0, bound - before);
    if (under > allowed) {
      out.push(
        `${rule.label} (calls ${start}..${end - 1}): ${under} units in [${lo}, ${hi}) µs after ${before} before it, allowed ${allowed}`,
      );
    }
  }
  return out;
}
