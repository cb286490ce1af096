import type { ValveOptions } from '../../src/options.js';
import type { Valve } from '../../src/types.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';
import { type SpyStore, spyMemoryStore } from '../helpers/spy-store.js';

export { FakeClock, flushMicrotasks };

export interface Setup {
  clock: FakeClock;
  store: SpyStore;
  valve: Valve;
}

/** A valve over a spied memory store, both on one FakeClock. */
export function setup(
  options: Omit<ValveOptions, 'id' | 'clock' | 'store'> & { id?: string },
  clock = new FakeClock(),
): Setup {
  const store = spyMemoryStore(clock);
  const valve = createValve({ id: 'test', ...options, clock, store });
  return { clock, store, valve };
}

/** Settles-tracker: records whether a promise fulfilled or rejected, without unhandled rejections. */
export function track<T>(promise: Promise<T>): { done: boolean; value?: T; error?: unknown; ok?: boolean } {
  const state: { done: boolean; value?: T; error?: unknown; ok?: boolean } = { done: false };
  promise.then(
    (value) => {
      state.done = true;
      state.ok = true;
      state.value = value;
    },
    (error: unknown) => {
      state.done = true;
      state.ok = false;
      state.error = error;
    },
  );
  return state;
}
