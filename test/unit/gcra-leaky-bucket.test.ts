import { expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from './harness.js';

/**
 * docs/choose-an-algorithm.md, "Shopify": GCRA with a burst is the leaky bucket (as a meter).
 * The documented rule admits a request exactly when Shopify's bucket (40 requests, leaking 2
 * per second) has room, so both allow at most 41 in any (half-open) second.
 */

/** When each of `n` requests is admitted by a bucket of `size` leaking `perSecond`, asked as early as possible. */
function leakyBucket(size: number, perSecond: number, n: number): number[] {
  const at: number[] = [];
  let level = 0;
  let t = 0;
  for (let i = 0; i < n; i++) {
    // Room for one more once the level is size − 1 or less.
    const wait = Math.max(0, ((level - (size - 1)) / perSecond) * 1000);
    t += wait;
    level = Math.max(0, level - (wait * perSecond) / 1000) + 1;
    at.push(Math.round(t));
  }
  return at;
}

function maxInAnySecond(at: number[]): number {
  let best = 0;
  let j = 0;
  for (let i = 0; i < at.length; i++) {
    while (at[i]! - at[j]! >= 1000) j++;
    best = Math.max(best, i - j + 1);
  }
  return best;
}

it("the Shopify rule (2 per 1 s, burst 40) admits what Shopify's leaky bucket does: at most 41 in any second", async () => {
  const start = 1_700_000_000_000;
  const clock = new FakeClock(start);
  const valve = createValve({
    id: 'shopify:shop-1',
    clock,
    store: memoryStore({ clock }),
    rules: { limit: 2, interval: '1s', burst: 40 },
  });
  const at: number[] = [];
  const jobs = Array.from({ length: 60 }, () => valve.run(() => void at.push(clock.now() - start)));
  await clock.runAllAsync(60_000);
  await Promise.all(jobs);
  expect(at).toEqual(leakyBucket(40, 2, 60));
  expect(at.slice(38, 43)).toEqual([0, 0, 500, 1000, 1500]);
  expect(maxInAnySecond(at)).toBe(41);
  expect(maxInAnySecond(leakyBucket(40, 2, 60))).toBe(41);
});
