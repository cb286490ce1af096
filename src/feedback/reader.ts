import type { Candidate, FeedbackIgnored, HeaderBag, IgnoredReason, WindowSeen } from './types.js';
import {
  decimals,
  interpretReset,
  parseHttpDate,
  parseNumber,
  readGoDuration,
  readRfc3339,
  splitJoined,
} from './values.js';
import type { WindowBounds } from './windows.js';

/** A reset value as read: the wait until it (ms), its precision, and whether it was a delta. */
export interface ResetRead {
  /** The header's whole value as received. */
  readonly raw: string;
  readonly waitMs: number;
  readonly precisionMs: number;
  readonly relative: boolean;
}

/** The longest value echoed in an ignored report. */
export const MAX_ECHO = 200;

/**
 * The longest header value parsed. Real rate-limit values are a few dozen characters
 * (an IETF RateLimit field with several policies, a few hundred); longer ones are
 * reported as 'too-long' and read as absent, so no parser ever sees a large value.
 */
export const MAX_VALUE_LENGTH = 1024;

/** Cuts a value to the length echoed in reports and readings. */
export function echo(value: string): string {
  return value.length > MAX_ECHO ? value.slice(0, MAX_ECHO) : value;
}

/**
 * One response being read: the header families (families.ts) look values up here,
 * offer the waits they found and report the values they could not use. Never throws
 * on header values.
 */
export class Reader {
  /** Every usable wait offered so far, in the order the families ran. */
  readonly candidates: Candidate[] = [];
  /** Every value not used as sent, in the order found. */
  readonly ignored: FeedbackIgnored[] = [];
  /**
   * Every wait of 0 read (a delta of 0: the limit is free now). Used as sent, except on a 429
   * that backs off instead: headers.ts then reports them as 'zero'.
   */
  readonly zeros: FeedbackIgnored[] = [];

  /** The window this response says most about (see see()), for the fleet's record. */
  window: WindowSeen | undefined;
  /** The limit whose wait chooseWait() chose. */
  chosenLimit: string | undefined;

  /** Headers already reported as too long (each is reported once). */
  private readonly tooLong = new Set<string>();
  /** The server's Date as read by serverDate() (null: absent or unusable, reported once). */
  private date: number | null | undefined;

  constructor(
    readonly bag: HeaderBag,
    readonly now: number,
    /** Longest value parsed (characters, repeated values joined with ", "). */
    readonly maxValueLength: number = MAX_VALUE_LENGTH,
    /**
     * Requests sent after this one that the provider may not have counted yet: a remaining
     * count up to this many is spent (see ParseOptions.ahead).
     */
    readonly ahead: number = 0,
    /** The valve's window bounds, to tighten coarse resets across responses (see windows.ts). */
    readonly windows?: WindowBounds,
  ) {}

  /**
   * Every value received for a header, or undefined when it is absent or too long (a too
   * long header is reported once and then read as absent).
   */
  list(name: string): readonly string[] | undefined {
    const list = this.bag.headers.get(name);
    if (list === undefined || list.length === 0) return undefined;
    let length = (list.length - 1) * 2;
    for (const v of list) length += v.length;
    if (length <= this.maxValueLength) return list;
    if (!this.tooLong.has(name)) {
      this.tooLong.add(name);
      this.ignore(name, list[0]!, 'too-long');
    }
    return undefined;
  }

  /** Every value of a header joined as Headers would join them (", "). */
  get(name: string): string | undefined {
    return this.list(name)?.join(', ');
  }

  /**
   * Values of a single-valued header. A Headers object joins repeated values with ", ",
   * so a value with commas is split again, keeping HTTP dates ("Wed, 21 Oct …") whole.
   */
  values(name: string): string[] {
    const list = this.list(name) ?? [];
    const out: string[] = [];
    for (const v of list) {
      // Every value parser ignores the whitespace around a value.
      if (v.includes(',')) for (const part of splitJoined(v)) out.push(part);
      else out.push(v);
    }
    return out;
  }

  ignore(header: string, value: string, reason: IgnoredReason, extra?: Partial<FeedbackIgnored>): void {
    this.ignored.push({ header, value: echo(value), reason, status: this.bag.status, ...extra });
  }

  /** Notes a wait of 0 (see `zeros`). */
  zero(header: string, value: string): void {
    this.zeros.push({ header, value: echo(value), reason: 'zero', status: this.bag.status });
  }

  /**
   * Offers a wait. Values are taken as rounded up to their precision, so the true wait
   * lies in (waitMs − precisionMs, waitMs]; a value to the millisecond is exact.
   */
  offer(c: Omit<Candidate, 'lowerMs'>): void {
    // A wait of Infinity (a number too large for a double) as coarse as itself has no lower bound: 0.
    const lowerMs = c.precisionMs <= 1 ? c.waitMs : Math.max(0, c.waitMs - c.precisionMs) || 0;
    this.candidates.push({ ...c, lowerMs });
  }

  /**
   * The plain numbers of `items` (values of header `name`, whose whole value is `raw`).
   * Reports the header once and returns undefined when any item is not a number
   * ('unparseable') or is negative ('negative').
   */
  numbers(name: string, raw: string, items: readonly string[]): number[] | undefined {
    const out: number[] = [];
    let negative = false;
    for (const item of items) {
      const n = parseNumber(item);
      if (n === undefined) {
        this.ignore(name, raw, 'unparseable');
        return undefined;
      }
      if (n < 0) negative = true;
      out.push(n);
    }
    if (negative) {
      this.ignore(name, raw, 'negative');
      return undefined;
    }
    return out;
  }

  /**
   * Parses a remaining count. Returns true when it is spent (0, or no more than the requests
   * already sent after this one: `ahead`), false when budget is left, undefined when the
   * header is absent or unusable (negative or unparseable counts are reported and ignored).
   * Repeated counts: the smallest wins.
   */
  exhausted(name: string): boolean | undefined {
    const min = this.remaining(name);
    return min === undefined ? undefined : min <= this.ahead;
  }

  /** The remaining count of a header (the smallest of repeated ones); undefined when absent or unusable (reported). */
  remaining(name: string): number | undefined {
    const raw = this.get(name);
    if (raw === undefined) return undefined;
    const nums = this.numbers(name, raw, this.values(name));
    if (nums === undefined) return undefined;
    let min = Number.POSITIVE_INFINITY;
    for (const n of nums) if (n < min) min = n;
    return min;
  }

  /**
   * Tightens a coarse window reset with what the valve's earlier responses said of the same
   * window (windows.ts): the wait until the tightest upper bound known, or `waitMs` itself
   * without window bounds or for a precise value.
   *
   * The fleet's record (see()) gets this response's own bound, not the tightened one: this
   * process tells windows apart by its own counts, which are a part of the fleet's, so an answer
   * of the next window can pass here for one of the window before (its count no higher than the
   * lowest this process saw, before that window's bound) and take its earlier reset. The record
   * tells windows apart by send numbers and intersects the bounds of every process's answers.
   */
  tightened(key: string, remaining: number, waitMs: number, precisionMs: number): number {
    const bound =
      this.windows === undefined || precisionMs < 1000
        ? waitMs
        : this.windows.tighten(key, remaining, waitMs, this.now, precisionMs);
    this.see(key, remaining, waitMs);
    return bound;
  }

  /**
   * Keeps the window this response says most about, for the fleet's record (stores/window-record.ts):
   * the lowest remaining count; for equal counts, the shortest bound of one limit (its most
   * precise header) or the longest of different limits (each must be free again).
   */
  private see(key: string, remaining: number, waitMs: number): void {
    if (!(waitMs > 0) || !Number.isFinite(remaining)) return;
    const space = key.lastIndexOf(' ');
    const limit = key.slice(0, space);
    const w = this.window;
    if (w !== undefined) {
      if (remaining > w.remaining) return;
      if (remaining === w.remaining && (limit === w.limit ? waitMs >= w.waitMs : waitMs <= w.waitMs)) return;
    }
    this.window = { limit, header: key.slice(space + 1), remaining, waitMs };
  }

  /**
   * Records a coarse reset a response with budget left stated (its window bound), without
   * reporting its value when unusable: only a spent count's reset is reported.
   */
  note(key: string, remaining: number, read: () => ResetRead | null | undefined): void {
    if (this.windows === undefined) return;
    const reported = this.ignored.length;
    const zeros = this.zeros.length;
    const r = read();
    this.ignored.length = reported;
    this.zeros.length = zeros;
    if (r) this.tightened(key, remaining, r.waitMs, r.precisionMs);
  }

  /**
   * A reset value of any supported form: a Go duration (`6m0s`), a number (by magnitude,
   * see interpretReset), an RFC 3339 timestamp or an HTTP date, with its precision.
   * Repeated values: the longest wait wins, and each absolute time already passed is reported
   * ('in-the-past') and skipped. Returns undefined when the header is absent, null when it gives
   * no wait (nonsense and past times are reported; a zero is noted, see `zeros`).
   */
  readReset(name: string): ResetRead | null | undefined {
    const raw = this.get(name);
    if (raw === undefined) return undefined;
    let best: ResetRead | undefined;
    for (const v of this.values(name)) {
      let read: ResetRead | undefined;
      const n = parseNumber(v);
      if (n !== undefined) {
        if (n < 0) {
          this.ignore(name, raw, 'negative');
          return null;
        }
        const r = interpretReset(n, this.now);
        const unit = r.form === 'epoch-ms' ? 1 : 1000;
        read = {
          raw,
          waitMs: r.waitMs,
          precisionMs: unit / 10 ** decimals(v),
          relative: r.form === 'delta-s',
        };
      } else {
        const d = readGoDuration(v);
        if (d !== undefined) {
          if (d.ms < 0) {
            this.ignore(name, raw, 'negative');
            return null;
          }
          read = { raw, waitMs: d.ms, precisionMs: d.precisionMs, relative: true };
        } else {
          const t = readRfc3339(v);
          const date = t === undefined ? parseHttpDate(v) : undefined;
          if (t !== undefined)
            read = { raw, waitMs: t.ms - this.now, precisionMs: t.precisionMs, relative: false };
          else if (date !== undefined)
            read = { raw, waitMs: date - this.now, precisionMs: 1000, relative: false };
        }
      }
      if (read === undefined) {
        this.ignore(name, raw, 'unparseable');
        return null;
      }
      if (!read.relative && read.waitMs <= 0) this.ignore(name, raw, 'in-the-past');
      else if (best === undefined || read.waitMs > best.waitMs) best = read;
    }
    if (best === undefined) return null;
    if (best.waitMs <= 0) {
      this.zero(name, raw);
      return null;
    }
    return best;
  }

  /**
   * A remaining/reset pair of a window (the count comes back whole at the reset): when
   * the remaining count is 0, offers the wait until the reset as a wait for `limit`.
   */
  pair(remaining: string, reset: string, limit: string): void {
    const left = this.remaining(remaining);
    if (left === undefined) return;
    const key = `${limit} ${reset}`;
    if (left > this.ahead) {
      this.note(key, left, () => this.readReset(reset));
      return;
    }
    const r = this.readReset(reset);
    if (r === undefined) this.ignore(remaining, this.get(remaining) ?? '', 'no-reset');
    else if (r !== null) {
      const waitMs = this.tightened(key, left, r.waitMs, r.precisionMs);
      if (waitMs > 0) this.offerReset(reset, { ...r, waitMs }, limit, 'window', r.waitMs);
    }
  }

  /**
   * A remaining/reset pair of a token bucket, whose reset is when the bucket is full
   * again: when the remaining count is spent (at most `ahead`), offers the wait for the
   * units the requests in flight take and the next one, `reset / (limit − remaining) ×
   * (ahead − remaining + 1)` (`reset / limit` for a spent count with nothing in flight), with
   * `limit` read from `limitHeader`. Without a usable limit, the whole reset (an upper bound,
   * with no lower bound).
   */
  bucket(remaining: string, reset: string, limitHeader: string, limit: string): void {
    const left = this.remaining(remaining);
    if (left === undefined || left > this.ahead) return;
    const r = this.readReset(reset);
    if (r === undefined) this.ignore(remaining, this.get(remaining) ?? '', 'no-reset');
    if (r === undefined || r === null) return;
    const rawLimit = this.get(limitHeader);
    const sizes =
      rawLimit === undefined ? undefined : this.numbers(limitHeader, rawLimit, this.values(limitHeader));
    let size = Number.POSITIVE_INFINITY;
    for (const n of sizes ?? []) size = Math.min(size, n);
    if (!(size >= 1 && size < Number.POSITIVE_INFINITY)) {
      // The next unit may come at any time before the bucket is full again.
      this.offerReset(reset, { ...r, precisionMs: Math.max(r.precisionMs, r.waitMs) }, limit, 'token-bucket');
      return;
    }
    // The bucket fills one unit every reset / (size − left); the requests still in flight
    // (`ahead`) take the units left and the next ones, so the next request needs
    // ahead − left + 1 more.
    const units = (this.ahead - left + 1) / Math.max(1, size - left);
    this.offerReset(
      reset,
      { ...r, waitMs: r.waitMs * units, precisionMs: r.precisionMs * units, relative: r.relative },
      limit,
      'token-bucket',
    );
  }

  /** Offers a reset read by readReset(). */
  offerReset(
    header: string,
    r: ResetRead,
    limit: string,
    model: Candidate['model'],
    statedMs?: number,
  ): void {
    this.offer({
      ...(statedMs !== undefined && statedMs > r.waitMs ? { statedMs } : {}),
      waitMs: r.waitMs,
      precisionMs: r.precisionMs,
      relative: r.relative,
      limit,
      model,
      source: 'ratelimit-header',
      header,
      raw: r.raw,
    });
  }

  /**
   * The response's own Date header (to measure an HTTP-date Retry-After against the server's
   * clock). A Date that is not one HTTP date (unparseable, or repeated with different times) is
   * reported once as 'unparseable'; the local clock is used instead.
   */
  serverDate(): number | undefined {
    if (this.date === undefined) {
      this.date = null;
      const raw = this.get('date');
      if (raw !== undefined) {
        let at: number | undefined;
        for (const v of this.values('date')) {
          const t = parseHttpDate(v);
          if (t === undefined || (at !== undefined && t !== at)) {
            at = undefined;
            break;
          }
          at = t;
        }
        if (at === undefined) this.ignore('date', raw, 'unparseable');
        else this.date = at;
      }
    }
    return this.date ?? undefined;
  }
}
