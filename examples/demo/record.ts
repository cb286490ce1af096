/** What the demo records while it runs: the figures behind the live view, the summary and the SVG. */

export interface Pause {
  /** Demo clock (ms since the run started). */
  from: number;
  to: number;
  source: string;
}

export class Recorder {
  /** Start of every attempt (its grant, on the store's clock), ms since the run started, ascending. */
  readonly starts: number[] = [];
  /** When each induced 429 reached the caller, ms since the run started. */
  readonly retries: number[] = [];
  readonly pauses: Pause[] = [];
  succeeded = 0;
  failed = 0;
  /** Messages of failed requests (first few). */
  readonly failures: string[] = [];
  private readonly origin: number;

  constructor(private readonly clock: () => number = () => performance.now()) {
    this.origin = clock();
  }

  /** Ms since the run started. */
  elapsed(): number {
    return this.clock() - this.origin;
  }

  /** Converts a performance.now() reading to run time. */
  fromClock(t: number): number {
    return t - this.origin;
  }

  /** Converts an epoch-ms time (as in 'pause' events) to run time. */
  fromEpoch(epochMs: number): number {
    return epochMs - performance.timeOrigin - this.origin;
  }

  /** Records one start at run time `at` (default: now). */
  start(at = this.elapsed()): void {
    this.starts.push(at);
  }

  fail(message: string): void {
    this.failed++;
    if (this.failures.length < 5) this.failures.push(message);
  }

  /** Records a pause; an extension of the current one moves its end. */
  pause(untilEpochMs: number, source: string): void {
    const now = this.elapsed();
    const to = this.fromEpoch(untilEpochMs);
    const last = this.pauses.at(-1);
    if (last && last.to >= now) last.to = Math.max(last.to, to);
    else this.pauses.push({ from: now, to, source });
  }

  /** Ends the current pause early (resume()). */
  resume(): void {
    const last = this.pauses.at(-1);
    const now = this.elapsed();
    if (last && last.to > now) last.to = now;
  }

  /** Starts in the trailing `spanMs` before `at`: (at − span, at]. */
  startsInLast(spanMs: number, at = this.elapsed()): number {
    let n = 0;
    for (let i = this.starts.length - 1; i >= 0 && this.starts[i]! > at - spanMs; i--) n++;
    return n;
  }
}

/** The largest number of `times` (ascending) inside any half-open window [t, t + span). */
export function busiest(times: readonly number[], span: number): number {
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < times.length; hi++) {
    while (times[hi]! - times[lo]! >= span) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}
