/** Random chains of rule changes for the rule-chain property tests. */
import fc from 'fast-check';
import type { Rule } from '../../src/rules/rule.js';
import type { Step } from '../helpers/rule-change.js';
import { changeRuleArb, stepArb } from './rule-change-arbitraries.js';

/**
 * A later set's new rule: now and then one with a window far longer than the others' (5 s),
 * which outlasts the transitions before it: what it counts of the time before them can come
 * only from the rules' states, not from the old rules still being spent.
 */
const laterRuleArb: fc.Arbitrary<Rule> = fc.oneof(
  { weight: 2, arbitrary: changeRuleArb },
  {
    weight: 1,
    arbitrary: fc
      .record({
        limit: fc.integer({ min: 1, max: 30 }),
        interval: fc.constant(5_000),
        algorithm: fc.constantFrom('gcra' as const, 'fixed-window' as const, 'sliding-window' as const),
        burst: fc.integer({ min: 1, max: 30 }),
      })
      .map((r) =>
        r.algorithm === 'gcra' ? r : { limit: r.limit, interval: r.interval, algorithm: r.algorithm },
      ),
  },
);

/** 2 to 4 rule sets, each keeping some rules of the one before (or none) and adding others. */
export const chainArb: fc.Arbitrary<Rule[][]> = fc
  .tuple(
    fc.array(changeRuleArb, { minLength: 1, maxLength: 3 }),
    fc.array(
      fc.tuple(
        fc.array(laterRuleArb, { minLength: 0, maxLength: 2 }),
        fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }),
      ),
      { minLength: 1, maxLength: 3 },
    ),
  )
  .map(([first, changes]) => {
    const sets: Rule[][] = [first];
    for (const [fresh, keep] of changes) {
      const last = sets.at(-1)!;
      const next = [...last.filter((_, i) => keep[i]), ...fresh];
      sets.push(next.length > 0 ? next : [fresh[0] ?? last[0]!]);
    }
    return sets;
  });

/**
 * One segment of steps per rule set: short ones, so changes often meet a transition; a later
 * one now and then empty (the next change comes before any call).
 */
export const segmentsArb = (count: number): fc.Arbitrary<Step[][]> =>
  fc
    .tuple(
      fc.array(stepArb, { minLength: 1, maxLength: 12 }),
      fc.array(
        fc.oneof(
          { weight: 4, arbitrary: fc.array(stepArb, { minLength: 1, maxLength: 12 }) },
          { weight: 1, arbitrary: fc.constant([] as Step[]) },
        ),
        { minLength: count - 1, maxLength: count - 1 },
      ),
    )
    .map(([first, rest]) => [first, ...rest]);

/** A chain, its segments, and the calls whose answers are lost (about one in eight). */
export const chainRunArb = chainArb.chain((sets) =>
  fc
    .tuple(segmentsArb(sets.length), fc.array(fc.boolean(), { minLength: 50, maxLength: 50 }), fc.nat(7))
    .map(([segments, flags, shift]) => {
      const lost = new Set<number>();
      flags.forEach((f, i) => {
        if (f && (i + shift) % 4 === 0) lost.add(i);
      });
      return { sets, segments, lost };
    }),
);
