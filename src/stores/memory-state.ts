import type { SlidingState } from '../rules/sliding-window.js';
import { lineEnd, type TurnLine } from './turns.js';

/*
 * What the memory store holds per id, and the small operations on it that do not depend on the
 * store (leases, fences, expiry). See memory.ts.
 */

/** The log of every non-sliding rule state: never written. */
const NO_LOG: number[] = Object.freeze([]) as unknown as number[];

/**
 * State of one rule for one id. GCRA uses `tat`; a fixed window uses `window` and `count`; a
 * sliding window uses `log`, `head` and `sum` (see rules/sliding-window.ts).
 */
export class RuleState implements SlidingState {
  tat = 0;
  window = 0;
  count = 0;
  /** Sliding window: [t, c, ...] grants from `head` on, oldest first; NO_LOG for other algorithms. */
  log: number[];
  head = 0;
  sum = 0;
  /**
   * µs from which this state may be dropped: once it equals a fresh one (a GCRA state one
   * interval later, for rule changes: rules/gcra.ts, gcraExpiry()).
   */
  expiresUs = 0;
  constructor(sliding: boolean) {
    this.log = sliding ? [] : NO_LOG;
  }
}

/** Everything the store holds for one id. Dropped once it is all idle. */
export class IdState {
  /** End of the shared pause in µs, or 0 when there is none. */
  pauseUs = 0;
  readonly rules = new Map<string, RuleState>();
  /** Global-concurrency leases: token → expiry (µs). null when none are held. */
  leases: Map<string, number> | null = null;
  /** The last fencing number issued, or 0 once it is safe to forget (see `nextFence`). */
  fence = 0;
  /** The rule set recorded for the id (digests joined by ','), or null. */
  record: string | null = null;
  /** µs at which `record` is forgotten. */
  recordUs = 0;
  /**
   * The id's lines of turns (turns.ts), one per rule set (by the digest of its first rule: valves
   * of one id with other rules do not take turns with each other), never empty; null when no
   * caller waits for a turn.
   */
  lines: Map<string, TurnLine> | null = null;
  constructor(readonly id: string) {}
}

/** How many other ids each store call examines for idle state (the amortised sweep). */
export const SWEEP_PER_CALL = 2;

/** How often a store holding ids drops all their expired state in one pass (ms, on Node's timers). */
export const FULL_SWEEP_MS = 1000;

/**
 * Removes expired leases of `state` (and forgets the fence once that is safe). Returns how many are held.
 */
export function purgeLeases(state: IdState, now: number): number {
  const leases = state.leases;
  if (leases !== null) {
    for (const [token, exp] of leases) if (exp <= now) leases.delete(token);
    if (leases.size > 0) return leases.size;
    state.leases = null;
  }
  // The fence may be forgotten once the clock has passed it: the next one is at least `now`.
  if (state.fence !== 0 && now > state.fence) state.fence = 0;
  return 0;
}

/**
 * The next fencing number for the id: max(last + 1, now µs). Seeding from the clock keeps
 * the sequence strictly increasing even after the id's state was dropped while idle.
 */
export function nextFence(state: IdState, now: number): number {
  const fence = Math.max(state.fence + 1, now);
  state.fence = fence;
  return fence;
}

export function isIdle(state: IdState): boolean {
  return (
    state.pauseUs === 0 &&
    state.rules.size === 0 &&
    state.leases === null &&
    state.fence === 0 &&
    state.record === null &&
    state.lines === null
  );
}

/** Drops what has expired of `state` at `now`; returns whether nothing is left (the id may be forgotten). */
export function dropExpired(state: IdState, now: number): boolean {
  if (state.pauseUs !== 0 && state.pauseUs <= now) state.pauseUs = 0;
  for (const [digest, s] of state.rules) if (now >= s.expiresUs) state.rules.delete(digest);
  purgeLeases(state, now);
  if (state.record !== null && now >= state.recordUs) state.record = null;
  if (state.lines !== null) {
    for (const [digest, line] of state.lines) if (now > lineEnd(line)) state.lines.delete(digest);
    if (state.lines.size === 0) state.lines = null;
  }
  return isIdle(state);
}

/** Test hook (not exported from the package root): counts of what a memory store holds. */
export interface MemoryStoreContents {
  ids: number;
  rules: number;
  leases: number;
  pauses: number;
  subscribers: number;
}

/** Counts what `ids` holds. */
export function contentsOf(ids: ReadonlyMap<string, IdState>, subscribers: number): MemoryStoreContents {
  let rules = 0;
  let leases = 0;
  let pauses = 0;
  for (const s of ids.values()) {
    rules += s.rules.size;
    leases += s.leases?.size ?? 0;
    if (s.pauseUs !== 0) pauses++;
  }
  return { ids: ids.size, rules, leases, pauses, subscribers };
}

/** What else a store holds that the full sweep drops once expired (its fleet window records). */
export interface Sweepable {
  /** How many entries it holds: the full sweep runs while this or the store's ids are not 0. */
  readonly size: number;
  /** Drops every expired entry. */
  sweep(now: number): void;
}

/**
 * Drops the expired state of a store's ids (a few per call, and every id once a second) and, once
 * a second too, the expired entries of `others`.
 */
export class IdSweeper {
  /** Where the amortised sweep resumes; null to start over. */
  private cursor: Iterator<IdState> | null = null;
  /** The pending full sweep, or null while the store holds no id. */
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    /** The store's ids: swept in place. */
    private readonly ids: Map<string, IdState>,
    /** The store's clock in µs. */
    private readonly nowUs: () => number,
    /** What else the store holds (its fleet window records), swept with the ids. */
    private readonly others: Sweepable,
  ) {}

  /** Amortised cleanup: examines up to SWEEP_PER_CALL ids round-robin and drops their idle state. */
  step(now: number): void {
    for (let i = 0; i < SWEEP_PER_CALL; i++) {
      if (this.cursor === null) {
        if (this.ids.size === 0) return;
        this.cursor = this.ids.values();
      }
      const next = this.cursor.next();
      if (next.done) {
        this.cursor = null;
        continue;
      }
      const state = next.value;
      if (dropExpired(state, now)) this.ids.delete(state.id);
    }
  }

  /**
   * Once a second while the store holds any id (or any of `others`), one pass over every id
   * and every one of `others` drops what has expired, so ids nobody uses again leave nothing
   * behind even when no call comes to sweep them. The timer is unref'd (it never keeps the
   * process alive) and runs on Node's own timers.
   */
  schedule(): void {
    if (this.timer !== null || (this.ids.size === 0 && this.others.size === 0)) return;
    const timer = setTimeout(this.full, FULL_SWEEP_MS);
    timer.unref?.();
    this.timer = timer;
  }

  private readonly full = (): void => {
    this.timer = null;
    const now = this.nowUs();
    for (const state of this.ids.values()) if (dropExpired(state, now)) this.ids.delete(state.id);
    // The pass covered every id: the amortised sweep starts over (and its iterator no longer
    // holds the table the map had when it began, which the map may have outgrown since).
    this.cursor = null;
    this.others.sweep(now);
    this.schedule();
  };
}
