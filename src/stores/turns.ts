/*
 * The line of an id: turns for the callers a tight GCRA rule turned away (see
 * docs/architecture.md, "Turns"). Pure arithmetic on integer µs, used by the memory store; the
 * Redis script (lua/acquire.lua) mirrors it line by line.
 *
 * Without a line, every process sharing a tight rule is told the same retry hint and they all
 * ask again at once: one grant, the rest refused, over and over (store load that grows with the
 * fleet). With it, a refused caller gets a ticket, and the tickets' turns are spread one `step`
 * apart: each caller sleeps until its own turn, and a caller holding a later ticket is refused
 * without touching the rules until the tickets before it were used or skipped. The line only
 * ever refuses: every grant is still checked against every rule, at admission, on the store's
 * clock, so every bound holds whatever the line says (a caller without a ticket is not held
 * back by it at all).
 */

/** An unused turn is skipped this long (µs) after it came: its caller was late, gone or cancelled. */
export const TURN_GRACE_US = 2000;

/**
 * An id's line: the tickets `head`..`tail − 1` wait, the head's turn is at `at` (µs) and each
 * ticket's turn is `step` µs after the one before. Tickets are numbers seeded from the store's
 * clock in µs when a line starts, so a ticket of a line that ended is (in practice) never one of
 * the next line. A stored line is never empty (`head < tail`).
 */
export interface TurnLine {
  head: number;
  tail: number;
  at: number;
  step: number;
}

/** The last moment (µs) the line holds anything: its last ticket's turn plus the grace. */
export function lineEnd(line: TurnLine): number {
  return line.at + (line.tail - line.head - 1) * line.step + TURN_GRACE_US;
}

/** Skips the tickets whose turn ended more than the grace before `now` (their callers did not come). */
export function skipLate(line: TurnLine, now: number): void {
  const late = now - line.at - TURN_GRACE_US;
  if (late <= 0) return;
  // Ticket head + j is late when now > at + j × step + grace, i.e. j < late / step.
  let k = Math.floor((late - 1) / line.step) + 1;
  if (k > line.tail - line.head) k = line.tail - line.head;
  line.head += k;
  line.at += k * line.step;
}

/**
 * How long (µs) a caller holding `ticket`, behind the head, must wait: until its turn; when that
 * has come already (the head is late but within its grace), one step, and no later than just
 * after the head's grace ends (when the head is skipped).
 */
export function behindWait(line: TurnLine, ticket: number, now: number): number {
  const turn = line.at + (ticket - line.head) * line.step;
  if (turn > now) return turn - now;
  const deadline = line.at + TURN_GRACE_US + 1 - now;
  return line.step < deadline ? line.step : deadline;
}

/**
 * The spacing (µs) of turns under a GCRA rule of emission `x`, tolerance `cap` (burst × x), for
 * jobs of increment `inc`: one job's increment with burst 1; otherwise about half the burst, so
 * that each caller takes several jobs per call while the tolerance absorbs a late turn.
 */
export function turnStep(inc: number, cap: number): number {
  const room = Math.floor(cap / inc);
  const per = Math.floor(room / 2);
  return inc * (per > 1 ? per : 1);
}
