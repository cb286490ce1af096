import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireRequest, AcquireResult, BlockReason, Store } from '../../src/stores/store.js';
import type { FakeClock } from './fake-clock.js';

/**
 * The one store spy of the scheduler tests: a Store over an inner store (a memoryStore on the
 * test's FakeClock by default) that records every call and can be told to fail, to answer
 * asynchronously (after a delay of the clock, deciding mid-flight like a network store, or only
 * when the test says so), or to answer acquire() from a script.
 */

export type StoreOp = 'acquire' | 'pause' | 'resume' | 'renew' | 'release';

/**
 * How an operation answers. null: synchronously. `{ delay }`: after `delay` ms of the clock (0: in
 * a microtask); the inner store decides when the answer is sent, or `decideAt` ms after the call
 * (0: during the call itself). 'manual': the inner store decides during the call and the answer
 * waits in `pending` until the test settles it.
 */
export type Timing = { delay: number; decideAt?: number } | 'manual' | null;

/** One acquire() as the spy saw it (times on the FakeClock, ms). */
export interface AcquireCall {
  count: number;
  /** The costs of the call's jobs (a copy). */
  costs: number[];
  /** When the call was made. */
  at: number;
  /** When the answer was decided (the answer's `now`). */
  decidedAt?: number;
  /** When the answer reached the valve. */
  repliedAt?: number;
  granted?: number;
  retryAfter?: number;
  blocked?: BlockReason | null;
  /** The ticket the call carried (the line of turns), undefined when it took no part. */
  turn?: number | undefined;
  /** The answer's ticket (the one held after the call), if any. */
  held?: number | undefined;
}

/** A call answered 'manual'ly, waiting for the test. */
export interface PendingCall {
  readonly op: StoreOp;
  /** acquire() only: how many jobs it asked for, and their costs. */
  readonly count: number;
  readonly costs: number[];
  /** Answers with `result`, or with the inner store's answer when omitted. */
  resolve(result?: unknown): void;
  reject(err: unknown): void;
}

export interface SpyStore extends Store {
  /** Every call, in order, with copies of its arguments. */
  calls: { op: StoreOp; args: unknown[] }[];
  /** Every acquire() and its answer. */
  acquires: AcquireCall[];
  /** When set, the calls of that operation throw/reject with it (read when the call is made). */
  fail: Partial<Record<StoreOp, unknown>>;
  /** How every operation answers (see Timing); `timing` overrides it per operation. */
  async: Timing;
  timing: Partial<Record<StoreOp, Timing>>;
  /** Calls answered 'manual'ly and not settled yet, oldest first. */
  pending: PendingCall[];
  /** The most acquire() calls ever in flight at once. */
  maxInFlight: number;
}

export interface SpyStoreOptions {
  /** Answers acquire() instead of the inner store: `answer(request, i)` for the i-th call (0-based). */
  acquire?: (request: AcquireRequest, i: number) => AcquireResult;
  /** Synchronous answers only: the clock moves this many ms during each acquire(), deciding halfway. */
  syncCost?: number;
  /** Asynchronous answers only: acquire() calls after this many never answer (a re-ask loop then ends). */
  maxAcquires?: number;
}

export function spyStore(inner: Store, clock: FakeClock, options: SpyStoreOptions = {}): SpyStore {
  const { syncCost = 0, maxAcquires = Number.POSITIVE_INFINITY } = options;
  let acquiresInFlight = 0;
  const spy: SpyStore = {
    calls: [],
    acquires: [],
    fail: {},
    async: null,
    timing: {},
    pending: [],
    maxInFlight: 0,
    acquire(request: AcquireRequest) {
      // The valve reuses its request object; the store call owns a copy while in flight.
      const costs = request.costs.slice(0, request.count);
      const copy: AcquireRequest = { ...request, costs };
      spy.calls.push({ op: 'acquire', args: [copy] });
      const call: AcquireCall = { count: request.count, costs, at: clock.now(), turn: request.turn };
      const i = spy.acquires.length;
      spy.acquires.push(call);
      const decide = (): AcquireResult => {
        const r = (options.acquire ? options.acquire(copy, i) : inner.acquire(copy)) as AcquireResult;
        if (typeof r === 'object' && r !== null) {
          call.decidedAt = typeof r.now === 'number' ? r.now : clock.now();
          call.granted = r.granted;
          call.retryAfter = r.retryAfter;
          call.blocked = r.blocked;
          call.held = r.turn;
        }
        return r;
      };
      const timing = timingOf('acquire');
      if (timing === null) {
        if (spy.fail.acquire !== undefined) throw spy.fail.acquire;
        clock.jump(syncCost / 2);
        const r = decide();
        clock.jump(syncCost / 2);
        call.repliedAt = clock.now();
        return r;
      }
      if (i >= maxAcquires) return new Promise<AcquireResult>(() => {});
      acquiresInFlight++;
      spy.maxInFlight = Math.max(spy.maxInFlight, acquiresInFlight);
      return later('acquire', decide, copy.count, costs, timing, () => {
        acquiresInFlight--;
        call.repliedAt = clock.now();
      });
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

  function timingOf(op: StoreOp): Timing {
    const own = spy.timing[op];
    return own === undefined ? spy.async : own;
  }

  // biome-ignore lint/suspicious/noExplicitAny: generic pass-through
  function answer(op: StoreOp, decide: () => any): any {
    const timing = timingOf(op);
    if (timing === null) {
      if (spy.fail[op] !== undefined) throw spy.fail[op];
      return decide();
    }
    return later(op, decide, 0, [], timing, () => {});
  }

  /** An asynchronous answer: decided and sent as `timing` says; `replied` runs just before it settles. */
  function later<T>(
    op: StoreOp,
    decide: () => T,
    count: number,
    costs: number[],
    timing: Exclude<Timing, null>,
    replied: () => void,
  ): Promise<T> {
    const failure = spy.fail[op];
    return new Promise<T>((resolve, reject) => {
      const send = (get: () => T) => {
        replied();
        if (failure !== undefined) {
          reject(failure);
          return;
        }
        try {
          resolve(get());
        } catch (err) {
          reject(err);
        }
      };
      if (timing === 'manual') {
        let decided: { value: T } | { error: unknown };
        try {
          decided = { value: decide() };
        } catch (error) {
          decided = { error };
        }
        const get = (): T => {
          if ('error' in decided) throw decided.error;
          return decided.value;
        };
        spy.pending.push({
          op,
          count,
          costs,
          resolve: (result?: unknown) => send(result === undefined ? get : () => result as T),
          reject: (err: unknown) => {
            replied();
            reject(err);
          },
        });
        return;
      }
      const { delay, decideAt } = timing;
      if (decideAt === undefined || decideAt >= delay) {
        if (delay === 0) queueMicrotask(() => send(decide));
        else clock.setTimeout(() => send(decide), delay);
        return;
      }
      const decideThenSend = () => {
        const value = decide();
        clock.setTimeout(() => send(() => value), delay - decideAt);
      };
      if (decideAt === 0) {
        const value = decide();
        clock.setTimeout(() => send(() => value), delay);
      } else clock.setTimeout(decideThenSend, decideAt);
    });
  }

  return spy;
}

/** A spy over a fresh memoryStore on `clock`. */
export function spyMemoryStore(clock: FakeClock, options?: SpyStoreOptions): SpyStore {
  return spyStore(memoryStore({ clock }), clock, options);
}

/** How many calls of `op` the spy saw. */
export function count(spy: SpyStore, op: StoreOp): number {
  return spy.calls.filter((c) => c.op === op).length;
}

/** A store that is `inner` with some of its methods replaced (the rest delegate to it). */
export function storeWith(inner: Store, replace: Partial<Store>): Store {
  return {
    acquire: (r) => inner.acquire(r),
    pause: (id, ms, by) => inner.pause(id, ms, by),
    resume: (id) => inner.resume(id),
    renew: (id, t, ttl) => inner.renew(id, t, ttl),
    release: (id, t) => inner.release(id, t),
    subscribe: (id, onWake, onStatus) => inner.subscribe!(id, onWake, onStatus),
    ...replace,
  };
}

/**
 * `store` with its acquire() calls counted: a Proxy, so that every other method and property
 * (subscribe, listening, notifies, the fleet window's) is the store's own, bound to it.
 */
export function countingAcquires(store: Store): { store: Store; acquires: () => number } {
  let n = 0;
  const proxy = new Proxy(store, {
    get(target, key) {
      const value = Reflect.get(target, key, target) as unknown;
      if (key === 'acquire') {
        return (...args: unknown[]) => {
          n++;
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: proxy, acquires: () => n };
}
