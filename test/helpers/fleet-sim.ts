/**
 * A fleet of callers sharing one rule through one store, on a virtual clock: each caller keeps
 * its queue full, asks the store as a valve does (the ticket of its last answer, `ask` jobs:
 * one more than last granted after a refusal, at least 2, doubling back up to 32 on a full
 * grant), and sleeps for the answer's retryAfter counted from the send (as the pace does for an
 * asynchronous store), at least 1 ms after a call that granted nothing, plus a random lateness
 * (its timer firing late, the network). The store sees the call half a round trip after the
 * send. Deterministic for a given `random`.
 */
import type { StoreRule } from '../../src/rules/rule.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';

export interface FleetSimOptions {
  /** The store, its clock (ms) and a way to move it forward to `ms`. */
  readonly store: Store;
  readonly now: () => number;
  readonly advanceTo: (ms: number) => void | Promise<void>;
  readonly id: string;
  readonly rules: readonly StoreRule[];
  readonly callers: number;
  /** Simulated time to run, ms. */
  readonly durationMs: number;
  /** Each wake-up's lateness in ms (a timer firing late), drawn per sleep. */
  readonly lateness: () => number;
  /** Round trip to the store, ms (the call reaches it half-way). */
  readonly rttMs: number;
  /** Take part in the line (send the ticket), as a valve does. */
  readonly turns: boolean;
}

export interface FleetSimResult {
  calls: number;
  emptyCalls: number;
  /** Store-clock time (ms) of every granted job, in order. */
  grants: number[];
}

interface Caller {
  wakeAt: number;
  ticket: number;
  ask: number;
  lastEmpty: number;
}

export async function simulateFleet(o: FleetSimOptions): Promise<FleetSimResult> {
  const start = o.now();
  const end = start + o.durationMs;
  const callers: Caller[] = Array.from({ length: o.callers }, (_, i) => ({
    wakeAt: start + i * 0.001,
    ticket: 0,
    ask: 32,
    lastEmpty: Number.NEGATIVE_INFINITY,
  }));
  const costs = Array.from({ length: 32 }, () => 1);
  const result: FleetSimResult = { calls: 0, emptyCalls: 0, grants: [] };
  for (;;) {
    let next = callers[0]!;
    for (const c of callers) if (c.wakeAt < next.wakeAt) next = c;
    const sentAt = next.wakeAt;
    const arrival = sentAt + o.rttMs / 2;
    if (arrival >= end) break;
    if (arrival > o.now()) await o.advanceTo(arrival);
    const r: AcquireResult = await o.store.acquire({
      id: o.id,
      rules: o.rules,
      costs,
      count: next.ask,
      ...(o.turns ? { turn: next.ticket } : {}),
    });
    result.calls++;
    if (r.granted === 0) result.emptyCalls++;
    for (let k = 0; k < r.granted; k++) result.grants.push(r.now);
    next.ticket = r.turn ?? 0;
    if (r.granted === next.ask) {
      next.ask = Math.min(32, next.ask * 2);
      next.wakeAt = sentAt + o.rttMs;
    } else {
      next.ask = Math.min(32, Math.max(2, r.granted + 1));
      let wake = sentAt + r.retryAfter;
      if (r.granted === 0) {
        // The pace: at most one empty call per ms, or two for a caller holding a turn.
        const turn = (r.turn ?? 0) > 0 && sentAt - next.lastEmpty >= 1;
        next.lastEmpty = sentAt;
        if (!turn) wake = Math.max(wake, sentAt + 1);
      }
      // The answer comes back after the round trip; the caller cannot ask before it has it.
      next.wakeAt = Math.max(wake, sentAt + o.rttMs) + o.lateness();
    }
  }
  return result;
}
