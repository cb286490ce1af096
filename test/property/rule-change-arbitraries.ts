/** Random rule sets and schedules for the rule-change property tests. */
import fc from 'fast-check';
import type { Rule } from '../../src/rules/rule.js';
import type { Step } from '../helpers/rule-change.js';

const interval = fc.constantFrom(10, 50, 100, 250, 1000);
export const changeRuleArb: fc.Arbitrary<Rule> = fc.oneof(
  fc.record({ limit: fc.integer({ min: 1, max: 12 }), interval, burst: fc.integer({ min: 1, max: 4 }) }),
  fc.record({
    limit: fc.integer({ min: 1, max: 12 }),
    interval,
    algorithm: fc.constant('fixed-window' as const),
  }),
  fc.record({
    limit: fc.integer({ min: 1, max: 12 }),
    interval,
    algorithm: fc.constant('sliding-window' as const),
  }),
);
export const stepArb: fc.Arbitrary<Step> = fc.record({
  dt: fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 3, arbitrary: fc.integer({ min: 1, max: 2_000 }) },
    { weight: 3, arbitrary: fc.integer({ min: 1_000, max: 300_000 }) },
    // Now and then an idle gap of up to 2.5 of the longest interval: a GCRA state that was kept
    // one interval past its tat, or dropped (on Redis, under the test clock, a key kept longer
    // whose tat is older than that), met by the conversion or by a call after it.
    { weight: 1, arbitrary: fc.integer({ min: 300_000, max: 2_500_000 }) },
  ),
  costs: fc.array(fc.constantFrom(1, 1, 1, 2, 3, 5), { minLength: 1, maxLength: 8 }),
  // Now and then a pause (another process's) just before the call, the conversion's included.
  pause: fc.oneof(
    { weight: 8, arbitrary: fc.constant(0) },
    { weight: 1, arbitrary: fc.constantFrom(1, 50, 500) },
  ),
});
/** Old and new rule sets; the new one sometimes shares rules with the old. */
export const setsArb = fc
  .tuple(
    fc.array(changeRuleArb, { minLength: 1, maxLength: 3 }),
    fc.array(changeRuleArb, { minLength: 0, maxLength: 3 }),
    fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }),
  )
  .map(([oldRules, fresh, keep]) => {
    const newRules = [...oldRules.filter((_, i) => keep[i]), ...fresh];
    return { oldRules, newRules: newRules.length > 0 ? newRules : fresh.length > 0 ? fresh : [oldRules[0]!] };
  });
