import type { ValveInternals } from '../internal.js';

/** What observe() read from a response (placeholder; completed in headers.ts). */
export interface FeedbackReading {
  readonly waitMs: number;
  readonly until: number;
  readonly source: 'retry-after' | 'ratelimit-header' | 'backoff';
  readonly header: string | undefined;
  readonly raw: string | undefined;
  readonly status: number | undefined;
  readonly capped?: boolean;
}

/**
 * Reads provider feedback from a fetch Response, a Headers, or `{ status, headers }`,
 * returns what it read at once (or undefined) and writes the pause in the background.
 */
export function observe(valve: ValveInternals, input: unknown): FeedbackReading | undefined {
  void valve;
  void input;
  return undefined;
}
