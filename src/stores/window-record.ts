/**
 * The provider window one id's fleet learnt from its responses (wrapFetch), kept in the store so
 * that every process sharing the id sees every process's answers. The memory store runs these
 * functions; `src/stores/redis/lua/window.lua` mirrors them on a hash. All times are integer µs on
 * the store's clock. See docs/provider-feedback.md, "Several processes".
 *
 * - Every request wrapFetch sends takes a ticket first (`windowSend`): its send number `seq`.
 * - Every answer reports (`windowReport`) its send number and, when it described a window, its
 *   remaining count and the reset's upper bound. The provider counted the answered requests no
 *   later than the one that got the lowest count of the window (a request it counted later
 *   would have got a lower count), so only the requests still unanswered may be missing from that
 *   count: the budget left is `lowest remaining − requests in flight`. Requests sent later but
 *   counted earlier (several connections: a request that opens its connection arrives after
 *   one sent later on an open connection) are counted once, in the lowest count, and end their
 *   flight with their answer.
 * - The window's reset is the earliest upper bound any answer of the window gave (a coarse
 *   `t=1` from the answer that opened it bounds the reset within a few ms, for every process).
 *   An answer whose reset lies more than OTHER_WINDOW_US past that bound cannot be the same
 *   window's (another limit sending the same headers, such as a daily quota beside a burst):
 *   with a count no higher than the lowest, it replaces the window; with a higher one, the
 *   known window still binds first.
 * - While the window is known and its budget is spent, a ticket is refused until its reset.
 * - After a window's reset the next window is unknown: answers to requests sent before the
 *   first ticket after the reset are not counted in it. After a spent window that first ticket
 *   is a probe, alone in flight for the whole fleet until its answer is reported (or `probeTtl`
 *   passes); the others wait for that answer, which opens the next window with its true count.
 *   So is the first ticket of a fresh record (the id's first request, or the first after a
 *   minute without any): before any answer, the fleet does not know whether the provider's
 *   window has room for all the requests its callers would send at once.
 */

import type { WindowTicket } from './store.js';

/**
 * An answer whose reset lies more than this (µs) past the known window's bound is not that
 * window's: a reset is reported rounded up to at most a whole second, and one more second covers
 * the answer's way back and the report's way to the store (window.lua's OTHER_WINDOW).
 */
export const OTHER_WINDOW_US = 2_000_000;

/**
 * A probe recorded as ending more than this (µs) past the asking caller's own probe time-to-live
 * has ended: a Redis server whose clock stepped back, or a foreign write, left it there, and it
 * would hold every request of the fleet until then (wrapFetch's probes ask 1 or 2 s,
 * feedback/fleet.ts; the slack covers callers asking different times). window.lua's
 * STUCK_SLACK.
 */
export const STUCK_PROBE_SLACK_US = 5_000_000;

export interface WindowRecord {
  /** Tickets given so far (send numbers). */
  seq: number;
  /** The known window's reset (upper bound, µs); 0 when no window is known. */
  reset: number;
  /** Budget left in the known window (may be negative). */
  left: number;
  /** Lowest remaining count reported in the known window. */
  low: number;
  /** Send number of the first request after the last known reset: older answers belong to older windows. */
  start: number;
  /** 1 when the known window's budget was spent: its reset is followed by a probe. */
  spent: number;
  /** The probe in flight ends at this time (µs) at the latest; 0 when none. */
  probe: number;
  /** The probe's send number. */
  pseq: number;
  /** Requests sent since `start` and not yet answered. */
  flight: number;
}

/**
 * A ticket in µs: `seq` > 0 to send now (`probe` when it is the probe), else wait `waitUs` and ask
 * again (`probe`: for a probe's answer, which may come sooner).
 */
export interface WindowTicketUs {
  readonly seq: number;
  readonly waitUs: number;
  readonly probe: boolean;
}

export function newWindowRecord(): WindowRecord {
  return { seq: 0, reset: 0, left: 0, low: 0, start: 0, spent: 0, probe: 0, pseq: 0, flight: 0 };
}

/** A request is about to be sent. */
export function windowSend(rec: WindowRecord, now: number, probeTtlUs: number): WindowTicketUs {
  if (rec.probe > now + probeTtlUs + STUCK_PROBE_SLACK_US) rec.probe = 0;
  if (rec.probe > now) return { seq: 0, waitUs: rec.probe - now, probe: true };
  if (rec.reset > now) {
    if (rec.left <= 0) return { seq: 0, waitUs: rec.reset - now, probe: false };
    rec.left--;
    rec.seq++;
    rec.flight++;
    return { seq: rec.seq, waitUs: 0, probe: false };
  }
  // A fresh record: the id's first request learns the window before the others go.
  let probe = rec.seq === 0;
  rec.seq++;
  rec.flight++;
  if (rec.reset > 0) {
    // The known window has passed: this is the first request of the next one. Answers to
    // requests sent before it belong to older windows.
    probe = rec.spent === 1;
    rec.reset = 0;
    rec.spent = 0;
    rec.left = 0;
    rec.low = 0;
    rec.start = rec.seq;
    rec.flight = 1;
  }
  if (probe) {
    // This request learns the window; the others wait for its answer.
    rec.probe = now + probeTtlUs;
    rec.pseq = rec.seq;
    return { seq: rec.seq, waitUs: 0, probe: true };
  }
  return { seq: rec.seq, waitUs: 0, probe: false };
}

/**
 * The answer to send number `seq` arrived: `remaining` (or −1 when it carried no window: it only
 * ends its flight and the probe it answers), the reset at most `resetUs` from now. Returns the
 * wait until the window's reset when its count is spent (the lowest remaining count is 0), else 0.
 */
export function windowReport(
  rec: WindowRecord,
  now: number,
  seq: number,
  remaining: number,
  resetUs: number,
): number {
  if (rec.probe > 0 && rec.pseq === seq) rec.probe = 0;
  // An answer to a request sent before the known window's reset, reported after it, no request
  // having been sent since: it belongs to that window, which is over (the next one is unknown).
  const stale = rec.reset > 0 && rec.reset <= now;
  // Answers to requests sent since the last reset (a send number the record never gave is from
  // a record that was lost: not counted).
  if (seq >= rec.start && seq <= rec.seq && !stale) {
    if (rec.flight > 0) rec.flight--;
    if (remaining >= 0) {
      if (rec.reset > now && now + resetUs - OTHER_WINDOW_US > rec.reset) {
        // A reset that cannot lie in the known window: another limit's (a daily quota beside a
        // burst), or a window the record's bound missed. The lower count decides.
        if (remaining <= rec.low) {
          rec.reset = now + resetUs;
          rec.low = remaining;
        }
      } else if (rec.reset > now) {
        if (remaining <= rec.low) {
          // The same window: its tightest bound, its lowest count.
          if (now + resetUs < rec.reset) rec.reset = now + resetUs;
          rec.low = remaining;
        }
      } else {
        rec.reset = now + resetUs;
        rec.low = remaining;
      }
    }
    if (rec.reset > now) {
      rec.left = rec.low - rec.flight;
      if (rec.left <= 0) rec.spent = 1;
    }
  }
  // The wait until the reset once the count is spent. While the lowest count still shows budget
  // that requests in flight may take, tickets are refused but no wait is returned (no pause is
  // written): the answers still out can show a request counted before the lowest count.
  return rec.reset > now && rec.left <= 0 && rec.low <= 0 ? rec.reset - now : 0;
}

/** When the record may be forgotten (µs): nothing it holds matters after its reset and probe. */
export function windowExpiry(rec: WindowRecord): number {
  return Math.max(rec.reset, rec.probe);
}

/** How long a record outlives its reset and probe (µs), like window.lua's KEEP. */
const KEEP_US = 60_000_000;

/** A send number or a count given to the store: an integer (a count may be −1: no window). */
export function checkWindowInt(value: unknown, name: string, min: number): number {
  if (typeof value !== 'number') {
    throw new TypeError(`Expected \`${name}\` to be an integer, got ${typeof value}`);
  }
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`Expected \`${name}\` to be an integer of at least ${min}, got ${String(value)}`);
  }
  return value;
}

/** A record the memory store holds, and when it may be forgotten (µs). */
interface HeldRecord {
  readonly id: string;
  rec: WindowRecord;
  expires: number;
}

/**
 * The memory store's records, by id. A record is dropped KEEP_US after its reset and probe: each
 * call also examines up to two records of other ids, round-robin, dropping the expired ones, and
 * the store's sweep (memory-state.ts, IdSweeper) examines every record once a second (in turns
 * of bounded work), so ids nobody uses again leave nothing behind, calls or none.
 */
export class WindowRecords {
  private readonly records = new Map<string, HeldRecord>();
  /** Where the per-call cleanup resumes; null to start over. */
  private cursor: Iterator<HeldRecord> | null = null;
  /** Where the store's sweep resumes; null when no pass is under way. */
  private walk: Iterator<HeldRecord> | null = null;
  /** Records the sweep's pass has yet to examine (those it began with). */
  private walkLeft = 0;

  private get(id: string, now: number): HeldRecord {
    this.step(now);
    let held = this.records.get(id);
    if (held === undefined) {
      held = { id, rec: newWindowRecord(), expires: 0 };
      this.records.set(id, held);
    } else if (held.expires <= now) {
      held.rec = newWindowRecord();
      held.expires = 0;
    }
    return held;
  }

  /** Amortised cleanup: examines up to two records round-robin and drops the expired ones. */
  private step(now: number): void {
    for (let i = 0; i < 2; i++) {
      if (this.cursor === null) {
        if (this.records.size === 0) return;
        this.cursor = this.records.values();
      }
      const next = this.cursor.next();
      if (next.done === true) {
        this.cursor = null;
        continue;
      }
      const held = next.value;
      if (held.expires <= now) this.records.delete(held.id);
    }
  }

  /**
   * The store's sweep (once a second while it holds any record, in turns): examines up to `max`
   * records from where the last call stopped and drops the expired ones; true once every record
   * held when the pass began was examined.
   */
  sweep(now: number, max: number): boolean {
    if (this.walk === null) {
      this.walk = this.records.values();
      this.walkLeft = this.records.size;
    }
    for (let i = 0; i < max && this.walkLeft > 0; i++) {
      const next = this.walk.next();
      if (next.done === true) {
        this.walkLeft = 0;
        break;
      }
      this.walkLeft--;
      const held = next.value;
      if (held.expires <= now) this.records.delete(held.id);
    }
    if (this.walkLeft > 0) return false;
    // Every record was examined: the pass and the per-call cleanup start over (and let go of the
    // tables their iterators hold, which the map may have outgrown since).
    this.walk = null;
    this.cursor = null;
    return true;
  }

  send(id: string, now: number, probeTtlUs: number): WindowTicket {
    const held = this.get(id, now);
    const t = windowSend(held.rec, now, probeTtlUs);
    held.expires = Math.max(windowExpiry(held.rec), now) + KEEP_US;
    return { seq: t.seq, wait: t.waitUs / 1000, probe: t.probe };
  }

  report(id: string, now: number, seq: number, remaining: number, resetUs: number): number {
    checkWindowInt(seq, 'seq', 0);
    checkWindowInt(remaining, 'remaining', -1);
    const held = this.get(id, now);
    const wait = windowReport(held.rec, now, seq, remaining, resetUs);
    held.expires = Math.max(windowExpiry(held.rec), now) + KEEP_US;
    return wait / 1000;
  }

  /** Records held (tests). */
  get size(): number {
    return this.records.size;
  }
}
