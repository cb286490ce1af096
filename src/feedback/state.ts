import { WindowBounds } from './windows.js';

/**
 * What the feedback module remembers per valve between responses: the window bounds learnt
 * from its responses (windows.ts) and wrapFetch's attempts in flight, in start order, so that
 * each response knows how many requests were sent after it and are not yet answered.
 */
export class FeedbackState {
  readonly windows = new WindowBounds();
  /** Attempts in flight, by start number, in start order (a Set keeps insertion order). */
  private readonly inFlight = new Set<number>();
  private started = 0;
  /**
   * Probes of a coarse wait that got a 429 since the last success (feedback/fleet.ts): each one
   * doubles the next probe's delay.
   */
  probes = 0;
  /**
   * The tightest upper bound (valve clock, epoch ms) the coarse 429s since the last success
   * stated: no probe waits past it. Infinity when none.
   */
  probeBound = Number.POSITIVE_INFINITY;
  /**
   * Requests of this valve waiting for a fleet-window ticket (feedback/fleet.ts): woken when this
   * valve reports a probe's answer, or an answer after which the window has budget left.
   */
  readonly ticketWaiters = new Set<() => void>();
  /**
   * How long the provider usually takes to answer (ms, from the fetch call to its response; a
   * moving average of the answers that are not 429 or 503): how long a probe's answer would keep
   * the others waiting (feedback/fleet.ts, probeTtl). Undefined until the first answer.
   */
  answerMs: number | undefined = undefined;
  /** When this valve last asked the fleet's window for a ticket or reported an answer (valve clock). */
  windowCallAt = Number.NEGATIVE_INFINITY;

  /** An attempt starts: returns its start number. */
  begin(): number {
    const n = this.started++;
    this.inFlight.add(n);
    return n;
  }

  /**
   * Attempts started after `attempt` and still in flight: requests the provider may not have
   * counted when it answered `attempt`. Walks the attempts in flight (as many as run at once).
   */
  ahead(attempt: number): number {
    let before = 0;
    for (const n of this.inFlight) {
      if (n >= attempt) break;
      before++;
    }
    return Math.max(0, this.inFlight.size - before - (this.inFlight.has(attempt) ? 1 : 0));
  }

  /** An answer (not a 429 or 503) came `ms` after its request was sent: the moving average moves a quarter of the way. */
  noteAnswer(ms: number): void {
    this.answerMs = this.answerMs === undefined ? ms : this.answerMs + (ms - this.answerMs) / 4;
  }

  /** An attempt ended (answered or failed). */
  end(attempt: number): void {
    this.inFlight.delete(attempt);
  }
}

const states = new WeakMap<object, FeedbackState>();

/** The feedback state of a valve (created on first use; dropped with the valve). */
export function feedbackState(valve: object): FeedbackState {
  let state = states.get(valve);
  if (state === undefined) {
    state = new FeedbackState();
    states.set(valve, state);
  }
  return state;
}
