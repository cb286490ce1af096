import type { Candidate, FeedbackIgnored, HeaderBag, IgnoredReason } from './types.js';
import { interpretReset, parseGoDuration, parseHttpDate, parseNumber, parseRfc3339 } from './values.js';

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

  /** Headers already reported as too long (each is reported once). */
  private readonly tooLong = new Set<string>();

  constructor(
    readonly bag: HeaderBag,
    readonly now: number,
    /** Longest value parsed (characters, repeated values joined with ", "). */
    readonly maxValueLength: number = MAX_VALUE_LENGTH,
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
   * so a value with commas is split again, unless it is one HTTP date ("Wed, 21 Oct …").
   */
  values(name: string): string[] {
    const list = this.list(name) ?? [];
    const out: string[] = [];
    for (const v of list) {
      if (v.includes(',') && parseHttpDate(v) === undefined) {
        // Every value parser ignores the whitespace around a value.
        for (const part of v.split(',')) out.push(part);
      } else {
        out.push(v);
      }
    }
    return out;
  }

  ignore(header: string, value: string, reason: IgnoredReason, extra?: Partial<FeedbackIgnored>): void {
    this.ignored.push({ header, value: echo(value), reason, status: this.bag.status, ...extra });
  }

  offer(source: Candidate['source'], header: string, raw: string, waitMs: number): void {
    this.candidates.push({ source, header, raw, waitMs });
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
   * Parses a remaining count. Returns true when it is 0 (the budget is spent), false when
   * budget is left, undefined when the header is absent or unusable (negative or
   * unparseable counts are reported and ignored). Repeated counts: the smallest wins.
   */
  exhausted(name: string): boolean | undefined {
    const raw = this.get(name);
    if (raw === undefined) return undefined;
    const nums = this.numbers(name, raw, this.values(name));
    if (nums === undefined) return undefined;
    let min = Number.POSITIVE_INFINITY;
    for (const n of nums) if (n < min) min = n;
    return min === 0;
  }

  /**
   * A reset value of any supported form: a Go duration (`6m0s`), a number (by magnitude,
   * see interpretReset), an RFC 3339 timestamp or an HTTP date. Offers a candidate or
   * reports; returns false only when the header is absent.
   */
  reset(name: string, source: Candidate['source']): boolean {
    const raw = this.get(name);
    if (raw === undefined) return false;
    let best: number | undefined;
    let absolute = false;
    for (const v of this.values(name)) {
      let wait: number | undefined;
      let abs = false;
      const n = parseNumber(v);
      if (n !== undefined) {
        if (n < 0) {
          this.ignore(name, raw, 'negative');
          return true;
        }
        const r = interpretReset(n, this.now);
        wait = r.waitMs;
        abs = r.form !== 'delta-s';
      } else {
        const d = parseGoDuration(v);
        if (d !== undefined) {
          if (d < 0) {
            this.ignore(name, raw, 'negative');
            return true;
          }
          wait = d;
        } else {
          const t = parseRfc3339(v) ?? parseHttpDate(v);
          if (t !== undefined) {
            wait = t - this.now;
            abs = true;
          }
        }
      }
      if (wait === undefined) {
        this.ignore(name, raw, 'unparseable');
        return true;
      }
      if (best === undefined || wait > best) {
        best = wait;
        absolute = abs;
      }
    }
    if (best === undefined) return false;
    if (best <= 0) {
      if (absolute) this.ignore(name, raw, 'in-the-past');
      return true;
    }
    this.offer(source, name, raw, best);
    return true;
  }

  /** A remaining/reset pair: pauses until the reset when the remaining count is 0. */
  pair(remaining: string, resets: readonly string[]): void {
    if (this.exhausted(remaining) !== true) return;
    for (const r of resets) if (this.reset(r, 'ratelimit-header')) return;
    this.ignore(remaining, this.get(remaining) ?? '', 'no-reset');
  }

  /** The response's own Date header (to measure an HTTP-date Retry-After against the server's clock). */
  serverDate(): number | undefined {
    const raw = this.list('date');
    if (raw?.length !== 1) return undefined;
    return parseHttpDate(raw[0]!);
  }
}
