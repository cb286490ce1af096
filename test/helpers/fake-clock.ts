import type { Clock } from '../../src/clock.js';

interface Timer {
  id: number;
  at: number;
  fn: () => void;
}

/**
 * A virtual clock for tests: time moves only when the test says so. Timers fire in
 * time order (ties in creation order). `lateness` can make every timer fire late by a
 * chosen amount, to test that the scheduler never catches up.
 *
 * Time is kept in integer microseconds, so repeated `advance(retryAfter)` never drifts
 * (a float of epoch ms only has ~0.24 µs of precision and would round short).
 */
export class FakeClock implements Clock {
  /** Current time in integer µs since the epoch. */
  private us: number;
  private timers: Timer[] = [];
  private nextId = 1;
  /** Extra delay (ms) added to each timer when it is set; a function receives the requested delay. */
  lateness: number | ((requested: number) => number) = 0;
  /** Every delay a timer was asked for, in order (for asserting scheduled delays). */
  readonly requested: number[] = [];

  constructor(start = 1_700_000_000_000) {
    this.us = toUs(start);
  }

  now(): number {
    return this.us / 1000;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const delay = Math.max(0, Number.isFinite(ms) ? ms : 0);
    this.requested.push(delay);
    const late = typeof this.lateness === 'function' ? this.lateness(delay) : this.lateness;
    // The target is rounded to the nearest µs (the clock's resolution); a positive delay
    // always moves at least 1 µs, so a re-armed timer can never fire at the same instant.
    const wait = delay + Math.max(0, late);
    const at = Math.max(toUs(this.us / 1000 + wait), this.us + (wait > 0 ? 1 : 0));
    const timer = { id: this.nextId++, at, fn };
    this.timers.push(timer);
    return timer.id;
  }

  /** Delays asked of setPreciseTimeout, in order (they also appear in `requested`). */
  readonly preciseRequested: number[] = [];

  /**
   * With `lateness` set: precise timers ignore it (they model a timer that checks the time on
   * every event-loop turn and fires on its target), while plain timers stay late.
   */
  preciseExact = false;

  /** A precise timer: on a virtual clock every timer is exact, so only the request is recorded. */
  setPreciseTimeout(fn: () => void, ms: number): unknown {
    this.preciseRequested.push(Math.max(0, Number.isFinite(ms) ? ms : 0));
    if (!this.preciseExact) return this.setTimeout(fn, ms);
    const lateness = this.lateness;
    this.lateness = 0;
    try {
      return this.setTimeout(fn, ms);
    } finally {
      this.lateness = lateness;
    }
  }

  clearTimeout(handle: unknown): void {
    const i = this.timers.findIndex((t) => t.id === handle);
    if (i >= 0) this.timers.splice(i, 1);
  }

  /** Number of pending timers. */
  get pending(): number {
    return this.timers.length;
  }

  /** Time of the next pending timer, or undefined. */
  nextAt(): number | undefined {
    let best: Timer | undefined;
    for (const t of this.timers)
      if (!best || t.at < best.at || (t.at === best.at && t.id < best.id)) best = t;
    return best === undefined ? undefined : best.at / 1000;
  }

  private popDue(until: number): Timer | undefined {
    let best: Timer | undefined;
    for (const t of this.timers) {
      if (t.at <= until && (!best || t.at < best.at || (t.at === best.at && t.id < best.id))) best = t;
    }
    if (best) this.timers.splice(this.timers.indexOf(best), 1);
    return best;
  }

  /** Moves time forward by `ms` synchronously, firing due timers in order (no microtasks in between). */
  advance(ms: number): void {
    const until = this.us + toUs(ms);
    for (let t = this.popDue(until); t; t = this.popDue(until)) {
      this.us = Math.max(this.us, t.at);
      t.fn();
    }
    this.us = until;
  }

  /** Sets the time without firing timers (to model a stalled event loop). */
  jump(ms: number): void {
    this.us += toUs(ms);
  }

  /**
   * Moves time forward by `ms`, firing due timers in order and letting promise
   * callbacks run after each (so async store answers and job settlements interleave
   * as they would on a real event loop).
   */
  async tickAsync(ms: number): Promise<void> {
    const until = this.us + toUs(ms);
    await flushMicrotasks();
    for (let t = this.popDue(until); t; t = this.popDue(until)) {
      this.us = Math.max(this.us, t.at);
      t.fn();
      await flushMicrotasks();
    }
    this.us = until;
    await flushMicrotasks();
  }

  /** Runs timers until none is left or `limit` ms have passed; returns the time advanced. */
  async runAllAsync(limit = 3_600_000): Promise<number> {
    const start = this.us;
    await flushMicrotasks();
    for (;;) {
      const at = this.nextAt();
      if (at === undefined || at * 1000 - start > toUs(limit)) break;
      await this.tickAsync(Math.max(0, at - this.us / 1000));
    }
    return (this.us - start) / 1000;
  }
}

/** Milliseconds (possibly fractional) to the nearest integer microsecond. */
function toUs(ms: number): number {
  return Math.round(ms * 1000);
}

/** Lets queued promise callbacks run (several rounds, for chains of awaits). */
export async function flushMicrotasks(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await Promise.resolve();
}
