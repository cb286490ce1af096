/*
 * The line of an id: turns for the callers a tight GCRA rule turned away (see
 * docs/architecture.md, "Turns"). Pure arithmetic on integer µs, used by the memory store; the
 * Redis script (lua/acquire.lua) mirrors it line by line.
 *
 * Without a line, every process sharing a tight rule is told the same retry hint and they all
 * ask again at once: one grant, the rest refused, over and over (store load that grows with the
 * fleet). With it, a refused caller gets a ticket, and the tickets' turns are spread about one
 * `step` apart: each caller sleeps until its own turn, and a caller holding a later ticket is
 * refused without reading the rules until the tickets before it were used or skipped. The line
 * only ever refuses: every grant is still checked against every rule, at admission, on the
 * store's clock, so every bound holds whatever the line says (and a caller without a ticket is
 * not held back by it at all).
 */

/** An unused turn is skipped this long (µs) after it came: its caller was late, gone or cancelled. */
export const TURN_GRACE_US = 2000;

/**
 * An id's line: the tickets `head`..`tail − 1` wait, the head's turn is at `at` (µs), and the
 * ticket k places behind the head has its turn at `at + k × spacing(step)`. Tickets are numbers
 * seeded from the store's clock in µs when a line starts, so a ticket of a line that ended is
 * (in practice) never one of the next line's. A stored line is never empty (`head < tail`).
 */
export interface TurnLine {
  head: number;
  tail: number;
  at: number;
  step: number;
}

/** The most (µs) a turn is told later than one step after the one before: see spacing(). */
export const TURN_PAD_US = 100;

/**
 * How far apart the turns of the tickets behind the head are: one step, plus an eighth of it
 * but no more than 100 µs. Turns run late (a head whose timer fires late delays the slot after
 * it, and nothing catches up); told exactly one step apart, the callers behind would come
 * before their slot opened and ask twice. The pad is about a timer's and a network's jitter,
 * and a turn that really takes one step leaves that much unused (0.01 % of a 1 s step, 11 % of
 * a 0.5 ms one, where the jitter would cost it anyway).
 */
export function spacing(step: number): number {
  const pad = Math.floor(step / 8);
  return step + Math.min(pad, TURN_PAD_US);
}

/**
 * The farthest (µs) a line's last turn lies after its head's: 3 × 366 days (three of the
 * longest waits a rule gives, as the Redis script's `LINE_AHEAD`). A caller refused on rate
 * takes a ticket only while the line has room for it (hasRoom()); otherwise it holds none and
 * waits for the rules alone, as a caller outside the line does. Without a bound, each waiting
 * caller pushes the last turn one more step out, and a step can be half a year (a yearly rule
 * of burst 2): a few hundred callers (closed valves' tickets wait out their turn too) carried
 * the line past 2^53 µs, where the arithmetic is no longer exact. With it, every stored line
 * keeps `(tail − head − 1) × spacing(step) ≤ TURN_SPAN_US` (the Redis script refuses a line
 * key that does not), so its last turn lies at most this far after its head's.
 */
export const TURN_SPAN_US = 3 * 366 * 86_400_000_000;

/** Whether a caller may take the ticket `tail`: its turn at most TURN_SPAN_US after the head's. */
export function hasRoom(line: TurnLine): boolean {
  return (line.tail - line.head) * spacing(line.step) <= TURN_SPAN_US;
}

/** The last moment (µs) the line holds anything: its last ticket's turn plus the grace. */
export function lineEnd(line: TurnLine): number {
  return line.at + (line.tail - line.head - 1) * spacing(line.step) + TURN_GRACE_US;
}

/** Skips the tickets whose turn ended more than the grace before `now` (their callers did not come). */
export function skipLate(line: TurnLine, now: number): void {
  const late = now - line.at - TURN_GRACE_US;
  if (late <= 0) return;
  const gap = spacing(line.step);
  // Ticket head + j is late when now > at + j × gap + grace, i.e. j < late / gap.
  let k = Math.floor((late - 1) / gap) + 1;
  if (k > line.tail - line.head) k = line.tail - line.head;
  line.head += k;
  line.at += k * gap;
}

/** When (µs) the ticket `ticket` of the line has its turn. */
export function turnOf(line: TurnLine, ticket: number): number {
  return line.at + (ticket - line.head) * spacing(line.step);
}

/**
 * A caller holding `ticket` (one of the line's) comes at `now`: when it is behind the head but
 * its own turn has come, the tickets before it did not use theirs in time, and it goes first
 * (it becomes the head, at its turn; theirs are no longer tickets). Returns whether it is the
 * head now; if not, it must wait `turnOf(line, ticket) − now` µs.
 */
export function standing(line: TurnLine, ticket: number, now: number): boolean {
  if (ticket > line.head) {
    const turn = turnOf(line, ticket);
    if (turn > now) return false;
    line.at = turn;
    line.head = ticket;
  }
  return true;
}

/**
 * The head's turn was used at `now`, and the next job could fit `open` µs later: the next
 * ticket becomes the head, its turn one step after this one's, or when the slot opens if later.
 */
export function advance(line: TurnLine, now: number, open: number): void {
  let at = line.at + line.step;
  if (now + open > at) at = now + open;
  line.head += 1;
  line.at = at;
}

/**
 * The longest step (µs) of turns, unless one job's increment is longer: 50 ms. The callers
 * behind a turn wait a step for theirs whatever the turn used, so a caller with a few jobs
 * queued waits out the steps ahead of it while the bucket refills. Under a slow rule with a
 * large burst (2 a second with a burst of 40: three quarters of the burst is 15 s), uncapped
 * steps kept queued jobs waiting many seconds with room in the bucket. Capped, a caller waits at
 * most 50 ms per ticket ahead of it (or one job's increment, when that is longer: the turn then
 * always finds a job's room), and a line makes at most 20 store calls a second at that step.
 */
export const TURN_STEP_MAX_US = 50_000;

/**
 * The step of turns under a GCRA rule of tolerance `cap` (burst × emission) for jobs of
 * increment `inc`: `floor(3 × room / 4)` jobs' increments, `room = floor(cap / inc)` (the
 * burst in jobs), but no more jobs than fit in TURN_STEP_MAX_US, and at least one. Each caller
 * takes up to three quarters of the burst per call (one store call per that many jobs), and the
 * quarter left (at least one job) is what a turn taken late can use up before the rule loses any
 * of its rate: a caller late by up to `(room − per) × inc` µs still finds its jobs waiting in
 * the bucket.
 */
export function turnStep(inc: number, cap: number): number {
  const room = Math.floor(cap / inc);
  const per = Math.min(Math.floor((3 * room) / 4), Math.floor(TURN_STEP_MAX_US / inc));
  return inc * Math.max(per, 1);
}
