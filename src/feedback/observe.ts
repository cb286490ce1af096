import type { ValveInternals } from '../feedback-port.js';
import { nextBackoff, resetBackoff } from './backoff.js';
import { readBag } from './headers.js';
import { toHeaderBag } from './input.js';
import { feedbackState } from './state.js';
import type { FeedbackReading, HeaderBag, ParsedFeedback, WindowSeen } from './types.js';

export type {
  FeedbackIgnored,
  FeedbackModel,
  FeedbackReading,
  IgnoredReason,
} from './types.js';

/**
 * wrapFetch with a fleet window (feedback/fleet.ts): what observe() read of the response's window
 * is put here, and a pause read from a window is left to wrapFetch.
 */
export interface FleetObservation {
  window: WindowSeen | undefined;
  /** The window's pause observe() did not write (the fleet's record decides it). */
  held?: FeedbackReading | undefined;
  /**
   * A 429 whose only wait is coarse (`Retry-After: 1`, whole seconds: an upper bound) and that
   * describes no window: the fleet probes the provider instead of waiting the bound out
   * (feedback/fleet.ts). Set together with `held`.
   */
  coarse?: FeedbackReading | undefined;
}

/**
 * Reads provider feedback from a fetch `Response`, a `Headers`, `{ status, headers }`
 * (or `{ statusCode, headers }`), or a bare header object, and returns what it read at
 * once (or undefined). A usable wait is written as a shared pause in the background
 * through `valve.pauseInBackground` (a failed write becomes 'store-error' in the engine
 * and is not retried). Values that were not used as sent are reported one by one with
 * the 'feedback-ignored' event. Never throws on header values; throws TypeError when
 * `input` is not an object.
 *
 * `attempt` (wrapFetch only) is the response's attempt number from feedbackState(valve).begin():
 * a remaining count no larger than the attempts started after it and still in flight is then
 * read as spent, and coarse resets are tightened by the earlier responses of the same window.
 */
export function observe(
  valve: ValveInternals,
  input: unknown,
  attempt?: number,
  fleet?: FleetObservation,
): FeedbackReading | undefined {
  let bag: HeaderBag;
  try {
    bag = toHeaderBag(input);
  } catch (err) {
    if (err instanceof TypeError && (input === null || typeof input !== 'object')) throw err;
    valve.emit('feedback-ignored', {
      header: '',
      value: err instanceof Error ? err.message : String(err),
      reason: 'unreadable-input',
      status: undefined,
    });
    return undefined;
  }
  const settings = valve.feedback;
  const now = valve.clock.now();
  let parsed: ParsedFeedback;
  try {
    const state = feedbackState(valve);
    // Only a response of wrapFetch (an attempt) is read in the light of the ones before it:
    // observe() alone sees one response and pauses until the reset it states.
    parsed = readBag(bag, {
      now,
      maxPause: settings.maxPause,
      ...(attempt === undefined ? {} : { windows: state.windows, ahead: state.ahead(attempt) }),
    });
  } catch (err) {
    // The parser is written not to throw; this is a last line of defence.
    valve.emit('feedback-ignored', {
      header: '',
      value: err instanceof Error ? err.message : String(err),
      reason: 'unreadable-input',
      status: bag.status,
    });
    parsed = { status: bag.status, reading: undefined, ignored: [], needsBackoff: bag.status === 429 };
  }
  for (const item of parsed.ignored) valve.emit('feedback-ignored', item);

  let reading = parsed.reading;
  const status = parsed.status;
  if (parsed.needsBackoff) {
    const step = nextBackoff(valve, settings, now, valve.pauseWaiters);
    reading = {
      waitMs: step.waitMs,
      until: now + step.waitMs,
      source: 'backoff',
      header: undefined,
      raw: undefined,
      status,
      model: 'backoff',
      earliest: now + step.waitMs,
      coarse: false,
      attempt: step.attempt,
    };
  } else if (status !== undefined && status >= 200 && status < 400) {
    resetBackoff(valve);
    const state = feedbackState(valve);
    state.probes = 0;
    state.probeBound = Number.POSITIVE_INFINITY;
  }
  if (fleet !== undefined) {
    fleet.window = parsed.window;
    // The fleet's record decides a window's pause (wrapFetch writes it once the store answers).
    if (parsed.fromWindow === true && reading === parsed.reading) {
      fleet.held = reading;
      return reading;
    }
    // A 429 with only a coarse wait (whole seconds), whose rounding may be most of it
    // (`Retry-After: 1` or `2`): an upper bound the fleet probes instead of waiting out. A longer
    // one is waited out: a probe would save at most a third of it, and servers that state long
    // waits (GitHub's secondary limits) ask not to be retried before them. So is a Retry-After
    // sent beside rate-limit headers: a provider that describes its limits states the wait it
    // means (Anthropic: "earlier retries will fail").
    if (
      status === 429 &&
      !hasLimitHeaders(bag.headers) &&
      reading !== undefined &&
      reading === parsed.reading &&
      parsed.window === undefined &&
      reading.model === 'wait' &&
      reading.coarse &&
      reading.capped !== true &&
      reading.until - reading.earliest >= (reading.until - now) / 2
    ) {
      fleet.held = reading;
      fleet.coarse = reading;
      return reading;
    }
  }
  if (reading && reading.waitMs > 0) valve.pauseInBackground(reading.waitMs, reading.source, reading);
  return reading;
}

/** Whether a response carries any rate-limit header besides Retry-After (names are lower case). */
function hasLimitHeaders(headers: HeaderBag['headers']): boolean {
  for (const name of headers.keys()) {
    if (name.includes('ratelimit') || name.includes('rate-limit')) return true;
  }
  return false;
}
