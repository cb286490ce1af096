/**
 * Chains of rule changes on the memory store (fake clock), driven by the valve's RuleSet: a
 * change may come while the last one's transition is still on, or long after. Every rule,
 * from the call that first carries it, holds its bound in every window once the units
 * granted in that window before it are counted (test/helpers/rule-chain.ts): spent budget
 * carries over every change, a change is never a fresh budget.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { chainViolations, runChain } from '../helpers/rule-chain.js';
import { chainRunArb } from './rule-chain-arbitraries.js';

const runs = Number(process.env.VALVE_PROPERTY_RUNS ?? 400);

describe('chains of rule changes on the memory store', () => {
  it('every rule keeps its bound per window, counting what was granted before it', async () => {
    await fc.assert(
      fc.asyncProperty(chainRunArb, async ({ sets, segments, lost }) => {
        const clock = new FakeClock();
        const store = memoryStore({ clock });
        const run = await runChain(store, clock, 'id', sets, segments, lost);
        expect(chainViolations(run)).toEqual([]);
      }),
      // Cheap runs (about 0.15 ms each): ten times the usual count.
      { numRuns: runs * 10 },
    );
  });

  it('a second change inside the first one’s transition: 100 per 10 s, then 1 per second, then 100 per minute', async () => {
    // 100 units in the first second; the cut to 1/s; 1 s later the change to 100/min. The rule
    // 1/s introduced by the first change has counted only 1 s of grants: it cannot tell what
    // the minute before held, so the third rule takes the first one's state alone (which
    // cannot tell either: its earlier windows are assumed spent).
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const step = (dt: number, n: number) => ({ dt, costs: Array.from({ length: n }, () => 1) });
    const run = await runChain(
      store,
      clock,
      'id',
      [
        [{ limit: 100, interval: 10_000, burst: 100 }],
        [{ limit: 1, interval: 1_000 }],
        [{ limit: 100, interval: 60_000, burst: 100 }],
      ],
      [
        [step(0, 8), ...Array.from({ length: 23 }, () => step(40_000, 4))],
        [step(10_000, 1), step(500_000, 1)],
        Array.from({ length: 60 }, () => step(1_000_000, 8)),
      ],
    );
    expect(chainViolations(run)).toEqual([]);
    const granted = (from: number, to: number) =>
      run.calls.filter((c) => c.t >= from && c.t < to).reduce((s, c) => s + c.granted.length, 0);
    const first = run.calls[0]!.t;
    // Every minute from the first grant holds at most 199 (100 per minute, burst 100).
    expect(granted(first, first + 60_000)).toBeLessThanOrEqual(199);
  });
});
