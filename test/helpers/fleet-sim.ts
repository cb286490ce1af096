/**
 * A fleet of callers sharing one rule through one store, on a virtual clock: each caller keeps
 * its queue full and asks the store as a valve does (src/admission.ts, src/pace.ts): the ticket
 * of its last answer, `ask` jobs (one more than last granted after a refusal, at least 2, or
 * with `turnAsk` all a turn may grant while it holds a ticket; doubling back up to 32 on a full
 * grant), sleeping for the answer's retryAfter counted from the send (as the pace does for an
 * asynchronous store), at least 1 ms after a call that granted nothing, plus a random lateness
 * (its timer firing late, the network). With `pipeline`, a caller whose last answer granted
 * everything sends a second call while the first travels, as a valve does over an asynchronous
 * store; `pipelineLined` says which calls in flight carry the ticket: 'one' (at most one at a
 * time, as valves do) or 'every' (both: two refusals take two tickets). The store sees a call
 * half a round trip after its send, and the caller its answer half a round trip later.
 * Deterministic for a given `lateness`.
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
  /** A second call while the first travels, after a full grant (default false). */
  readonly pipeline?: boolean;
  /** With `pipeline`: which calls in flight carry the ticket (default 'one'). */
  readonly pipelineLined?: 'one' | 'every';
  /** Holding a ticket, ask at the turn for all the turn may grant (default false). */
  readonly turnAsk?: boolean;
}

export interface FleetSimResult {
  calls: number;
  emptyCalls: number;
  /** Store-clock time (ms) of every granted job, in order. */
  grants: number[];
}

interface Caller {
  /** No call before this (ms). */
  wakeAt: number;
  ticket: number;
  ask: number;
  lastEmpty: number;
  /** Calls in flight, in send order. */
  flight: SimCall[];
  lastFull: boolean;
}

interface SimCall {
  readonly caller: Caller;
  readonly sentAt: number;
  readonly count: number;
  readonly lined: boolean;
  readonly ticket: number;
  /** The store's answer, once it has seen the call. */
  result: AcquireResult | undefined;
}

/** The most jobs the rules can grant at once `waitMs` after a refusal (src/pace.ts, turnJobs). */
function turnJobs(rules: readonly StoreRule[], waitMs: number): number {
  let jobs = Number.POSITIVE_INFINITY;
  for (const rule of rules) {
    jobs = Math.min(jobs, rule.burst, Math.floor((waitMs * 1000) / rule.emissionUs) + 1);
  }
  return jobs;
}

export async function simulateFleet(o: FleetSimOptions): Promise<FleetSimResult> {
  const start = o.now();
  const end = start + o.durationMs;
  const pipeline = o.pipeline ?? false;
  const every = o.pipelineLined === 'every';
  const callers: Caller[] = Array.from({ length: o.callers }, (_, i) => ({
    wakeAt: start + i * 0.001,
    ticket: 0,
    ask: 32,
    lastEmpty: Number.NEGATIVE_INFINITY,
    flight: [],
    lastFull: false,
  }));
  const costs = Array.from({ length: 32 }, () => 1);
  const result: FleetSimResult = { calls: 0, emptyCalls: 0, grants: [] };
  // Calls on their way to the store (by arrival) and answers on their way back (by arrival).
  const toStore: SimCall[] = [];
  const toCaller: SimCall[] = [];

  const send = (c: Caller, at: number): void => {
    const other = c.flight[0];
    const lined = o.turns && (other === undefined || every || !other.lined);
    const call: SimCall = { caller: c, sentAt: at, count: c.ask, lined, ticket: c.ticket, result: undefined };
    c.flight.push(call);
    toStore.push(call);
  };
  // A caller sends what it may at `at`: a call when none is in flight and its wait is over, and
  // (pipeline) a second one after a full grant.
  const pump = (c: Caller, at: number): void => {
    if (c.flight.length === 0 && at >= c.wakeAt) send(c, at);
    if (pipeline && c.flight.length === 1 && c.lastFull) send(c, at);
  };
  const answered = (call: SimCall, at: number): void => {
    const c = call.caller;
    const r = call.result!;
    c.flight.splice(c.flight.indexOf(call), 1);
    const heldBefore = c.ticket;
    const turnAt = c.wakeAt;
    if (call.lined) c.ticket = r.turn ?? 0;
    if (r.granted === call.count) {
      c.ask = Math.min(32, c.ask * 2);
      c.lastFull = true;
      c.wakeAt = at;
    } else {
      c.lastFull = false;
      const turn = o.turnAsk && (r.turn ?? 0) > 0 ? turnJobs(o.rules, r.retryAfter) : 0;
      c.ask = Math.min(32, Math.max(2, r.granted + 1, turn));
      let wake = call.sentAt + r.retryAfter;
      if (r.granted === 0) {
        // The pace: at most one empty call per ms, or two for a caller holding a turn.
        const turned = (r.turn ?? 0) > 0 && call.sentAt - c.lastEmpty >= 1;
        c.lastEmpty = call.sentAt;
        if (!turned) wake = Math.max(wake, call.sentAt + 1);
      }
      c.wakeAt = Math.max(wake, at) + o.lateness();
    }
    // An answer to a call that carried no ticket keeps the wait for the ticket held.
    if (!call.lined && heldBefore > 0 && c.ticket === heldBefore && turnAt > c.wakeAt) c.wakeAt = turnAt;
    if (c.flight.length === 0 || c.lastFull) pump(c, at);
  };

  for (;;) {
    // The next event: a call reaching the store, an answer reaching its caller, or a wake-up.
    let t = Number.POSITIVE_INFINITY;
    let kind = 0;
    let index = -1;
    if (toStore.length > 0 && toStore[0]!.sentAt + o.rttMs / 2 < t) {
      t = toStore[0]!.sentAt + o.rttMs / 2;
      kind = 1;
    }
    if (toCaller.length > 0 && toCaller[0]!.sentAt + o.rttMs < t) {
      t = toCaller[0]!.sentAt + o.rttMs;
      kind = 2;
    }
    for (let i = 0; i < callers.length; i++) {
      const c = callers[i]!;
      if (c.flight.length === 0 && c.wakeAt < t) {
        t = c.wakeAt;
        kind = 3;
        index = i;
      }
    }
    if (t >= end) break;
    if (kind === 1) {
      const call = toStore.shift()!;
      if (t > o.now()) await o.advanceTo(t);
      const r: AcquireResult = await o.store.acquire({
        id: o.id,
        rules: o.rules,
        costs,
        count: call.count,
        ...(call.lined ? { turn: call.ticket } : {}),
      });
      result.calls++;
      if (r.granted === 0) result.emptyCalls++;
      for (let k = 0; k < r.granted; k++) result.grants.push(r.now);
      call.result = r;
      toCaller.push(call);
    } else if (kind === 2) {
      answered(toCaller.shift()!, t);
    } else {
      pump(callers[index]!, t);
    }
  }
  return result;
}
