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
import { hasRoom, spacing, TURN_SPAN_US, TURN_STEP_MAX_US, turnStep } from '../../src/stores/turns.js';
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
    for (const inc of [100, 1000, 20_000]) {
      for (let room = 2; room <= 400; room++) {
        const step = turnStep(inc, room * inc) / inc;
        expect(room - step, `burst ${room}`).toBeGreaterThanOrEqual(Math.max(1, Math.floor(room / 4)));
        // Three quarters of the burst, unless that is more than fits in 50 ms.
        const most = Math.max(1, Math.floor(TURN_STEP_MAX_US / inc));
        expect(step, `burst ${room}`).toBe(Math.max(1, Math.min(Math.floor((3 * room) / 4), most)));
      }
    }
  });

  it('is at most 50 ms of jobs, or one job when a job takes longer: a slow rule with a large burst', () => {
    // 2,000/s with a burst of 200: 150 jobs would be 75 ms; 100 jobs (50 ms).
    expect(turnStep(500, 200 * 500)).toBe(100 * 500);
    // 100/s with a burst of 20: 15 jobs would be 150 ms; 5 jobs.
    expect(turnStep(10_000, 20 * 10_000)).toBe(5 * 10_000);
    // Shopify's 2 a second with a burst of 40: 30 jobs would be 15 s; one job (500 ms).
    expect(turnStep(500_000, 40 * 500_000)).toBe(500_000);
    // GitHub's 4,901 an hour with a burst of 100: one job (734.6 ms), not 55 s.
    const github = Math.ceil(3_600_000_000 / 4901);
    expect(turnStep(github, 100 * github)).toBe(github);
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

describe("the line's span (TURN_SPAN_US: a ticket's turn at most 3 × 366 days after the head's)", () => {
  it('hasRoom() lets a ticket in while its turn is within the span', () => {
    const step = 10_000_000_000_000; // 1e13 µs: a gap of 1e13 + 100
    const line = { head: 1, tail: 10, at: 5, step };
    // The next ticket 9 gaps after the head's turn: 9.00000000009e13 ≤ 9.48672e13.
    expect(9 * spacing(step)).toBeLessThanOrEqual(TURN_SPAN_US);
    expect(hasRoom(line)).toBe(true);
    line.tail = 11;
    expect(hasRoom(line)).toBe(false);
    // Any step of a short rule: room for billions of tickets.
    expect(hasRoom({ head: 1, tail: 1_000_000_000, at: 5, step: 1000 })).toBe(true);
  });

  it('300 callers on a yearly rule: the line holds what fits in the span, every value exact', () => {
    // Each ticket of a yearly rule (limit 1) waits a year more than the one before: without a
    // span, the 230th caller's turn was past 2^53 µs (the arithmetic no longer exact), and the
    // Redis script (which refuses a line longer than the span) failed every call on the id.
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const rules = [normalizeRule({ limit: 1, interval: '365d' }, 'rule')];
    const ask = (turn: number) =>
      store.acquire({ id: 'y', rules, costs: [1], count: 1, turn }) as AcquireResult;
    expect(ask(0).granted).toBe(1);
    const held: number[] = [];
    let firstWait = 0;
    for (let i = 0; i < 300; i++) {
      const r = ask(0);
      expect(r.granted).toBe(0);
      expect(Number.isSafeInteger(Math.round(r.retryAfter * 1000))).toBe(true);
      if (r.turn! > 0) {
        held.push(r.turn!);
        if (held.length === 1) firstWait = r.retryAfter;
        expect(r.retryAfter * 1000 - firstWait * 1000).toBeLessThanOrEqual(TURN_SPAN_US);
      } else {
        // Past the span: no ticket, the rule's own wait.
        expect(r.retryAfter).toBeLessThanOrEqual(firstWait);
      }
      clock.advance(1);
    }
    // A gap of 365 days and 100 µs: the head's turn and 3 more within 3 × 366 days.
    expect(held).toHaveLength(4);
    // The tickets wait their turns: the second's comes a gap after the first's.
    clock.advance(firstWait);
    const first = ask(held[0]!);
    expect(first.granted).toBe(1);
    expect(ask(held[1]!).turn).toBe(held[1]);
  });
});
