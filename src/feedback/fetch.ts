import type { ValveInternals } from '../internal.js';

// biome-ignore lint/suspicious/noExplicitAny: fetch implementations (global, undici) differ in their argument types
export type FetchLike = (input: any, init?: any) => Promise<any>;

export interface WrapFetchOptions<I = string | URL | Request, N = RequestInit> {
  /** Retries after a 429 (or a 503 with Retry-After). Default 3. */
  retries?: number;
  /** Cost of each attempt: a number, or a function of the request. Default 1. */
  cost?: number | ((input: I, init: N | undefined) => number);
  /** Queue priority of every attempt. Default 0. */
  priority?: number;
}

/** Wraps fetch so that each attempt is a job of the valve (placeholder; retries to come). */
export function wrapFetch<F extends FetchLike = typeof fetch>(
  valve: ValveInternals,
  fetchFn?: F,
  options?: WrapFetchOptions<Parameters<F>[0], Parameters<F>[1]>,
): F {
  const fn = (fetchFn ?? globalThis.fetch) as F;
  const wrapped = (input: Parameters<F>[0], init?: Parameters<F>[1]) =>
    valve.runAt(() => fn(input, init), { cost: 1, priority: options?.priority ?? 0 }, undefined);
  return wrapped as unknown as F;
}
