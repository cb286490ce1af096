import { type Clock, MAX_TIMER_DELAY_MS, systemClock } from './clock.js';
import { describe, parseDuration } from './duration.js';
import { MAX_DURATION_MS } from './stores/checks.js';

/*
 * A valve group's eviction: every live valve of the group in one list ordered by last activity
 * (oldest first), and one timer for the whole group, armed for the oldest entry's deadline.
 * Touching an entry moves it to the tail in O(1); the timer is never re-armed on a touch (the
 * head only gets later), it fires, hands the due entries to `due`, and re-arms for the new head.
 * No entry: no timer.
 */

/** One live valve of a group, as the idle list sees it. */
export class IdleEntry {
  /** The neighbour that was active just before / after this one; null at the ends or once unlinked. */
  prev: IdleEntry | null = null;
  next: IdleEntry | null = null;
  /** Last activity on the group's clock (creation, valve(key), the valve's 'idle' event, a busy check). */
  lastActive = 0;
  /** In the list (false once evicted or the group closed). */
  linked = false;
}

export class IdleList<E extends IdleEntry> {
  /** Oldest activity first; null when empty. */
  private head: E | null = null;
  private tail: E | null = null;
  /** The pending timer's handle, or null when none is set. */
  private handle: unknown = null;
  /** When the pending timer fires (group clock); Infinity when none is set. */
  private at = Number.POSITIVE_INFINITY;
  /** No more timers (the group closed). */
  private stopped = false;

  constructor(
    private readonly clock: Clock,
    /** ms of inactivity after which an entry is due (Infinity: never). */
    private readonly idleTimeout: number,
    /** Called with each entry whose idleTimeout passed, oldest first; it must unlink it or touch it. */
    private readonly due: (entry: E, now: number) => void,
  ) {}

  /** Appends a new entry (or moves a linked one) to the tail, active now. O(1). */
  touch(entry: E, now = this.clock.now()): void {
    entry.lastActive = now;
    if (entry.linked) {
      if (entry === this.tail) return;
      this.unlink(entry);
    }
    entry.linked = true;
    entry.prev = this.tail;
    entry.next = null;
    if (this.tail === null) this.head = entry;
    else this.tail.next = entry;
    this.tail = entry;
    if (this.handle === null) this.arm();
  }

  /** Removes an entry. O(1). */
  unlink(entry: E): void {
    if (!entry.linked) return;
    const { prev, next } = entry;
    if (prev === null) this.head = next as E | null;
    else prev.next = next;
    if (next === null) this.tail = prev as E | null;
    else next.prev = prev;
    entry.prev = null;
    entry.next = null;
    entry.linked = false;
  }

  /** Clears the timer for good; the entries stay where they are (see clear()). */
  stop(): void {
    this.stopped = true;
    this.clearTimer();
  }

  /** Unlinks every entry (the group closed: it holds none of them any more). O(entries). */
  clear(): void {
    for (let e = this.head; e !== null; e = this.head) this.unlink(e);
  }

  /** A timer is pending (for tests and the group's stats). */
  get armed(): boolean {
    return this.handle !== null;
  }

  private clearTimer(): void {
    if (this.handle === null) return;
    if (this.clock === systemClock) clearTimeout(this.handle as ReturnType<typeof setTimeout>);
    else this.clock.clearTimeout(this.handle);
    this.handle = null;
    this.at = Number.POSITIVE_INFINITY;
  }

  /** Arms the one timer for the head's deadline (kept when an earlier one is pending). */
  private arm(): void {
    if (this.stopped || this.head === null || this.idleTimeout === Number.POSITIVE_INFINITY) return;
    const at = this.head.lastActive + this.idleTimeout;
    if (this.handle !== null) {
      if (this.at <= at) return;
      this.clearTimer();
    }
    const now = this.clock.now();
    const delay = at > now ? at - now : 0;
    this.at = now + delay;
    if (this.clock === systemClock) {
      // Housekeeping only: an unref'd Node timer, so a group never keeps a process alive. It may
      // fire early (the sweep then finds nothing due and re-arms); long waits go in chunks.
      const t = setTimeout(this.fire, Math.min(Math.max(1, Math.ceil(delay)), MAX_TIMER_DELAY_MS));
      t.unref();
      this.handle = t;
    } else {
      this.handle = this.clock.setTimeout(this.fire, delay);
    }
  }

  private readonly fire = (): void => {
    this.handle = null;
    this.at = Number.POSITIVE_INFINITY;
    const now = this.clock.now();
    const limit = now - this.idleTimeout;
    // `due` unlinks the entry or touches it (moving it behind every due entry), so this ends.
    for (let e = this.head; e !== null && e.lastActive <= limit && !this.stopped; e = this.head) {
      this.due(e, now);
      // A `due` that did neither must not loop forever.
      if (e === this.head && e.lastActive <= limit) this.unlink(e);
    }
    this.arm();
  };
}

const DEFAULT_IDLE_TIMEOUT = 300_000;

/** createValveGroup()'s `idleTimeout`, checked: ms (default 5 minutes), or Infinity. */
export function checkIdleTimeout(value: unknown): number {
  if (value === undefined) return DEFAULT_IDLE_TIMEOUT;
  if (value === Number.POSITIVE_INFINITY) return value;
  const ms = parseDuration(value, 'idleTimeout');
  if (ms > MAX_DURATION_MS) {
    throw new RangeError(
      `Expected \`idleTimeout\` to be at most 365 days or Infinity, got ${describe(value)}`,
    );
  }
  return ms;
}
