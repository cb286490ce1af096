/**
 * The rules of docs/choose-an-algorithm.md and docs/how-it-works.md, each in the valve it
 * configures. `options` carries the store (and, in tests, a virtual clock shared by the valve
 * and the store). test/acceptance/docs-examples.test.ts runs every valve here and checks the
 * start times each rule gives.
 */
import type { Store, ValveOptions } from '../src/index.js';
// #region shared-store
import { createValve, memoryStore } from '../src/index.js';
// #endregion shared-store

export type Setup = Partial<Pick<ValveOptions, 'store' | 'clock'>>;

/** GCRA with the default burst of 1. */
export function gcra(options: Setup = {}) {
  return createValve({
    id: 'example:gcra',
    // #region gcra
    rules: { limit: 10, interval: '1s' }, // one start every 100 ms, at most 10 in any second
    // #endregion gcra
    ...options,
  });
}

/** GCRA with a burst: a token bucket of 5 refilled at 10 per second. */
export function burst(options: Setup = {}) {
  return createValve({
    id: 'example:burst',
    // #region burst
    rules: { limit: 10, interval: '1s', burst: 5 }, // after a pause: 5 at once, then one every 100 ms
    // #endregion burst
    ...options,
  });
}

/** A provider's "100 per 10 s" with bursts of 10: limit = N - burst + 1. */
export function burstWithinQuota(options: Setup = {}) {
  return createValve({
    id: 'example:burst-within-quota',
    // #region burst-within-quota
    rules: { limit: 91, interval: '10s', burst: 10 }, // at most 100 in any 10 s, bursts of 10
    // #endregion burst-within-quota
    ...options,
  });
}

export function slidingWindow(options: Setup = {}) {
  return createValve({
    id: 'example:sliding-window',
    // #region sliding-window
    rules: { limit: 200, interval: '10s', algorithm: 'sliding-window' }, // at most 200 in any 10 s
    // #endregion sliding-window
    ...options,
  });
}

/** The rules of `npm run demo`: spaced starts, and the provider's sliding window. */
export function spreadAndSlidingWindow(options: Setup = {}) {
  return createValve({
    id: 'example:spread-and-sliding-window',
    // #region spread-and-sliding-window
    rules: [
      { limit: 25, interval: '1s' }, // spread: one start every 40 ms
      { limit: 200, interval: '10s', algorithm: 'sliding-window' }, // and the provider's "200 in any 10 s"
    ],
    // #endregion spread-and-sliding-window
    ...options,
  });
}

export function fixedWindow(options: Setup = {}) {
  return createValve({
    id: 'example:fixed-window',
    // #region fixed-window
    rules: { limit: 5000, interval: '1h', algorithm: 'fixed-window' }, // 5,000 per clock hour (UTC)
    // #endregion fixed-window
    ...options,
  });
}

/** Several rules: a job starts only when every one has room. */
export function severalRules(options: Setup = {}) {
  return createValve({
    id: 'example:several-rules',
    // #region several-rules
    rules: [
      { limit: 10, interval: '1s' }, // smooth: 10 per second
      { limit: 5000, interval: '1h', algorithm: 'fixed-window' }, // and 5,000 per clock hour
    ],
    // #endregion several-rules
    ...options,
  });
}

/** The same two rules, as docs/how-it-works.md shows them. */
export function twoAlgorithms(options: Setup = {}) {
  return createValve({
    id: 'example:two-algorithms',
    // #region two-algorithms
    rules: [
      { limit: 10, interval: '1s' }, // GCRA, burst 1
      { limit: 5000, interval: '1h', algorithm: 'fixed-window' }, // aligned hourly window
    ],
    // #endregion two-algorithms
    ...options,
  });
}

/** docs/how-it-works.md "Store": two valves share a budget through one store instance. */
export function sharedStore(rules: ValveOptions['rules']) {
  // #region shared-store
  const store = memoryStore();
  const search = createValve({ id: 'github:app-42', rules, store });
  const sync = createValve({ id: 'github:app-42', rules, store }); // same budget as `search`
  const other = createValve({ id: 'github:app-42', rules }); // a private store: a separate budget
  // #endregion shared-store
  return { search, sync, other };
}

/** docs/how-it-works.md "Id": one id per provider credential. */
export function ids(rules: ValveOptions['rules'], store: Store, accountId: string) {
  // #region ids
  const hubspot = createValve({ id: 'hubspot:portal-123', rules, store });
  const github = createValve({ id: 'github:app-42', rules, store });
  const stripe = createValve({ id: `stripe:${accountId}`, rules, store });
  // #endregion ids
  return [hubspot, github, stripe];
}
