/**
 * The width of a turn (src/stores/turns.ts, turnStep; the same formula in
 * lib/acquire-one.lua, compared by test/property/redis-differential.test.ts): three quarters of
 * the burst per turn, and the quarter left is what a turn taken late can use up before the rule
 * loses any of its rate (docs/how-it-works.md, "Sharing a tight limit across a fleet").
 */
import { describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult } from '../../src/stores/store.js';
import { turnStep } from '../../src/stores/turns.js';
import { FakeClock } from '../helpers/fake-clock.js';

describe('turnStep', () => {
  it('is three quarters of the burst in whole jobs, at least one', () => {
    const inc = 500; // 2,000/s
    expect(turnStep(inc, 20 * inc)).toBe(15 * inc);
    expect(turnStep(inc, 5 * inc)).toBe(3 * inc);
    expect(turnStep(inc, 4 * inc)).toBe(3 * inc);
    expect(turnStep(inc, 2 * inc)).toBe(inc);
    expect(turnStep(inc, inc)).toBe(inc);
    // A job costing more than one increment: in whole jobs of that cost.
    expect(turnStep(3 * inc, 20 * inc)).toBe(4 * 3 * inc);
  });

  it('leaves at least a quarter of the burst, and one job, for a late turn (every burst from 2 to 400)', () => {
    for (let room = 2; room <= 400; room++) {
      const step = turnStep(1000, room * 1000) / 1000;
      expect(room - step, `burst ${room}`).toBeGreaterThanOrEqual(Math.max(1, Math.floor(room / 4)));
      expect(step, `burst ${room}`).toBeGreaterThanOrEqual(Math.floor((3 * room) / 4));
    }
  });
});

describe('a turn taken late', () => {
  /** Two callers of 2,000/s with burst 20 through a memory store: the first takes the burst, the second a ticket. */
  function line() {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const rules = [normalizeRule({ limit: 2000, interval: 1000, burst: 20 }, 'rule')];
    const ask = (count: number, turn: number) =>
      store.acquire({
        id: 'late',
        rules,
        costs: Array.from({ length: count }, () => 1),
        count,
        turn,
      }) as AcquireResult;
    expect(ask(20, 0).granted).toBe(20);
    const refused = ask(20, 0);
    expect(refused.granted).toBe(0);
    expect(refused.turn).toBeGreaterThan(0);
    return { clock, ask, ticket: refused.turn!, wait: refused.retryAfter };
  }

  it('by up to the quarter of the burst left loses nothing: the bucket holds its jobs', () => {
    const { clock, ask, ticket, wait } = line();
    // Its turn, then the next one a step (15 jobs, 7.5 ms) later; it comes 2.4 ms late to that.
    clock.advance(wait);
    const first = ask(20, ticket);
    expect(first.granted).toBe(1);
    clock.advance(7.5 + 2.4);
    const late = ask(20, first.turn!);
    // 15 jobs of the step plus the 4 (2.4 ms at 0.5 ms a job) refilled meanwhile: none lost.
    expect(late.granted).toBe(19);
  });

  it('by more than that loses what the burst cannot hold', () => {
    const { clock, ask, ticket, wait } = line();
    clock.advance(wait);
    const first = ask(20, ticket);
    expect(first.granted).toBe(1);
    // 3.5 ms late: 15 + 7 jobs refilled, but the bucket holds 20: 2 are lost (nothing catches up).
    clock.advance(7.5 + 3.5);
    expect(ask(30, first.turn!).granted).toBe(20);
  });
});
