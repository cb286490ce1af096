import { type Clock, systemClock } from '../clock.js';
import { describe } from '../duration.js';
import {
  checkChange,
  checkId,
  checkKnownKeys,
  checkLease,
  checkMs,
  checkRequest,
  checkTokens,
  checkTurn,
  recordTtlUs,
} from './checks.js';
import { RuleBatch } from './memory-batch.js';
import {
  contentsOf,
  IdState,
  IdSweeper,
  isIdle,
  type MemoryStoreContents,
  nextFence,
  purgeLeases,
} from './memory-state.js';
import { MemoryWakeups } from './memory-wakeups.js';
import type {
  AcquireRequest,
  AcquireResult,
  BlockReason,
  Lease,
  Store,
  WakeEvent,
  WindowTicket,
} from './store.js';
import { advance, hasRoom, lineEnd, skipLate, standing, type TurnLine, turnOf } from './turns.js';
import { WindowRecords } from './window-record.js';

/** Options of {@link memoryStore}. */
export interface MemoryStoreOptions {
  /** The store's own clock (default: the system clock). Time is read as integer µs. */
  clock?: Clock;
}

let storeCounter = 0;

/** Test hook (not exported from the package root): counts of what a memory store holds. */
export const inspectMemoryStore: unique symbol = Symbol('valve.inspectMemoryStore');

/** What {@link inspectMemoryStore} reports. */
export type { MemoryStoreContents } from './memory-state.js';

class MemoryStore implements Store {
  readonly notifies = true;
  private readonly clock: Clock;
  private readonly ids = new Map<string, IdState>();
  /** Subscribers per id and their wake-ups. */
  private readonly wakeups = new MemoryWakeups();
  private readonly tokenPrefix: string;
  private lastNowUs = 0;
  /** Tokens are unique across every id of the store (a token of one id can never match another's). */
  private tokenSeq = 0;
  /** The provider windows wrapFetch learnt, per id (window-record.ts). */
  private readonly windows = new WindowRecords();
  /** Drops expired state of ids nobody touches (amortised per call, and once a second), window records too. */
  private readonly sweeper = new IdSweeper(this.ids, () => this.nowUs(), this.windows);
  /** The current call's rules and their states (memory-batch.ts), reused from call to call. */
  private readonly batch = new RuleBatch();

  constructor(clock: Clock) {
    this.clock = clock;
    storeCounter += 1;
    this.tokenPrefix = `m${storeCounter.toString(36)}${Math.random().toString(36).slice(2, 8)}:`;
  }

  /** The store's clock in integer µs; never goes backwards even if the Clock does. */
  private nowUs(): number {
    const us = Math.round(this.clock.now() * 1000);
    if (us > this.lastNowUs) this.lastNowUs = us;
    return this.lastNowUs;
  }

  acquire(request: AcquireRequest): AcquireResult {
    const batch = this.batch;
    const rs = batch.rules;
    const m = checkRequest(request, rs);
    // The previous rules of a rule change (spent too) follow the request's own.
    const n = checkChange(request, rs, m);
    const { id, costs, count, lease, previous, record, recordTtl } = request;
    const convert = request.convert === true && previous !== undefined;
    let ttlUs: number;
    let ticket: number | undefined;
    try {
      ttlUs = checkLease(lease);
      ticket = checkTurn(request.turn);
    } catch (err) {
      batch.clear(n);
      throw err;
    }
    const leaseLimit = lease === undefined ? Number.POSITIVE_INFINITY : lease.limit;

    const now = this.nowUs();
    this.sweep(now);
    let state = this.ids.get(id);

    // 1. The shared pause.
    if (state !== undefined && state.pauseUs !== 0) {
      if (state.pauseUs > now) {
        // A rule change converts even so (it only writes state and grants nothing): the valve
        // asks for it once, and its transition starts with this answer.
        if (convert) {
          batch.read(n, state, now);
          batch.convert(m, n, previous, request.previousSince, now);
          batch.write(n, state, now);
        }
        batch.clear(n);
        const paused: AcquireResult = {
          granted: 0,
          retryAfter: (state.pauseUs - now) / 1000,
          blocked: 'pause',
          pausedUntil: state.pauseUs / 1000,
          now: now / 1000,
        };
        if (lease !== undefined) paused.leases = [];
        if (ticket !== undefined) paused.turn = 0;
        return paused;
      }
      state.pauseUs = 0;
    }

    // 2. Leases: purge expired, count free slots.
    let free = Number.POSITIVE_INFINITY;
    if (lease !== undefined) {
      const held = state === undefined ? 0 : purgeLeases(state, now);
      free = leaseLimit - held;
    }

    // 3. Rule states as of `now` (expired or missing = fresh).
    batch.read(n, state, now);

    // 3b. A rule change: the new rules' states count what the previous ones prove was spent.
    if (convert) batch.convert(m, n, previous, request.previousSince, now);

    // 3c. The rule set recorded for the id.
    let recorded: string[] | undefined;
    if (record !== undefined) {
      state ??= this.create(id);
      if (state.record !== null && now < state.recordUs) {
        if (state.record !== record) {
          recorded = state.record === '' ? [] : state.record.split(',');
          state.record = record;
          state.recordUs = now + Math.ceil(recordTtlUs(rs, m, recordTtl) / 1000) * 1000;
        }
      } else {
        state.record = record;
        state.recordUs = now + Math.ceil(recordTtlUs(rs, m, recordTtl) / 1000) * 1000;
      }
    }

    // 3d. The line (turns.ts): for callers taking part, under GCRA rules only, without leases.
    // A caller holding a ticket behind the head is refused without reading the rules.
    const lined = ticket !== undefined && lease === undefined && n > 0 && batch.allGcra(n);
    let line: TurnLine | null = null;
    let head = false;
    let behind = false;
    const lineKey = lined ? rs[0]!.digest : '';
    const stored =
      lined && state !== undefined && state.lines !== null ? state.lines.get(lineKey) : undefined;
    if (stored !== undefined) {
      line = stored;
      if (now > lineEnd(line)) line = null;
      else skipLate(line, now);
      if (line !== null && line.head >= line.tail) line = null;
      if (line !== null && ticket! >= line.head && ticket! < line.tail) {
        head = standing(line, ticket!, now);
        behind = !head;
      }
    }

    // 4. Jobs in order, each against every rule as updated by the grants before it.
    let granted = 0;
    let waitUs = 0;
    let blocked: BlockReason | null = null;
    if (behind) {
      blocked = 'rate';
      waitUs = turnOf(line!, ticket!) - now;
    }
    for (let j = 0; j < (behind ? 0 : count); j++) {
      if (granted >= free) {
        blocked = 'concurrency';
        break;
      }
      const worst = batch.wait(n, costs[j] as number, now);
      if (worst > 0) {
        blocked = 'rate';
        waitUs = worst;
        break;
      }
      batch.take(n);
      granted++;
    }

    // 5. Spend: write the updated rule states and issue leases.
    const leases: Lease[] | undefined = lease === undefined ? undefined : new Array<Lease>(granted);
    if (granted > 0 || convert) {
      state ??= this.create(id);
      batch.write(n, state, now);
      if (leases !== undefined) {
        const expiresUs = now + ttlUs;
        if (state.leases === null) state.leases = new Map();
        for (let j = 0; j < granted; j++) {
          const fence = nextFence(state, now);
          this.tokenSeq += 1;
          const token = this.tokenPrefix + this.tokenSeq.toString(36);
          state.leases.set(token, expiresUs);
          leases[j] = { token, fence, expiresAt: expiresUs / 1000 };
        }
      }
    }
    // 5b. The line: the head's turn is used once it is granted; a caller refused on rate takes
    // a ticket at the tail while the line has room (or keeps the head, when it came before its
    // slot opened).
    let held = 0;
    if (lined && !behind) {
      if (head && granted > 0) {
        const open = blocked === 'rate' ? waitUs : batch.openAfter(n, costs[count - 1] as number, now);
        advance(line!, now, open);
        if (line!.head >= line!.tail) line = null;
      } else if (head) {
        line!.at = Math.max(line!.at, now + waitUs);
        held = ticket!;
      }
      if (blocked === 'rate' && held === 0) {
        if (line === null) {
          line = {
            head: now,
            tail: now,
            at: now + waitUs,
            step: batch.stepFor(n, costs[granted] as number, now),
          };
        }
        if (hasRoom(line)) {
          held = line.tail;
          line.tail += 1;
          const turn = turnOf(line, held);
          if (turn - now > waitUs) waitUs = turn - now;
        }
      }
    }
    if (behind) held = ticket!;
    if (lined && line !== null) state ??= this.create(id);
    if (lined && state !== undefined) {
      if (line !== null) {
        if (state.lines === null) state.lines = new Map();
        state.lines.set(lineKey, line);
      } else if (state.lines !== null) {
        state.lines.delete(lineKey);
        if (state.lines.size === 0) state.lines = null;
      }
    }

    if (blocked === 'concurrency') {
      // A hint: the earliest expiry. A release (with a wake-up) usually comes sooner.
      let earliest = Number.POSITIVE_INFINITY;
      if (state?.leases) for (const exp of state.leases.values()) if (exp < earliest) earliest = exp;
      waitUs = earliest === Number.POSITIVE_INFINITY ? 0 : earliest - now;
    }
    batch.clear(n);
    if (state !== undefined && state.record !== null) {
      // The record compares rule sets of valves using the id at the same time: in one process it
      // lives no longer than the id's rule state, so an id nobody uses leaves nothing behind.
      let until = now + 1;
      for (const s of state.rules.values()) if (s.expiresUs > until) until = s.expiresUs;
      if (state.recordUs > until) state.recordUs = until;
    }
    if (state !== undefined && isIdle(state)) this.ids.delete(id);

    const result: AcquireResult = {
      granted,
      retryAfter: waitUs / 1000,
      blocked,
      pausedUntil: null,
      now: now / 1000,
    };
    if (leases !== undefined) result.leases = leases;
    if (recorded !== undefined) result.recorded = recorded;
    if (ticket !== undefined) result.turn = held;
    return result;
  }

  /** A new, empty state for `id`, held by the store. */
  private create(id: string): IdState {
    const state = new IdState(id);
    this.ids.set(id, state);
    this.scheduleFullSweep();
    return state;
  }

  windowSend(id: string, probeTtl: number): WindowTicket {
    checkId(id);
    const ticket = this.windows.send(id, this.nowUs(), checkMs(probeTtl, 'probeTtl', true));
    this.scheduleFullSweep();
    return ticket;
  }

  windowReport(id: string, seq: number, remaining: number, resetMs: number): number {
    checkId(id);
    const wait = this.windows.report(id, this.nowUs(), seq, remaining, checkMs(resetMs, 'resetMs', true));
    this.scheduleFullSweep();
    return wait;
  }

  pause(id: string, ms: number): number {
    checkId(id);
    const pauseUs = checkMs(ms, 'ms', true);
    const now = this.nowUs();
    this.sweep(now);
    let state = this.ids.get(id);
    if (state === undefined) {
      state = new IdState(id);
      this.ids.set(id, state);
      this.scheduleFullSweep();
    }
    const until = now + pauseUs;
    if (until > state.pauseUs) state.pauseUs = until;
    const end = state.pauseUs / 1000;
    if (state.pauseUs <= now) {
      // A zero-length pause records nothing.
      state.pauseUs = 0;
      if (isIdle(state)) this.ids.delete(id);
      return now / 1000;
    }
    this.notify(id, { type: 'pause', until: end });
    return end;
  }

  resume(id: string): void {
    checkId(id);
    const now = this.nowUs();
    this.sweep(now);
    const state = this.ids.get(id);
    if (state !== undefined) {
      state.pauseUs = 0;
      if (isIdle(state)) this.ids.delete(id);
    }
    this.notify(id, { type: 'resume' });
  }

  renew(id: string, tokens: readonly string[], ttl: number): boolean[] {
    checkId(id);
    checkTokens(tokens);
    const ttlUs = checkMs(ttl, 'ttl', false);
    const now = this.nowUs();
    this.sweep(now);
    const out = new Array<boolean>(tokens.length).fill(false);
    const state = this.ids.get(id);
    if (state === undefined || state.leases === null) return out;
    purgeLeases(state, now);
    const expiresUs = now + ttlUs;
    const leases = state.leases;
    if (leases !== null) {
      for (let i = 0; i < tokens.length; i++) {
        const token = tokens[i]!;
        if (leases.has(token)) {
          leases.set(token, expiresUs);
          out[i] = true;
        }
      }
    }
    if (isIdle(state)) this.ids.delete(id);
    return out;
  }

  release(id: string, tokens: readonly string[]): void {
    checkId(id);
    checkTokens(tokens);
    const now = this.nowUs();
    this.sweep(now);
    const state = this.ids.get(id);
    let removed = false;
    if (state?.leases) {
      for (let i = 0; i < tokens.length; i++) if (state.leases.delete(tokens[i]!)) removed = true;
      purgeLeases(state, now);
      if (isIdle(state)) this.ids.delete(id);
    }
    if (removed) this.notify(id, { type: 'release' });
  }

  /** Wake-ups of an id are delivered (in this process) as soon as it has a subscriber. */
  listening(id: string): boolean {
    return this.wakeups.listening(id);
  }

  subscribe(id: string, onWake: (event: WakeEvent) => void): () => void {
    checkId(id);
    if (typeof onWake !== 'function') {
      throw new TypeError(`Expected \`onWake\` to be a function, got ${describe(onWake)}`);
    }
    return this.wakeups.subscribe(id, onWake);
  }

  private notify(id: string, event: WakeEvent): void {
    this.wakeups.notify(id, event);
  }

  private sweep(now: number): void {
    this.sweeper.step(now);
  }

  private scheduleFullSweep(): void {
    this.sweeper.schedule();
  }

  /** Test hook: what the store currently holds. */
  [inspectMemoryStore](): MemoryStoreContents {
    return contentsOf(this.ids, this.wakeups.count);
  }
}

/**
 * A store in this process's memory. Valves share a budget when they use the same
 * instance, the same id and the same rules. Answers synchronously, on its own clock
 * (integer µs, rounded to the nearest µs, never going backwards).
 *
 * Memory is bounded by live state, not by the number of jobs: expired rule state,
 * ended pauses and empty lease sets are dropped when their id is next touched, every call
 * also examines two other ids round-robin (a fleet window call: two other window records), and
 * once a second while it holds any id or window record a sweep drops every expired state and
 * record (an unref'd timer: nothing to close, never keeps the process alive), in turns of at
 * most 1,024 entries 1 ms apart (memory-state.ts, IdSweeper), so that it holds the event loop no
 * longer with more ids. A GCRA rule's state is kept one interval past the moment it is fresh
 * again (for rule changes).
 */
export function memoryStore(options?: MemoryStoreOptions): Store {
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw new TypeError(`Expected \`options\` to be an object, got ${describe(options)}`);
  }
  if (options !== undefined) checkKnownKeys(options, ['clock'], 'memoryStore()');
  const clock = options?.clock === undefined ? systemClock : options.clock;
  if (typeof clock !== 'object' || clock === null || typeof clock.now !== 'function') {
    throw new TypeError(`Expected \`options.clock\` to be a Clock with now(), got ${describe(clock)}`);
  }
  return new MemoryStore(clock);
}
