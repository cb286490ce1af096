/**
 * Rule changes on the memory store (fake clock): random old and new rule sets, random
 * schedules across the change, driven as a valve drives them (test/helpers/rule-change.ts).
 * Over the transition no window holds more than the stricter of the two sets allows (defined
 * per window in that helper): spent budget carries over, a change is never a fresh budget.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Rule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { runChange, type Step, stricterViolations } from '../helpers/rule-change.js';

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
  dt: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2_000 }), fc.integer({ min: 1_000, max: 300_000 })),
  costs: fc.array(fc.constantFrom(1, 1, 1, 2, 3, 5), { minLength: 1, maxLength: 8 }),
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

const runs = Number(process.env.VALVE_PROPERTY_RUNS ?? 400);

describe('a rule change on the memory store', () => {
  it('never admits more than the stricter of the old and the new rule set, per window', async () => {
    await fc.assert(
      fc.asyncProperty(
        setsArb,
        fc.array(stepArb, { minLength: 1, maxLength: 25 }),
        fc.array(stepArb, { minLength: 1, maxLength: 40 }),
        async ({ oldRules, newRules }, before, after) => {
          const clock = new FakeClock();
          const store = memoryStore({ clock });
          const run = await runChange(store, clock, 'id', oldRules, newRules, before, after);
          expect(stricterViolations(run, oldRules, newRules)).toEqual([]);
        },
      ),
      { numRuns: runs },
    );
  });

  it('counts what was spent: cutting 10 per second to 4 after 6 units admits nothing more in that window', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const run = await runChange(
      store,
      clock,
      'id',
      [{ limit: 10, interval: 1000, algorithm: 'fixed-window' }],
      [{ limit: 4, interval: 1000, algorithm: 'fixed-window' }],
      [{ dt: 0, costs: [1, 1, 1, 1, 1, 1] }],
      [
        { dt: 100_000, costs: [1] },
        { dt: 100_000, costs: [1] },
        { dt: 1_000_000, costs: [1, 1, 1, 1, 1] },
      ],
    );
    expect(run.answers.map((a) => a.granted)).toEqual([6, 0, 0, 4]);
  });

  it('a raise waits for the old windows that contain the change: 5 → 8 per second after 5 units admits nothing more before the old window ends', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const run = await runChange(
      store,
      clock,
      'id',
      [{ limit: 5, interval: 1000, algorithm: 'sliding-window' }],
      [{ limit: 8, interval: 1000, algorithm: 'sliding-window' }],
      [{ dt: 0, costs: [1, 1, 1, 1, 1] }],
      [
        { dt: 500_000, costs: [1] },
        { dt: 500_000, costs: [1, 1, 1, 1, 1, 1, 1, 1] },
      ],
    );
    expect(run.answers.map((a) => a.granted)).toEqual([5, 0, 3]);
  });
});
