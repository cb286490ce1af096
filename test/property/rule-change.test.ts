/**
 * Rule changes on the memory store (fake clock): random old and new rule sets, random
 * schedules across the change, driven as a valve drives them (test/helpers/rule-change.ts).
 * Over the transition no window holds more than the stricter of the two sets allows (defined
 * per window in that helper): spent budget carries over, a change is never a fresh budget.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { runChange, stricterViolations } from '../helpers/rule-change.js';
import { setsArb, stepArb } from './rule-change-arbitraries.js';

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
