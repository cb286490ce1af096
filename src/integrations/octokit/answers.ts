import { parseNumber } from '../../feedback/values.js';
import { laneOfResource, type RateLane } from './limits.js';

/*
 * Reading GitHub's answers: is this a rate-limit answer, which limit, and how long GitHub asks to
 * wait, in the units @octokit/plugin-throttling hands its handlers (seconds, multiplied by
 * `retryAfterBaseValue` to get milliseconds).
 */

/** A rate-limit answer: which handler decides, the wait in seconds, and the lane it pauses. */
export interface RateLimitAnswer {
  /** `'secondary'`: onSecondaryRateLimit, pauses every request of the key; `'primary'`: onRateLimit, pauses its lane. */
  readonly kind: 'primary' | 'secondary';
  /** Seconds, as plugin-throttling computes them (for primary limits, one second past the reset). */
  readonly retryAfter: number;
  /** For a primary limit: the lane of `x-ratelimit-resource`, when valve has one. */
  readonly lane: RateLane | undefined;
  /** For a primary limit: an `x-ratelimit-resource` valve has no lane for (its requests' route is paused, not a lane). */
  readonly resource?: string;
}

/** What one response (or error response) carries. */
export interface AnswerInput {
  readonly status: number | undefined;
  readonly headers: Record<string, unknown> | undefined;
  readonly data: unknown;
  /** The error's message, when the request threw. */
  readonly message: string | undefined;
}

/** A response header's value as a string (Octokit's headers are a plain object, lower-case names). */
export function header(headers: Record<string, unknown> | undefined, name: string): string | undefined {
  if (headers === undefined || headers === null) return undefined;
  const value = headers[name];
  if (value === undefined || value === null) return undefined;
  return Array.isArray(value) ? String(value[0]) : String(value);
}

/** GraphQL errors of type RATE_LIMITED in a response body. */
export function hasRateLimitedError(data: unknown): boolean {
  if (data === null || typeof data !== 'object') return false;
  const errors = (data as { errors?: unknown }).errors;
  if (!Array.isArray(errors)) return false;
  return errors.some(
    (e) => e !== null && typeof e === 'object' && (e as { type?: unknown }).type === 'RATE_LIMITED',
  );
}

function bodyMessage(data: unknown): string {
  if (data === null || typeof data !== 'object') return typeof data === 'string' ? data : '';
  const message = (data as { message?: unknown }).message;
  return typeof message === 'string' ? message : '';
}

const SECONDARY = /\bsecondary rate\b/i;

/**
 * Whether an answer is a rate limit, and which: GitHub's secondary-limit message (403 or 429) is
 * secondary; `x-ratelimit-remaining: 0` on a 403 or 429, or a GraphQL RATE_LIMITED error (in a 200
 * body too), is primary; any other 403 or 429 with `retry-after`, and any 429, is secondary. A 401
 * never is, nor is any other status. `now` is epoch ms.
 */
export function readAnswer(
  input: AnswerInput,
  fallbackSecondaryRetryAfter: number,
  now: number,
): RateLimitAnswer | undefined {
  const { status, headers } = input;
  if (status === 401) return undefined;
  const limited = status === 403 || status === 429;
  const rateLimited = hasRateLimitedError(input.data);
  if (!limited && !rateLimited) return undefined;
  const retryAfterHeader = header(headers, 'retry-after');
  if (limited && (SECONDARY.test(input.message ?? '') || SECONDARY.test(bodyMessage(input.data)))) {
    return {
      kind: 'secondary',
      retryAfter: finite(secondsOf(retryAfterHeader) || fallbackSecondaryRetryAfter),
      lane: undefined,
    };
  }
  if ((limited && header(headers, 'x-ratelimit-remaining') === '0') || rateLimited) {
    // One second past the reset, as GitHub recommends (and plugin-throttling computes).
    const resetMs = Math.trunc(resetSeconds(header(headers, 'x-ratelimit-reset'))) * 1000;
    const retryAfter = finite(Math.max(Math.ceil((resetMs - now) / 1000) + 1, 0));
    const resource = header(headers, 'x-ratelimit-resource');
    const lane = laneOfResource(resource) ?? (rateLimited ? 'graphql' : undefined);
    if (lane === undefined && resource !== undefined) return { kind: 'primary', retryAfter, lane, resource };
    return { kind: 'primary', retryAfter, lane };
  }
  if (retryAfterHeader !== undefined || status === 429) {
    return {
      kind: 'secondary',
      retryAfter: finite(secondsOf(retryAfterHeader) || fallbackSecondaryRetryAfter),
      lane: undefined,
    };
  }
  return undefined;
}

/**
 * `x-ratelimit-reset` in epoch seconds, read with Number() as plugin-throttling reads it. A plain
 * number too large for a double (309 digits and more) is Infinity: a reset further away than any,
 * which the pause cuts to feedback.maxPause. Any other value that is not a finite number
 * (`Infinity`, `1e400`, `abc`, absent) counts as absent: 0, no pause.
 */
export function resetSeconds(value: string | undefined): number {
  if (value === undefined) return 0;
  const n = Number(value);
  if (Number.isFinite(n)) return n;
  return parseNumber(value) === Number.POSITIVE_INFINITY ? n : 0;
}

/**
 * A handler's `retryAfter` stays a finite number: a wait too long for one (Infinity) is the
 * largest one, Number.MAX_VALUE (its pause, retryAfter × retryAfterBaseValue, is cut to
 * feedback.maxPause all the same).
 */
function finite(seconds: number): number {
  return Math.min(seconds, Number.MAX_VALUE);
}

/**
 * A Retry-After in seconds (0 when absent or not a plain positive decimal: no '1e12', '0x10',
 * 'Infinity'); a plain decimal too large for a double is Infinity, further away than any wait.
 */
function secondsOf(value: string | undefined): number {
  if (value === undefined) return 0;
  const n = parseNumber(value);
  return n !== undefined && n > 0 ? n : 0;
}
