import { describe } from './duration.js';
import type { AcquireResult } from './stores/store.js';

/*
 * What a store's answer to acquire() must look like before the admission room acts on it. A
 * custom store, or a script reading state it did not write, may answer nonsense: a negative or
 * non-finite hint would make the valve ask again at once, in a loop, and a `granted` beyond
 * the call or a fraction would start jobs the store never counted. Such an answer is a store
 * failure (a 'store-error', the usual backoff, onStoreError as for a thrown error).
 */

/**
 * Checks the answer `r` to a call that asked for `n` jobs (with a lease each when `global`).
 * Returns the TypeError that makes it a store failure, or undefined when it is usable.
 */
export function checkAcquireAnswer(r: unknown, n: number, global: boolean): TypeError | undefined {
  if (typeof r !== 'object' || r === null) return invalid(`${describe(r)}, not an object`);
  const { granted, retryAfter, now, pausedUntil, leases, turn } = r as AcquireResult;
  if (typeof granted !== 'number' || !Number.isInteger(granted) || granted < 0 || granted > n) {
    return invalid(`granted ${describe(granted)}, not an integer from 0 to ${n} (the jobs asked for)`);
  }
  if (typeof now !== 'number' || !Number.isFinite(now)) {
    return invalid(`now ${describe(now)}, not a finite epoch time in ms`);
  }
  if (granted < n && (typeof retryAfter !== 'number' || !(retryAfter >= 0) || !Number.isFinite(retryAfter))) {
    return invalid(
      `retryAfter ${describe(retryAfter)} with ${granted} of ${n} granted, not a finite number of ms ≥ 0`,
    );
  }
  if (pausedUntil !== null && pausedUntil !== undefined) {
    if (typeof pausedUntil !== 'number' || !Number.isFinite(pausedUntil)) {
      return invalid(`pausedUntil ${describe(pausedUntil)}, not null or a finite epoch time in ms`);
    }
  }
  if (global && granted > 0 && (!Array.isArray(leases) || leases.length < granted)) {
    return invalid(
      `${granted} granted with ${Array.isArray(leases) ? leases.length : describe(leases)} leases`,
    );
  }
  // A ticket is sent back with the next call: it must be one the store can read again.
  if (turn !== undefined && (typeof turn !== 'number' || !Number.isSafeInteger(turn) || turn < 0)) {
    return invalid(`turn ${describe(turn)}, not absent or an integer ≥ 0 (a ticket in the id's line)`);
  }
  return undefined;
}

function invalid(what: string): TypeError {
  return new TypeError(`store.acquire() returned an invalid result: ${what}`);
}
