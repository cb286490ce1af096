/**
 * Types of the feedback module: what observe() returns, what it reports, and the
 * parser's own shapes. No code here.
 */
import type { WindowBounds } from './windows.js';

/** Where a reading came from. `backoff` readings are made by backoff.ts, never by the parser. */
export type FeedbackSource = 'retry-after' | 'ratelimit-header' | 'backoff';

/**
 * How the headers that produced a pause describe the provider's limit:
 * - `'wait'`: the server states the wait itself (Retry-After, retry-after-ms);
 * - `'window'`: a count that comes back whole at the reset (fixed or sliding windows:
 *   X-RateLimit-*, RateLimit, HubSpot); the pause lasts until the reset;
 * - `'token-bucket'`: the reset is when the bucket is full again (OpenAI, Anthropic); the
 *   pause lasts until the next unit, `reset / (limit − remaining)`;
 * - `'leaky-bucket'`: a full bucket drains at a known rate (Shopify); the pause lasts
 *   until one request has leaked;
 * - `'backoff'`: no header gave a wait (a bare 429); exponential backoff.
 */
export type FeedbackModel = 'wait' | 'window' | 'token-bucket' | 'leaky-bucket' | 'backoff';

/** What observe() read from a response. */
export interface FeedbackReading {
  /** How long the valve pauses (ms), already capped to `maxPause`. */
  readonly waitMs: number;
  /** `now + waitMs` on the valve's clock (epoch ms). */
  readonly until: number;
  readonly source: FeedbackSource;
  /** Lower-case name of the header that gave the wait; undefined for backoff. */
  readonly header: string | undefined;
  /** That header's value as received; undefined for backoff. */
  readonly raw: string | undefined;
  /** The response status, when the input carried one. */
  readonly status: number | undefined;
  /** How the header that gave the wait describes the limit (see FeedbackModel). */
  readonly model: FeedbackModel;
  /**
   * The earliest the limit can be free again (epoch ms, valve clock): `until` for an exact
   * value; for a coarse one (a reset in whole seconds is rounded up, a window length is an
   * upper bound), the lower bound of the true reset, which lies in [earliest, until].
   */
  readonly earliest: number;
  /**
   * True when the value that gave the wait has a granularity of a second or coarser (a
   * reset in whole seconds; a window length, or a bucket's reset without its size, of 1 s or
   * more): `until` is then an upper bound, not a fact, and the true reset lies in [earliest, until].
   */
  readonly coarse: boolean;
  /** True when the provider asked for more than `maxPause` and the wait was cut to it. */
  readonly capped?: boolean;
  /** Backoff readings only: how many header-less 429s in a row this one is (1 for the first). */
  readonly attempt?: number;
}

/** Why a header value was not used as sent. */
export type IgnoredReason =
  /** Not a number, date or duration that this header allows. */
  | 'unparseable'
  /** A negative wait or count. */
  | 'negative'
  /** An absolute reset time (date or epoch) that has already passed. */
  | 'in-the-past'
  /** A wait longer than `maxPause`: used, but cut to `maxPause` (see `cappedTo`). */
  | 'capped'
  /** A remaining count of 0 with no usable reset time next to it. */
  | 'no-reset'
  /** The input object itself could not be read (a getter threw). */
  | 'unreadable-input'
  /** A header value longer than any rate-limit header (over 1024 characters): not parsed at all. */
  | 'too-long'
  /**
   * A wait of 0 (`Retry-After: 0`, `t=0`, a reset of 0) on a 429 that no other header gave a
   * wait for: the 429 backs off instead. On other statuses a 0 is used (it means now).
   */
  | 'zero'
  /** Retry-After or retry-after-ms on an error status other than 429, 503 and 403 (a 500): not read. */
  | 'other-status';

/** Payload of the `'feedback-ignored'` event: one header value that was not used as sent. */
export interface FeedbackIgnored {
  readonly header: string;
  /** The value as received (at most 200 characters). */
  readonly value: string;
  readonly reason: IgnoredReason;
  readonly status: number | undefined;
  /** For `reason: 'capped'`: the wait that was used instead (ms). */
  readonly cappedTo?: number;
  /** For `reason: 'capped'`: the wait the header asked for (ms). */
  readonly requestedMs?: number;
}

/** The parser's answer: the header-derived reading (if any), what was ignored, and whether backoff applies. */
export interface ParsedFeedback {
  readonly status: number | undefined;
  /** The wait the headers gave (see choose.ts), capped; undefined when none did. */
  readonly reading: FeedbackReading | undefined;
  readonly ignored: FeedbackIgnored[];
  /** A 429 without a usable wait (or a 503 whose Retry-After is 0 or past): pause with exponential backoff. */
  readonly needsBackoff: boolean;
  /** The window the response says most about (remaining count and reset), if any. */
  readonly window?: WindowSeen | undefined;
  /** True when `reading` is that window's wait (the fleet's record can then decide the pause). */
  readonly fromWindow?: boolean | undefined;
}

export interface ParseOptions {
  /** Current time, epoch ms, from the valve's clock. */
  readonly now: number;
  /** Longest wait ever returned (ms). */
  readonly maxPause: number;
  /**
   * Longest header value parsed (characters, repeated values joined with ", "); a longer
   * one is reported as 'too-long' and read as absent. Default MAX_VALUE_LENGTH (1024).
   */
  readonly maxValueLength?: number;
  /**
   * Requests sent after this one that were still in flight when its response came back: the
   * provider may not have counted them in the remaining count it sent, so a count up to this
   * many is read as spent. Default 0.
   */
  readonly ahead?: number;
  /** The valve's window bounds: coarse window resets are tightened across responses (windows.ts). */
  readonly windows?: WindowBounds;
}

/** A window a response described: its remaining count and the upper bound of its reset. */
export interface WindowSeen {
  /** Which limit (as Candidate.limit). */
  readonly limit: string;
  /** The lower-case header that gave the reset. */
  readonly header: string;
  readonly remaining: number;
  /** The reset's upper bound (ms from the response) that this response stated (the fleet's record intersects them). */
  readonly waitMs: number;
}

/** Headers of one response: lower-case name → every value received for it. */
export type HeaderMap = Map<string, string[]>;

/** A response reduced to what the parser needs. */
export interface HeaderBag {
  readonly status: number | undefined;
  readonly headers: HeaderMap;
}

/** One usable wait a header family offered; choose.ts picks among them. */
export interface Candidate {
  /** The wait the header asks for (ms, > 0, not yet capped): the upper bound of the reset. */
  readonly waitMs: number;
  /** The lower bound of the wait (ms): waitMs − precisionMs, at least 0; waitMs itself when precisionMs ≤ 1. */
  readonly lowerMs: number;
  /** The granularity of the value as sent (ms): 1000 for whole seconds, 1 for milliseconds. */
  readonly precisionMs: number;
  /** True for a wait measured from now (a delta); false for an absolute time compared with the local clock. */
  readonly relative: boolean;
  /** Which limit it describes: candidates with the same key describe the same limit. */
  readonly limit: string;
  readonly model: Exclude<FeedbackModel, 'backoff'>;
  readonly source: 'retry-after' | 'ratelimit-header';
  /** Lower-case header name. */
  readonly header: string;
  /** The header's value as received. */
  readonly raw: string;
  /** When the window's earlier answers tightened the wait (windows.ts): the wait the header itself stated. */
  readonly statedMs?: number;
}
