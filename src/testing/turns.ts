/**
 * Conformance cases for a store that keeps a line of turns (`AcquireRequest.turn`, see
 * docs/architecture.md, "Turns"): registered with `turns: true` and a controlled clock. A rule of
 * 1000/s with burst 1 (one slot per ms) makes every time below exact: turns are one step (1 ms)
 * apart for the head and one step and 0.1 ms (1.1 ms) for each ticket behind it, a ticket
 * whose turn has come goes before the tickets ahead of it that did not use theirs, and an unused
 * turn is skipped 2 ms after it came.
 */
import type { AcquireResult } from '../stores/store.js';
import { expect, fail } from './expect.js';
import { type CaseRegistry, type ClockCaseContext, expectMs, ones, outcomeOf, rule } from './suite.js';

export function turnCases(c: CaseRegistry): void {
  // No empty describe block when the cases are not registered.
  if (!c.turns) return;
  const { newId } = c;
  const tight = rule({ limit: 1000, interval: '1s' });

  /** Two callers refused in turn: A holds the head (its slot opens in 1 ms), B the ticket behind. */
  async function twoInLine(s: ClockCaseContext, id: string): Promise<{ a: AcquireResult; b: AcquireResult }> {
    const a = await s.acquire({ id, rules: [tight], costs: ones(2), turn: 0 });
    const b = await s.acquire({ id, rules: [tight], costs: [1], turn: 0 });
    return { a, b };
  }

  c.describe('the line of turns', () => {
    c.itTurns(
      'a caller refused on rate takes a ticket; the next one takes the next, a turn later',
      async (s) => {
        const id = newId();
        const { a, b } = await twoInLine(s, id);
        expect(a).toMatchObject({ granted: 1, blocked: 'rate' });
        expect(typeof a.turn === 'number' && a.turn > 0, `a ticket, got ${a.turn}`).toBe(true);
        // The head waits exactly for its slot.
        expectMs(a.retryAfter, 1);
        expect(b).toMatchObject({ granted: 0, blocked: 'rate', turn: a.turn! + 1 });
        // The ticket behind: the head's turn plus one step and the 0.1 ms pad.
        expectMs(b.retryAfter, 2.1);
        // Without `turn`, no ticket is answered and the hint is the rules' own.
        const plain = await s.acquire({ id, rules: [tight], costs: [1] });
        expect(plain.turn).toBeUndefined();
        expectMs(plain.retryAfter, 1);
      },
    );

    c.itTurns(
      'a ticket behind the head is refused while the turn is the head’s; then served at its turn',
      async (s) => {
        const id = newId();
        const { a, b } = await twoInLine(s, id);
        await s.advance(1);
        // The slot is open, but it is the head's: B is refused without spending, told its turn.
        const early = await s.acquire({ id, rules: [tight], costs: [1], turn: b.turn });
        expect(early).toMatchObject({ granted: 0, blocked: 'rate', turn: b.turn });
        expectMs(early.retryAfter, 1.1);
        // The head is granted at its turn, and (wanting more) takes the ticket behind B.
        const head = await s.acquire({ id, rules: [tight], costs: ones(2), turn: a.turn });
        expect(head).toMatchObject({ granted: 1, blocked: 'rate', turn: b.turn! + 1 });
        expectMs(head.retryAfter, 2.1);
        await s.advance(1.1);
        const served = await s.acquire({ id, rules: [tight], costs: [1], turn: b.turn });
        expect(served).toMatchObject({ granted: 1, blocked: null, turn: 0 });
        // Every grant is still the rules': a caller without a ticket finds the slot taken.
        expect((await s.acquire({ id, rules: [tight], costs: [1] })).granted).toBe(0);
      },
    );

    c.itTurns(
      'a ticket whose turn has come goes before the tickets ahead that did not use theirs',
      async (s) => {
        const id = newId();
        const { a, b } = await twoInLine(s, id);
        await s.advance(2.099);
        // 1 µs before its turn, B is behind the head (which has not come).
        const early = await s.acquire({ id, rules: [tight], costs: [1], turn: b.turn });
        expect(early).toMatchObject({ granted: 0, blocked: 'rate', turn: b.turn });
        expectMs(early.retryAfter, 0.001);
        await s.advance(0.001);
        expect(await s.acquire({ id, rules: [tight], costs: [1], turn: b.turn })).toMatchObject({
          granted: 1,
          turn: 0,
        });
        // A's ticket is no longer one: the rules refuse it (B took the slot), and it takes a new one.
        const late = await s.acquire({ id, rules: [tight], costs: [1], turn: a.turn });
        expect(late.granted).toBe(0);
        expect(typeof late.turn === 'number' && late.turn > b.turn!, `a new ticket, got ${late.turn}`).toBe(
          true,
        );
        expectMs(late.retryAfter, 1);
      },
    );

    c.itTurns('an unused turn is skipped 2 ms after it came', async (s) => {
      for (const [after, skipped] of [
        [3, false],
        [3.001, true],
      ] as const) {
        const id = newId();
        // A holds the head (its turn at 1 ms) and never comes back.
        const a = await s.acquire({ id, rules: [tight], costs: ones(2), turn: 0 });
        await s.advance(after);
        const c2 = await s.acquire({ id, rules: [tight], costs: ones(2), turn: 0 });
        expect(c2).toMatchObject({ granted: 1, blocked: 'rate' });
        expectMs(c2.retryAfter, 1);
        // Within the grace, the new ticket is behind A's; after it, A's was skipped and a new line began.
        if (skipped)
          expect(c2.turn === a.turn! + 1, `a new line, got ${c2.turn} after ${a.turn}`).toBe(false);
        else expect(c2.turn).toBe(a.turn! + 1);
      }
    });

    c.itTurns(
      'a caller without a ticket is not held back by the line; the head then waits for the next slot',
      async (s) => {
        const id = newId();
        const { a } = await twoInLine(s, id);
        await s.advance(1);
        expect((await s.acquire({ id, rules: [tight], costs: [1], turn: 0 })).granted).toBe(1);
        // The head keeps its ticket, told the exact wait for the next slot.
        const head = await s.acquire({ id, rules: [tight], costs: [1], turn: a.turn });
        expect(head).toMatchObject({ granted: 0, blocked: 'rate', turn: a.turn });
        expectMs(head.retryAfter, 1);
      },
    );

    c.itTurns('no line with leases or a window rule: the answer carries no ticket', async (s) => {
      const id = newId();
      const window = rule({ limit: 1, interval: '1h', algorithm: 'fixed-window' });
      await s.acquire({ id, rules: [window], costs: [1], turn: 0 });
      expect(await s.acquire({ id, rules: [window], costs: [1], turn: 0 })).toMatchObject({
        granted: 0,
        blocked: 'rate',
        turn: 0,
      });
      const id2 = newId();
      const lease = { limit: 5, ttl: 60_000 };
      await s.acquire({ id: id2, rules: [tight], costs: [1], lease, turn: 0 });
      expect(await s.acquire({ id: id2, rules: [tight], costs: [1], lease, turn: 0 })).toMatchObject({
        granted: 0,
        blocked: 'rate',
        turn: 0,
      });
    });

    c.itTurns('rejects a turn that is not a ticket with a TypeError', async (s) => {
      for (const bad of [-1, 1.5, Number.NaN, '3']) {
        // The answer itself, unchecked: a store that answers is reported with what it granted.
        const { thrown, what } = await outcomeOf(
          async () =>
            await s.store.acquire({ id: newId(), rules: [tight], costs: [1], count: 1, turn: bad as number }),
        );
        if (!(thrown instanceof TypeError)) {
          fail(
            `a turn of ${typeof bad === 'string' ? JSON.stringify(bad) : String(bad)} must be refused with a TypeError, but acquire() ${what}`,
          );
        }
      }
    });
  });
}
