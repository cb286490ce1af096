/**
 * Rule changes on the memory store (fake clock): random old and new rule sets, random
 * schedules across the change, driven as a valve drives them (test/helpers/rule-change.ts).
 * Over the transition no window holds more than the stricter of the two sets allows (defined
 * per window in that helper): spent budget carries over, a change is never a fresh budget.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireRequest } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';
import {
  type ChangeRun,
  maxCostOf,
  runChange,
  type Step,
  stricterViolations,
} from '../helpers/rule-change.js';
import { spyMemoryStore } from '../helpers/spy-store.js';
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

describe('setRules() on a valve (fake clock, memory store through the spy)', () => {
  it('never admits more than the stricter of the old and the new rule set, per window', async () => {
    await fc.assert(
      fc.asyncProperty(
        setsArb,
        fc.array(stepArb, { minLength: 1, maxLength: 12 }),
        fc.array(stepArb, { minLength: 1, maxLength: 20 }),
        async ({ oldRules, newRules }, before, after) => {
          const clock = new FakeClock();
          const store = spyMemoryStore(clock);
          const valve = createValve({ id: 'v', rules: oldRules, store, clock, batch: 4 });
          const max = Math.min(
            maxCostOf(oldRules.map((r, i) => normalizeRule(r, `o${i}`))),
            maxCostOf(newRules.map((r, i) => normalizeRule(r, `n${i}`))),
          );
          const jobs: Promise<unknown>[] = [];
          const feed = async (steps: readonly Step[]) => {
            for (const step of steps) {
              for (const c of step.costs)
                jobs.push(valve.run(() => {}, { cost: Math.min(c, max) }).catch(() => {}));
              await flushMicrotasks();
              clock.advance(step.dt / 1000);
              await flushMicrotasks();
            }
          };
          await feed(before);
          const changedAt = clock.now();
          const callsBefore = store.acquires.length;
          await valve.setRules(newRules);
          await feed(after);
          await valve.close();
          await Promise.all(jobs);
          const grants: ChangeRun['grants'] = [];
          let changeAt = Number.NaN;
          store.calls
            .filter((c) => c.op === 'acquire')
            .forEach((c, i) => {
              const call = store.acquires[i]!;
              const request = c.args[0] as AcquireRequest;
              if (request.convert === true && Number.isNaN(changeAt)) changeAt = call.decidedAt!;
              for (let j = 0; j < (call.granted ?? 0); j++) {
                grants.push({ t: call.decidedAt!, cost: call.costs[j]!, after: i >= callsBefore });
              }
            });
          if (Number.isNaN(changeAt)) changeAt = changedAt;
          expect(stricterViolations({ grants, changeAt, answers: [] }, oldRules, newRules)).toEqual([]);
        },
      ),
      { numRuns: Math.ceil(runs / 2) },
    );
  }, 60_000);
});
