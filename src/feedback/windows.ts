/**
 * What one valve learns about its provider's windows across responses (one instance per valve,
 * kept by feedback/state.ts). Pure: `now` and the attempts' order come from the caller.
 *
 * A reset sent in whole seconds (`t=1`, `x-ratelimit-reset: 1`, an epoch second) is rounded up:
 * it bounds the true reset from above. Every response of one provider window states a bound of
 * the same reset, so the bounds intersect: the first response of a window, answered a few ms
 * after the window opened, already bounds its reset within those few ms. When the window's last
 * unit is spent, the pause lasts until the tightest upper bound seen in that window, not until
 * the rounded value of the last response.
 *
 * A window is told from the next one by its count: within one window, the remaining count only
 * goes down (responses can come back out of order, which only makes it look like a new window:
 * the bound then starts again from that response, a looser and still true bound). A response
 * received after the window's upper bound is from a new window. A late answer from an older
 * window, read as one of the current window, can only lengthen the pause (never shorten it
 * below the current window's own bound): such answers are not told apart, since telling them
 * by the order of their requests would also drop the pause of an answer that merely came back
 * out of order, and a missed pause costs 429s.
 */

interface WindowBound {
  /** Tightest upper bound of the window's reset seen so far (epoch ms, valve clock). */
  upperAt: number;
  /** The lowest remaining count seen in this window. */
  remaining: number;
}

/**
 * How far (ms) past a window's bound a response's reset may lie, beyond its own precision, and
 * still be read as the same window's: the time the answer spent on its way back.
 */
export const SAME_WINDOW_SLACK_MS = 1000;

/** The most limits (header and policy pairs) one valve tracks; a provider sends a handful. */
const MAX_TRACKED = 64;

export class WindowBounds {
  private readonly windows = new Map<string, WindowBound>();

  /**
   * Records the reset a response stated for one limit (`key`: the limit and the header that
   * stated it), `upperMs` from `now` to within `precisionMs`, with the remaining count beside
   * it. Returns the tightest
   * upper bound of the reset known for this window, in ms from `now` (≤ `upperMs`, > 0).
   */
  tighten(key: string, remaining: number, upperMs: number, now: number, precisionMs: number): number {
    const upperAt = now + upperMs;
    const held = this.windows.get(key);
    // A reset that cannot lie in the held window (its lower bound, less a round trip's slack, is
    // past the held bound) is another window's: the next one, or another limit that sends the
    // same headers (GitHub's core and search). It starts its own bound.
    if (
      held !== undefined &&
      now < held.upperAt &&
      upperAt - precisionMs - SAME_WINDOW_SLACK_MS <= held.upperAt
    ) {
      if (remaining <= held.remaining) {
        if (upperAt < held.upperAt) held.upperAt = upperAt;
        held.remaining = remaining;
        return held.upperAt - now;
      }
    }
    if (held === undefined && this.windows.size >= MAX_TRACKED) this.windows.clear();
    this.windows.set(key, { upperAt, remaining });
    return upperMs;
  }
}
