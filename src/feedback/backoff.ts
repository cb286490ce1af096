import type { FeedbackSettings } from '../feedback-port.js';

/**
 * Exponential backoff after a 429 that carried no usable wait, kept per valve.
 *
 * - The n-th header-less 429 in a row pauses `min(backoffInitial × 2^(n-1), backoffMax, maxPause)`.
 * - A 429 that arrives while the backoff pause it belongs to is still running (a request that
 *   was already in flight when the pause began) does not escalate: it reports the time left.
 *   Once the valve learns that pause is gone (it ran out; resume() here; another process's
 *   resume() heard as a wake-up or found by a store answer: the valve calls pauseWaiters), it
 *   is over: the next header-less 429 is the next step.
 * - Any success (status 200–399) resets the sequence; 429s with a usable header, and other
 *   statuses, leave it as it is.
 * - No jitter: the pause is shared through the store, so processes do not retry in a herd;
 *   each process escalates on its own 429s and the store keeps the longest pause.
 */
export interface BackoffStep {
  readonly waitMs: number;
  /** 1 for the first header-less 429 in a row. */
  readonly attempt: number;
  /** True when this 429 fell inside the running backoff pause and did not escalate it. */
  readonly repeated: boolean;
}

interface BackoffState {
  /** Header-less 429s in a row so far. */
  level: number;
  /** End of the last backoff pause (valve clock, epoch ms); -Infinity once that pause was deleted. */
  until: number;
  /** Registered in the valve's pauseWaiters: the valve's pause is gone, so the backoff pause is over. */
  readonly ended: () => void;
}

const states = new WeakMap<object, BackoffState>();

function state(key: object): BackoffState {
  let s = states.get(key);
  if (!s) {
    const created: BackoffState = {
      level: 0,
      until: Number.NEGATIVE_INFINITY,
      ended: () => {
        created.until = Number.NEGATIVE_INFINITY;
      },
    };
    s = created;
    states.set(key, s);
  }
  return s;
}

/**
 * The next backoff wait for the valve identified by `key`, at `now`. `pauseWaiters` (the valve's:
 * called when it learns its pause is gone) ends the backoff pause with the valve's pause.
 */
export function nextBackoff(
  key: object,
  settings: FeedbackSettings,
  now: number,
  pauseWaiters?: Set<() => void>,
): BackoffStep {
  const s = state(key);
  if (now < s.until && s.level > 0) {
    return { waitMs: s.until - now, attempt: s.level, repeated: true };
  }
  const initial = Math.max(0, settings.backoffInitial);
  const cap = Math.max(0, Math.min(settings.backoffMax, settings.maxPause));
  // 2^level overflows to Infinity for large levels; min() keeps it at the cap.
  const waitMs = Math.min(cap, initial * 2 ** s.level);
  s.level += 1;
  s.until = now + waitMs;
  // One entry per valve (a Set): emptied when it is called.
  pauseWaiters?.add(s.ended);
  return { waitMs, attempt: s.level, repeated: false };
}

/** Forgets the backoff sequence (after a success). */
export function resetBackoff(key: object): void {
  const s = states.get(key);
  if (s) {
    s.level = 0;
    s.until = Number.NEGATIVE_INFINITY;
  }
}

/** Header-less 429s in a row so far (for tests and stats). */
export function backoffLevel(key: object): number {
  return states.get(key)?.level ?? 0;
}
