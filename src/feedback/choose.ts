import { echo, type Reader } from './reader.js';
import type { Candidate, FeedbackReading } from './types.js';

/**
 * Chooses the wait among the candidates the families offered and caps it:
 * the longest wait wins; every candidate beyond `maxPause` is reported as 'capped',
 * and the reading is cut to `maxPause`.
 */
export function chooseWait(r: Reader, maxPause: number): FeedbackReading | undefined {
  let best: Candidate | undefined;
  for (const c of r.candidates) if (!best || c.waitMs > best.waitMs) best = c;
  for (const c of r.candidates) {
    if (c.waitMs > maxPause) {
      r.ignore(c.header, c.raw, 'capped', { cappedTo: maxPause, requestedMs: c.waitMs });
    }
  }
  if (!best) return undefined;
  const capped = best.waitMs > maxPause;
  const waitMs = capped ? maxPause : best.waitMs;
  return {
    waitMs,
    until: r.now + waitMs,
    source: best.source,
    header: best.header,
    raw: echo(best.raw),
    status: r.bag.status,
    ...(capped ? { capped: true } : {}),
  };
}
