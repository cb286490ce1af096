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
 */
export class FakeClock implements Clock {
  private time: number;
  private timers: Timer[] = [];
  private nextId = 1;
  /** Extra delay (ms) added to each timer when it is set; a function receives the requested delay. */
  lateness: number | ((requested: number) => number) = 0;
  /** Every delay a timer was asked for, in order (for asserting scheduled delays). */
  readonly requested: number[] = [];

  constructor(start = 1_700_000_000_000) {
    this.time = start;
  }

  now(): number {
    return this.time;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const delay = Math.max(0, Number.isFinite(ms) ? ms : 0);
    this.requested.push(delay);
    const late = typeof this.lateness === 'function' ? this.lateness(delay) : this.lateness;
    const timer = { id: this.nextId++, at: this.time + delay + Math.max(0, late), fn };
    this.timers.push(timer);
    return timer.id;
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
    return best?.at;
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
    const until = this.time + ms;
    for (let t = this.popDue(until); t; t = this.popDue(until)) {
      this.time = Math.max(this.time, t.at);
      t.fn();
    }
    this.time = until;
  }

  /** Sets the time without firing timers (to model a stalled event loop). */
  jump(ms: number): void {
    this.time += ms;
  }

  /**
   * Moves time forward by `ms`, firing due timers in order and letting promise
   * callbacks run after each (so async store answers and job settlements interleave
   * as they would on a real event loop).
   */
  async tickAsync(ms: number): Promise<void> {
    const until = this.time + ms;
    await flushMicrotasks();
    for (let t = this.popDue(until); t; t = this.popDue(until)) {
      this.time = Math.max(this.time, t.at);
      t.fn();
      await flushMicrotasks();
    }
    this.time = until;
    await flushMicrotasks();
  }

  /** Runs timers until none is left or `limit` ms have passed; returns the time advanced. */
  async runAllAsync(limit = 3_600_000): Promise<number> {
    const start = this.time;
    await flushMicrotasks();
    for (;;) {
      const at = this.nextAt();
      if (at === undefined || at - start > limit) break;
      await this.tickAsync(Math.max(0, at - this.time));
    }
    return this.time - start;
  }
}

/** Lets queued promise callbacks run (several rounds, for chains of awaits). */
export async function flushMicrotasks(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await Promise.resolve();
}
