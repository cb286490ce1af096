import type { ValveOptions } from '../../src/options.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireRequest, Store } from '../../src/stores/store.js';
import { createValve, type Valve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';

export { FakeClock, flushMicrotasks };

/** A store wrapper that records every call (and can be told to fail or to answer asynchronously). */
export interface SpyStore extends Store {
  calls: { op: string; args: unknown[] }[];
  acquires: { count: number; costs: number[]; at: number }[];
  /** When set, the next calls of that operation throw/reject with it (cleared by setting undefined). */
  fail: Partial<Record<'acquire' | 'pause' | 'resume' | 'renew' | 'release', unknown>>;
  /** Answer every call through a promise resolved after `delay` ms of the clock (0: a microtask). */
  async: { delay: number } | null;
}

export function spyStore(inner: Store, clock: FakeClock): SpyStore {
  const spy: SpyStore = {
    calls: [],
    acquires: [],
    fail: {},
    async: null,
    acquire(request: AcquireRequest) {
      spy.calls.push({ op: 'acquire', args: [request] });
      spy.acquires.push({
        count: request.count,
        costs: request.costs.slice(0, request.count),
        at: clock.now(),
      });
      return answer('acquire', () => inner.acquire(request));
    },
    pause(id, ms) {
      spy.calls.push({ op: 'pause', args: [id, ms] });
      return answer('pause', () => inner.pause(id, ms));
    },
    resume(id) {
      spy.calls.push({ op: 'resume', args: [id] });
      return answer('resume', () => inner.resume(id));
    },
    renew(id, tokens, ttl) {
      spy.calls.push({ op: 'renew', args: [id, [...tokens], ttl] });
      return answer('renew', () => inner.renew(id, tokens, ttl));
    },
    release(id, tokens) {
      spy.calls.push({ op: 'release', args: [id, [...tokens]] });
      return answer('release', () => inner.release(id, tokens));
    },
    subscribe: inner.subscribe ? (id, onWake) => inner.subscribe!(id, onWake) : undefined,
    get notifies() {
      return inner.notifies;
    },
  } as SpyStore;
  // biome-ignore lint/suspicious/noExplicitAny: generic pass-through
  function answer(op: keyof SpyStore['fail'], call: () => any): any {
    const failure = spy.fail[op];
    if (spy.async === null) {
      if (failure !== undefined) throw failure;
      return call();
    }
    const { delay } = spy.async;
    return new Promise((resolve, reject) => {
      const settle = () => {
        if (failure !== undefined) reject(failure);
        else {
          try {
            resolve(call());
          } catch (err) {
            reject(err);
          }
        }
      };
      if (delay === 0) queueMicrotask(settle);
      else clock.setTimeout(settle, delay);
    });
  }
  return spy;
}

export function count(spy: SpyStore, op: string): number {
  return spy.calls.filter((c) => c.op === op).length;
}

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
  const store = spyStore(memoryStore({ clock }), clock);
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
