/*
 * The conformance suite's time helpers (src/testing/suite.ts): values in ms compared at µs
 * resolution, waiting for a condition, and the deadlines the suite puts on every store call,
 * makeStore(), advance() and cleanup, so that a store that never answers fails a case, names
 * the call, and lets the process end.
 */
import { AssertionError } from 'node:assert';
import { describe as describeValue } from '../duration.js';
import type { MaybePromise, Store } from '../stores/store.js';
import { expect } from './expect.js';

export const sleep = (ms: number): Promise<void> => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * µs resolution: two ms values from the store agree when they round to the same µs. Both must be
 * finite numbers (NaN or Infinity from a store never agrees with anything, itself included).
 */
export function expectMs(actual: number, expected: number): void {
  for (const [value, which] of [
    [actual, 'the store'],
    [expected, 'the expected value'],
  ] as const) {
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      throw new AssertionError({
        message: `expected a finite number of ms from ${which}, got ${describeValue(value)}`,
        actual,
        expected,
        operator: 'expectMs',
      });
    }
  }
  expect(Math.round(actual * 1000), `${actual} ms in µs`).toBe(Math.round(expected * 1000));
}

/**
 * Waits (polling every 2 ms) until `check()` holds; after `timeoutMs`, fails naming `what` it
 * waited for (a string, or a function for a message that says what was seen by then).
 */
export async function waitFor(
  check: () => boolean,
  what: string | (() => string),
  timeoutMs = 2000,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) {
      throw new Error(
        `timed out after ${seconds(timeoutMs)} waiting for ${typeof what === 'function' ? what() : what}`,
      );
    }
    await sleep(2);
  }
}

/** A duration for a message: "5 s", "1.5 s", "300 ms". */
export function seconds(ms: number): string {
  return ms >= 1000 ? `${Math.round(ms / 100) / 10} s` : `${Math.round(ms)} ms`;
}

/** A store call (or makeStore(), advance(), a cleanup) in flight: what it is and when it began. */
export interface Pending {
  what: string;
  since: number;
  timer: ReturnType<typeof setTimeout>;
}

/**
 * Runs `run` and gives what it returns `ms` to settle: past that, the promise rejects with an
 * error naming `what` (the call itself is left to settle or not; its outcome is ignored).
 */
export function within<T>(
  what: string,
  ms: number,
  run: () => MaybePromise<T>,
  pending?: Set<Pending>,
): Promise<T> {
  let result: MaybePromise<T>;
  try {
    result = run();
  } catch (err) {
    return Promise.reject(err);
  }
  if (typeof (result as { then?: unknown } | null)?.then !== 'function') return Promise.resolve(result);
  return new Promise<T>((resolve, reject) => {
    const entry: Pending = {
      what,
      since: Date.now(),
      timer: setTimeout(() => {
        pending?.delete(entry);
        reject(new Error(`${what} did not settle within ${seconds(ms)} (the suite's \`callTimeout\`)`));
      }, ms),
    };
    pending?.add(entry);
    const settle = () => {
      clearTimeout(entry.timer);
      pending?.delete(entry);
    };
    Promise.resolve(result).then(
      (value) => {
        settle();
        resolve(value);
      },
      (err: unknown) => {
        settle();
        reject(err);
      },
    );
  });
}

/** The store's methods that the suite calls and awaits: each gets the call deadline. */
const CALLS = new Set<PropertyKey>([
  'acquire',
  'pause',
  'resume',
  'renew',
  'release',
  'windowSend',
  'windowReport',
]);

/**
 * The store as the cases see it: its awaited methods under the call deadline, every other
 * property read live from the store (e.g. `notifies`), its other methods bound to it.
 */
export function guarded(
  store: Store,
  timed: <T>(what: string, run: () => MaybePromise<T>) => Promise<T>,
): Store {
  const target = store as unknown as Record<PropertyKey, unknown>;
  return new Proxy({} as Store, {
    get: (_, prop) => {
      const value = target[prop];
      if (typeof value !== 'function') return value;
      if (!CALLS.has(prop)) return value.bind(store);
      return (...args: unknown[]) =>
        timed(`store.${String(prop)}()`, () => (value as (...a: unknown[]) => unknown).apply(store, args));
    },
    has: (_, prop) => prop in target,
  });
}
