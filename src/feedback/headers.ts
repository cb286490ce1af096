/**
 * Reads provider rate-limit feedback from a response. Nothing here reads the system
 * clock, sets a timer or throws on header values: `now` comes from the caller (the
 * valve's clock), and every value that cannot be used is returned in `ignored`.
 *
 * The parts: input.ts (a response → status and header map), values.ts (numbers,
 * durations, dates), structured.ts (RFC 8941), reader.ts (lookups and reports),
 * families.ts (one reader per header family), choose.ts (choosing and capping the wait).
 * See docs/provider-feedback.md for the table of formats and how each is read.
 */
import { chooseWait } from './choose.js';
import { FAMILIES } from './families.js';
import { toHeaderBag } from './input.js';
import { Reader } from './reader.js';
import type { HeaderBag, ParsedFeedback, ParseOptions } from './types.js';

/** Statuses on which Retry-After / retry-after-ms pause (403: GitHub's secondary limits). */
const RETRY_AFTER_STATUSES = new Set([403, 429, 503]);
/** The headers that count only on those statuses. */
const RETRY_AFTER_HEADERS = ['retry-after', 'retry-after-ms', 'x-ms-retry-after-ms'];

/**
 * Reads every supported rate-limit header of a response. Never throws on header
 * values; throws TypeError only when `input` is not an object.
 *
 * - Retry-After / retry-after-ms / x-ms-retry-after-ms count only on 429, 503 and 403
 *   (or when no status is known, i.e. a bare Headers or header object was given); on another
 *   error status (4xx, 5xx) they are reported as 'other-status'. On a 1xx–3xx they mean
 *   something else (a redirect's delay, a 202's polling interval) and are not read.
 * - Remaining/reset pairs count on any status: remaining 0 with a reset still ahead.
 * - Of the waits for one limit the most precise wins, across limits the longest
 *   (choose.ts); it is capped to `maxPause` (reported).
 * - Values over `maxValueLength` (1024) characters are reported as 'too-long', not parsed.
 * - A 429 with no usable wait sets `needsBackoff`; its waits of 0 are then reported as 'zero'.
 *   So does a 503 whose Retry-After (or retry-after-ms) is 0 or a date already passed.
 */
export function readFeedback(input: unknown, options: ParseOptions): ParsedFeedback {
  return readBag(toHeaderBag(input), options);
}

/** readFeedback() on an already normalised bag. */
export function readBag(bag: HeaderBag, options: ParseOptions): ParsedFeedback {
  const r = new Reader(bag, options.now, options.maxValueLength, options.ahead, options.windows);
  const status = bag.status;
  const limited = status === undefined || RETRY_AFTER_STATUSES.has(status);
  for (const family of FAMILIES) if (limited || !family.onlyWhenLimited) family.read(r);
  if (!limited && status >= 400) {
    for (const name of RETRY_AFTER_HEADERS) {
      const raw = r.get(name);
      if (raw !== undefined) r.ignore(name, raw, 'other-status');
    }
  }
  const reading = chooseWait(r, options.maxPause);
  // A 503 whose Retry-After says "now" (0, or a date already passed) asks for a retry, as a 429
  // does: it backs off too rather than retrying at once. Nonsense on a 503 is only ignored.
  const needsBackoff = reading === undefined && (status === 429 || (status === 503 && retryAfterSaysNow(r)));
  // A spent counter without its own reset is only worth reporting when nothing else gave a
  // wait (Kong, for one, sends X-RateLimit-Remaining-Minute next to a RateLimit-Reset).
  const ignored = reading ? r.ignored.filter((i) => i.reason !== 'no-reset') : r.ignored;
  // A wait of 0 means now; a 429 (or 503) whose only wait it is backs off instead of retrying at once.
  if (needsBackoff) ignored.push(...r.zeros);
  return {
    status,
    reading,
    ignored,
    needsBackoff,
    ...(r.window === undefined ? {} : { window: r.window }),
    ...(reading !== undefined && r.window !== undefined && r.chosenLimit === r.window.limit
      ? { fromWindow: true }
      : {}),
  };
}

/** Whether a Retry-After family header gave a wait of 0 or a date already passed. */
function retryAfterSaysNow(r: Reader): boolean {
  const isRetryAfter = (i: { header: string }) => RETRY_AFTER_HEADERS.includes(i.header);
  return r.zeros.some(isRetryAfter) || r.ignored.some((i) => i.reason === 'in-the-past' && isRetryAfter(i));
}
