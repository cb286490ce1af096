/**
 * The memory store's fleet window records (window-record.ts, what wrapFetch's fleet window keeps
 * per id) are dropped once expired like every other state: the store's full sweep (once a
 * second, on Node's timers) drops them too, and each window call examines two other records
 * round-robin, skipping unexpired ones instead of stopping at the first. They used to stay for
 * good once window traffic stopped (≈18 MB for 50,000 keys).
 */
import { afterEach, expect, it, vi } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';

const held = (store: Store) => (store as unknown as { windows: { size: number } }).windows.size;

/** One request of `id` through the fleet window: its ticket, then its answer (`remaining`, reset in `resetMs`). */
function use(store: Store, id: string, remaining: number, resetMs: number): void {
  const t = store.windowSend!(id, 1000) as { seq: number };
  store.windowReport!(id, t.seq, remaining, resetMs);
}

afterEach(() => {
  vi.useRealTimers();
});

it('the full sweep drops every expired window record, with no call at all', () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
  const clock = new FakeClock();
  const store = memoryStore({ clock });
  for (let i = 0; i < 2000; i++) use(store, `k${i}`, 4999, 60_000);
  expect(held(store)).toBe(2000);
  // Kept 60 s past the window's reset: still there after 100 s, gone after 130 s.
  clock.advance(100_000);
  vi.advanceTimersByTime(1000);
  expect(held(store)).toBe(2000);
  clock.advance(30_000);
  vi.advanceTimersByTime(1000);
  expect(held(store)).toBe(0);
  // Nothing held: the sweep is not armed again.
  expect(vi.getTimerCount()).toBe(0);
});

it('each window call drops expired records of other ids, past an unexpired one', () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] }); // (the full sweep never runs here)
  const clock = new FakeClock();
  const store = memoryStore({ clock });
  // A daily quota's window first (unexpired for a day), then 100 keys of one-second windows.
  use(store, 'daily', 100, 86_400_000);
  for (let i = 0; i < 100; i++) use(store, `k${i}`, 5, 1000);
  clock.advance(600_000);
  for (let i = 0; i < 60; i++) store.windowSend!('hot', 1000);
  expect(held(store)).toBe(2); // 'daily' and 'hot'
});
