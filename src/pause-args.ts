import { describe, parseDuration } from './duration.js';
import type { FeedbackModel } from './events.js';
import { checkKnownKeys, MAX_DURATION_MS } from './stores/checks.js';

/*
 * What a pause is asked for and what produced it: valve.pause()'s argument, checked, and the
 * header and model of a pause read from a response. Owned by the pauses room (pauses.ts).
 */

const MODELS: ReadonlySet<unknown> = new Set<FeedbackModel>([
  'wait',
  'window',
  'token-bucket',
  'leaky-bucket',
  'backoff',
]);

/**
 * Which header and model produced a pause, from the `detail` the feedback module passed with it
 * (a FeedbackReading); both undefined for manual and remote pauses and for anything else.
 */
export function pauseOrigin(detail: unknown): {
  header: string | undefined;
  model: FeedbackModel | undefined;
} {
  if (detail === null || typeof detail !== 'object') return { header: undefined, model: undefined };
  const { header, model } = detail as { header?: unknown; model?: unknown };
  return {
    header: typeof header === 'string' ? header : undefined,
    model: MODELS.has(model) ? (model as FeedbackModel) : undefined,
  };
}

const UNTIL = ['until'] as const;

/**
 * valve.pause()'s argument as a length in ms from `now` (local clock; 0 or less: an `until`
 * already past). Throws TypeError/RangeError for anything else (an object with a key besides
 * `until`, too), or for more than 365 days.
 */
export function pauseMs(duration: unknown, now: number): number {
  if (typeof duration === 'number' || typeof duration === 'string') {
    const ms = parseDuration(duration, 'pause');
    if (ms > MAX_DURATION_MS) {
      throw new RangeError(
        `Expected \`pause\` to be at most ${MAX_DURATION_MS} ms (365 days), got ${describe(duration)}`,
      );
    }
    return ms;
  }
  if (typeof duration === 'object' && duration !== null && 'until' in duration) {
    // Like every options object: a key it does not know is refused, not ignored.
    checkKnownKeys(duration, UNTIL, 'pause()');
    const until = (duration as { until: unknown }).until;
    const at = until instanceof Date ? until.getTime() : until;
    if (typeof at !== 'number') {
      throw new TypeError(`Expected \`until\` to be a Date or epoch milliseconds, got ${describe(until)}`);
    }
    if (!Number.isFinite(at)) {
      throw new RangeError(
        `Expected \`until\` to be a valid Date or finite epoch milliseconds, got ${String(until)}`,
      );
    }
    const ms = at - now;
    if (ms > MAX_DURATION_MS) {
      throw new RangeError(
        `Expected \`until\` to be at most 365 days ahead, got ${until instanceof Date ? until.toISOString() : String(at)} (${Math.round(ms / 86_400_000)} days ahead)`,
      );
    }
    return ms;
  }
  throw new TypeError(
    `Expected pause() to get milliseconds, a duration string such as '30s', or { until: Date | number }, got ${describe(duration)}`,
  );
}
