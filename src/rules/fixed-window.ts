/**
 * Fixed-window arithmetic in integer microseconds on the store's clock (see
 * docs/architecture.md, "The arithmetic"). Pure functions on numbers, so the memory
 * store can run them per job without allocating; the Redis Lua script mirrors them.
 *
 * Window k = floor(now / intervalUs) covers [k × intervalUs, (k + 1) × intervalUs).
 * State: (k, count). A state of another window counts as 0. A job of cost c fits
 * when count + c ≤ limit; otherwise it waits until the window ends.
 */

/** The index of the aligned window containing `nowUs`: floor(nowUs / intervalUs), exact for safe integers. */
export function windowIndex(nowUs: number, intervalUs: number): number {
  let k = Math.floor(nowUs / intervalUs);
  // Guard against the float division rounding up across a window edge.
  if (k * intervalUs > nowUs) k -= 1;
  return k;
}

/** The count spent in window `k`, given a stored (stateWindow, stateCount): 0 for any other window. */
export function windowCount(stateWindow: number, stateCount: number, k: number): number {
  return stateWindow === k ? stateCount : 0;
}

/** First µs after window `k`: (k + 1) × intervalUs. The state of window k may expire then. */
export function windowEnd(k: number, intervalUs: number): number {
  return (k + 1) * intervalUs;
}

/**
 * How long (µs) a job of `cost` must wait when `count` is already spent in window `k`:
 * 0 when count + cost ≤ limit, else the time until the window ends (exact: the job
 * fits in the next window, since a valid cost never exceeds the limit).
 */
export function windowWait(
  count: number,
  cost: number,
  limit: number,
  k: number,
  intervalUs: number,
  nowUs: number,
): number {
  return count + cost <= limit ? 0 : (k + 1) * intervalUs - nowUs;
}
