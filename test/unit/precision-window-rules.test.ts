import { existsSync, readFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { TIMER_SLACK_NS } from '../../src/clock.js';
import { joinsLine, spinHelps } from '../../src/pace.js';
import { normalizeRule, type Rule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { spyStore } from '../helpers/spy-store.js';

/*
 * Which rules count as unable to absorb a late start (src/pace.ts, spinHelps): a GCRA rule by
 * its burst tolerance, a window rule by its interval (it can start its whole limit at once, so a
 * start a timer tick late in a window of 2 ms or more costs it nothing, or at most the lateness
 * once per interval for a sliding window). Only such rules lower the timer slack (precision
 * 'timer') or use the precise timer (precision 'spin'). The store's line of turns is for GCRA
 * rules only (joinsLine).
 */

const rules = (...list: Rule[]) => list.map((r, i) => normalizeRule(r, `rules[${i}]`));

const fixed1s: Rule = { limit: 1000, interval: '1s', algorithm: 'fixed-window' };
const sliding1s: Rule = { limit: 1000, interval: '1s', algorithm: 'sliding-window' };
const loose: Rule = { limit: 1000, interval: '1s', burst: 10 }; // 9 ms of burst tolerance
const tight: Rule = { limit: 1000, interval: '1s' }; // burst 1

describe('spinHelps and joinsLine under window rules', () => {
  it('a window rule of 2 ms or more absorbs a late start: alone or beside a loose GCRA rule, no precise timer, no sharper slack', () => {
    expect(spinHelps(rules(fixed1s))).toBe(false);
    expect(spinHelps(rules(sliding1s))).toBe(false);
    expect(spinHelps(rules(loose, fixed1s))).toBe(false);
    expect(spinHelps(rules(sliding1s, loose))).toBe(false);
    expect(spinHelps(rules({ limit: 1, interval: 2, algorithm: 'fixed-window' }))).toBe(false);
    expect(spinHelps(rules({ limit: 5, interval: 2, algorithm: 'sliding-window' }))).toBe(false);
  });

  it('a window shorter than 2 ms, or a GCRA rule beside it with less than 2 ms of tolerance, does not', () => {
    expect(spinHelps(rules({ limit: 1, interval: 1, algorithm: 'fixed-window' }))).toBe(true);
    expect(spinHelps(rules({ limit: 3, interval: 1.999, algorithm: 'sliding-window' }))).toBe(true);
    expect(spinHelps(rules(fixed1s, tight))).toBe(true);
    expect(spinHelps(rules(tight))).toBe(true);
    expect(spinHelps(rules(loose))).toBe(false);
  });

  it('the line of turns is for GCRA rules only: a window rule keeps a valve out of it', () => {
    expect(joinsLine(rules(loose))).toBe(true);
    expect(joinsLine(rules(fixed1s))).toBe(false);
    expect(joinsLine(rules(sliding1s))).toBe(false);
    expect(joinsLine(rules(loose, fixed1s))).toBe(false);
    expect(joinsLine(rules(loose, tight))).toBe(false);
    expect(joinsLine([])).toBe(false);
  });
});

describe("precision 'spin' under a window rule: plain timers, as under the default", () => {
  for (const algorithm of ['fixed-window', 'sliding-window'] as const) {
    it(`${algorithm} 10 per 100 ms, saturated, synchronous store: no precise timer, no ticket, and the bound holds`, async () => {
      const clock = new FakeClock();
      clock.lateness = 0.4; // plain timers fire 0.4 ms late, as Node's may
      clock.preciseExact = true;
      const store = spyStore(memoryStore({ clock }), clock);
      const valve = createValve({
        id: `spin-${algorithm}`,
        rules: { limit: 10, interval: 100, algorithm },
        clock,
        store,
        precision: 'spin',
      });
      const starts: number[] = [];
      const all = Array.from({ length: 35 }, () => valve.run(() => void starts.push(clock.now())));
      await clock.runAllAsync(60_000);
      await Promise.all(all);
      await valve.close();
      expect(starts).toHaveLength(35);
      // Rate waits (three of them: 35 jobs at 10 per window) end on plain timers only.
      expect(clock.preciseRequested).toEqual([]);
      expect(clock.requested.length).toBeGreaterThanOrEqual(3);
      // No call takes part in the store's line (it keeps none under window rules).
      for (const call of store.acquires) expect(call.turn).toBeUndefined();
      // At most 10 starts in any 100 ms.
      const s = [...starts].sort((a, b) => a - b);
      for (let i = 10; i < s.length; i++) expect(s[i]! - s[i - 10]!).toBeGreaterThanOrEqual(100 - 1e-6);
    });
  }
});

const procSlack = '/proc/self/timerslack_ns';
const canCheck = process.platform === 'linux' && isMainThread && existsSync(procSlack);
const readSlack = (): number => Number(readFileSync(procSlack, 'utf8'));

// One process per file (vitest's forks pool): the slack is lowered once and stays, so the case
// that lowers it comes last.
describe.runIf(canCheck && readSlack() > TIMER_SLACK_NS)(
  'the timer slack of this process’s main thread under window rules (precision: timer, the real clock)',
  () => {
    it('valves whose window rules bind (alone, or beside a loose GCRA rule) leave it alone', async () => {
      const before = readSlack();
      const valves = [
        createValve({
          id: 'fixed',
          rules: { limit: 4, interval: 20, algorithm: 'fixed-window' },
          store: memoryStore(),
        }),
        createValve({
          id: 'sliding',
          rules: { limit: 4, interval: 20, algorithm: 'sliding-window' },
          store: memoryStore(),
        }),
        createValve({
          id: 'mixed',
          rules: [
            { limit: 1000, interval: 1000, burst: 10 },
            { limit: 4, interval: 20, algorithm: 'fixed-window' },
          ],
          store: memoryStore(),
        }),
      ];
      // 10 jobs each: two rate waits per valve.
      await Promise.all(valves.flatMap((v) => Array.from({ length: 10 }, () => v.run(() => {}))));
      expect(readSlack()).toBe(before);
      await Promise.all(valves.map((v) => v.close()));
    });

    it('a window of 1 ms lowers it to 1 µs', async () => {
      const valve = createValve({
        id: 'short-window',
        rules: { limit: 1, interval: 1, algorithm: 'fixed-window' },
        store: memoryStore(),
      });
      expect(readSlack()).toBe(TIMER_SLACK_NS);
      await valve.close();
    });
  },
);
