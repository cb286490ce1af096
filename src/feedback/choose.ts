import { echo, type Reader } from './reader.js';
import type { Candidate, FeedbackReading } from './types.js';

/**
 * A value given in whole seconds or coarser is coarse: a reset in whole seconds, and a window
 * length or a bucket's reset without its size when it is 1 s or longer (its length is its precision).
 */
const COARSE_MS = 1000;

/**
 * Whether `a` describes its limit more precisely than `b`: a finer granularity
 * (`retry-after-ms` over `Retry-After`, `64.57` over `65`); at equal granularity, a delta
 * over an absolute time (which the local clock's skew shifts); then the longer wait.
 */
function morePrecise(a: Candidate, b: Candidate): boolean {
  if (a.precisionMs !== b.precisionMs) return a.precisionMs < b.precisionMs;
  if (a.relative !== b.relative) return a.relative;
  return a.waitMs > b.waitMs;
}

/**
 * A coarse wait (`Retry-After: 1` on a 429, whole seconds) next to a window reset that states
 * the same wait in the same rounding (`t=1`, `x-ratelimit-reset: 1`) describes that reset, as
 * express-rate-limit and @fastify/rate-limit send them: when the window's earlier answers
 * tightened that reset (windows.ts), the tighter bound wins, so a 429 from a window that resets
 * 250 ms later does not pause a whole second. Any other pair (a different value, a different
 * precision, e.g. Discord's global Retry-After beside a bucket's Reset-After) stays two limits,
 * and the longest wait wins.
 */
function dropCoarseWait(byLimit: Map<string, Candidate>): void {
  let wait: Candidate | undefined;
  let waitKey = '';
  for (const [key, c] of byLimit) {
    if (c.model === 'wait' && c.precisionMs >= COARSE_MS) {
      wait = c;
      waitKey = key;
    }
  }
  if (wait === undefined) return;
  for (const c of byLimit.values()) {
    if (c.model !== 'window' || c.statedMs === undefined || c.waitMs >= wait.waitMs) continue;
    if (c.precisionMs === wait.precisionMs && c.relative && Math.abs(c.statedMs - wait.waitMs) < 1) {
      byLimit.delete(waitKey);
      return;
    }
  }
}

/**
 * Chooses the wait among the candidates the families offered, and caps it:
 * - among candidates that describe the same limit, the most precise wins; a coarse
 *   Retry-After whose bounds overlap a shorter window reset's is that reset (dropCoarseWait);
 * - across limits, the longest wait wins (every limit must be free again);
 * - the earliest the limits can be free is the largest lower bound of the limits' winners;
 * - a winner beyond `maxPause` is reported as 'capped' and the reading cut to `maxPause`.
 */
export function chooseWait(r: Reader, maxPause: number): FeedbackReading | undefined {
  const byLimit = new Map<string, Candidate>();
  for (const c of r.candidates) {
    const held = byLimit.get(c.limit);
    if (held === undefined || morePrecise(c, held)) byLimit.set(c.limit, c);
  }
  dropCoarseWait(byLimit);
  let best: Candidate | undefined;
  let lowerMs = 0;
  for (const c of byLimit.values()) {
    if (best === undefined || c.waitMs > best.waitMs) best = c;
    if (c.lowerMs > lowerMs) lowerMs = c.lowerMs;
    if (c.waitMs > maxPause) {
      r.ignore(c.header, c.raw, 'capped', { cappedTo: maxPause, requestedMs: c.waitMs });
    }
  }
  if (best === undefined) return undefined;
  r.chosenLimit = best.limit;
  const capped = best.waitMs > maxPause;
  const waitMs = capped ? maxPause : best.waitMs;
  return {
    waitMs,
    until: r.now + waitMs,
    source: best.source,
    header: best.header,
    raw: echo(best.raw),
    status: r.bag.status,
    model: best.model,
    earliest: r.now + Math.min(lowerMs, waitMs),
    coarse: best.precisionMs >= COARSE_MS,
    ...(capped ? { capped: true } : {}),
  };
}
