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

/**
 * How often the sweep of a store holding ids (or window records) starts a pass over all of them
 * (ms, on Node's timers); a pass that takes longer is followed by the next at once.
 */
export const FULL_SWEEP_MS = 1000;

/**
 * The most entries (ids, then window records) one turn of the sweep examines, whatever the number
 * of ids: with a million ids, a turn took 0.04 ms when nothing had expired and 1.4–1.8 ms when
 * every id had (bench/experiments/memory-sweep.ts).
 */
export const SWEEP_PER_TURN = 1024;

/** The pause between two turns of one pass (ms): a pass over a million ids takes about a second. */
export const SWEEP_TURN_MS = 1;

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

/** What else a store holds that the sweep drops once expired (its fleet window records). */
export interface Sweepable {
  /** How many entries it holds: the sweep runs while this or the store's ids are not 0. */
  readonly size: number;
  /**
   * Examines up to `max` entries from where the last call stopped (0 allowed) and drops the
   * expired ones; returns true once every entry it held when its pass began was examined (the
   * next call starts a new pass).
   */
  sweep(now: number, max: number): boolean;
}

/**
 * Drops the expired state of a store's ids: a few per call, and once a second a pass over every
 * id, then every one of `others`, in turns of at most SWEEP_PER_TURN entries.
 */
export class IdSweeper {
  /** Where the amortised sweep resumes; null to start over. */
  private cursor: Iterator<IdState> | null = null;
  /** Where the pass resumes over the ids; null when none is under way or it is on to `others`. */
  private walk: Iterator<IdState> | null = null;
  /** Ids the pass has yet to examine (those it began with: ids added since wait for the next). */
  private walkLeft = 0;
  /** The pass has examined every id and is on to `others`. */
  private onOthers = false;
  /** Turns the pass has taken so far. */
  private turns = 0;
  /** The pending turn of the sweep, or null while the store holds nothing. */
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    /** The store's ids: swept in place. */
    private readonly ids: Map<string, IdState>,
    /** The store's clock in µs. */
    private readonly nowUs: () => number,
    /** What else the store holds (its fleet window records), swept after the ids. */
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
   * Once a second while the store holds any id (or any of `others`), a pass over every id and
   * every one of `others` drops what has expired, so ids nobody uses again leave nothing
   * behind even when no call comes to sweep them. A pass goes in turns of at most
   * SWEEP_PER_TURN entries, SWEEP_TURN_MS apart, so that no turn holds the event loop longer
   * with more ids: a pass over n ids takes n / SWEEP_PER_TURN turns, and when they take more
   * than a second the next pass follows at once. One timer at a time, unref'd (it never keeps
   * the process alive), on Node's own timers.
   */
  schedule(): void {
    if (this.timer !== null || (this.ids.size === 0 && this.others.size === 0)) return;
    this.arm(FULL_SWEEP_MS);
  }

  private arm(ms: number): void {
    const timer = setTimeout(this.turn, ms);
    timer.unref?.();
    this.timer = timer;
  }

  /** One turn of the pass: up to SWEEP_PER_TURN ids, then `others`, from where the last stopped. */
  private readonly turn = (): void => {
    this.timer = null;
    const now = this.nowUs();
    let budget = SWEEP_PER_TURN;
    this.turns++;
    if (!this.onOthers) {
      if (this.walk === null) {
        this.walk = this.ids.values();
        this.walkLeft = this.ids.size;
      }
      const walk = this.walk;
      while (budget > 0 && this.walkLeft > 0) {
        const next = walk.next();
        if (next.done) {
          this.walkLeft = 0;
          break;
        }
        budget--;
        this.walkLeft--;
        const state = next.value;
        if (dropExpired(state, now)) this.ids.delete(state.id);
      }
      if (this.walkLeft > 0) {
        this.arm(SWEEP_TURN_MS);
        return;
      }
      // Every id was examined: the pass lets go of its iterator (which holds the table the map
      // had when it began, which the map may have outgrown since), and so does the amortised
      // sweep, which starts over.
      this.walk = null;
      this.cursor = null;
      this.onOthers = true;
    }
    if (!this.others.sweep(now, budget)) {
      this.arm(SWEEP_TURN_MS);
      return;
    }
    // The pass is over: the next starts a second after this one began, counting SWEEP_TURN_MS a
    // turn (at once if it took longer).
    this.onOthers = false;
    const took = (this.turns - 1) * SWEEP_TURN_MS;
    this.turns = 0;
    if (this.ids.size === 0 && this.others.size === 0) return;
    this.arm(Math.max(SWEEP_TURN_MS, FULL_SWEEP_MS - took));
  };
}
