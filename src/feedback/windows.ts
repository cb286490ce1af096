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
 * received after the window's upper bound is from a new window. A response of an attempt started
 * before the attempt that opened the current window comes from an older window: it neither
 * bounds the current reset nor pauses.
 */

interface WindowBound {
  /** Tightest upper bound of the window's reset seen so far (epoch ms, valve clock). */
  upperAt: number;
  /** The lowest remaining count seen in this window. */
  remaining: number;
  /** The attempt whose response opened this window (start order); -1 when unknown. */
  openedBy: number;
}

/** Stale: the response is from an older window than the one known; it gives no wait. */
export const STALE = -1;

/** The most limits (header and policy pairs) one valve tracks; a provider sends a handful. */
const MAX_TRACKED = 64;

export class WindowBounds {
  private readonly windows = new Map<string, WindowBound>();

  /**
   * Records the reset a response stated for one limit (`key`: the limit and the header that
   * stated it), `upperMs` from `now`, with the remaining count beside it; `attempt` is the
   * response's attempt in start order (undefined when unknown). Returns the tightest upper
   * bound of the reset known for this window, in ms from `now` (≤ `upperMs`, ≥ 0), or STALE.
   */
  tighten(key: string, remaining: number, upperMs: number, now: number, attempt?: number): number {
    const upperAt = now + upperMs;
    const seq = attempt ?? -1;
    const held = this.windows.get(key);
    if (held !== undefined && now < held.upperAt) {
      if (seq >= 0 && held.openedBy >= 0 && seq < held.openedBy) return STALE;
      if (remaining <= held.remaining) {
        if (upperAt < held.upperAt) held.upperAt = upperAt;
        held.remaining = remaining;
        return held.upperAt - now;
      }
    }
    if (held === undefined && this.windows.size >= MAX_TRACKED) this.windows.clear();
    this.windows.set(key, { upperAt, remaining, openedBy: seq });
    return upperMs;
  }
}
