/**
 * The declaration blocks of docs/api.md (interfaces, type aliases, class and function
 * signatures), each in a `#region` of the `Doc` namespace below, written as the page shows them,
 * and checked at compile time (`npm run typecheck`) against the types the package exports.
 *
 * The check is `Equal`, TypeScript's identity relation (the same members, optionality,
 * `readonly`, parameter and return types, type parameters and their constraints and defaults),
 * not mere assignability: a member the page leaves out, or a `readonly` it forgets, fails it
 * too. It is sound for every declaration here, none of which is overloaded. Classes are compared
 * by their instance types: the page shows no constructors (user code catches these errors, it
 * does not make them). The namespace is ambient (`declare`), so function and constant
 * declarations need no body, and inside it a name the page declares (`Valve`, `Store`, `Clock`…)
 * means the page's declaration, the other names the package's exports imported here.
 *
 * api-docs.test.ts checks that every region has its entry in `checked`.
 */

import type * as valve from '../../src/index.js';
import type {
  AcquireRequest,
  AcquireResult,
  FeedbackReading,
  FetchLike,
  JobContext,
  MaybePromise,
  RedisStoreOptions,
  RunOptions,
  ValveEventName,
  ValveListener,
  ValveOptions,
  ValveStats,
  WakeEvent,
  WakeStatus,
  WindowTicket,
  WrapFetchOptions,
} from '../../src/index.js';

/** True when A and B are identical types (not only assignable to each other). */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;

declare namespace Doc {
  // #region createValve
  function createValve(options: ValveOptions): Valve;
  // #endregion createValve

  // #region rule
  interface Rule {
    limit: number;
    interval: number | string;
    algorithm?: 'gcra' | 'fixed-window' | 'sliding-window';
    burst?: number;
  }
  // #endregion rule

  // #region precision
  type Precision = 'timer' | 'spin';
  // #endregion precision

  // #region concurrency
  type ConcurrencyOption =
    | number
    | { limit: number; scope?: 'local' }
    | { limit: number; scope: 'global'; leaseTtl?: number | string };
  // #endregion concurrency

  // #region valve
  interface Valve {
    readonly id: string;
    run<T>(job: (ctx: JobContext) => T | PromiseLike<T>, options?: RunOptions): Promise<Awaited<T>>;
    wrap<A extends unknown[], R>(
      fn: (...args: A) => R | PromiseLike<R>,
      options?: RunOptions,
    ): (...args: A) => Promise<Awaited<R>>;
    wrapFetch<F extends FetchLike = typeof fetch>(
      fetch?: F,
      options?: WrapFetchOptions<Parameters<F>[0], Parameters<F>[1]>,
    ): F;
    observe(input: unknown): FeedbackReading | undefined;
    pause(duration: number | string | { until: Date | number }): Promise<void>;
    resume(): Promise<void>;
    setRules(rules: Rule | readonly Rule[]): Promise<void>;
    stats(): ValveStats;
    on<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
    once<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
    off<E extends ValveEventName>(event: E, listener: ValveListener<E>): this;
    close(options?: { drain?: boolean }): Promise<void>;
  }
  // #endregion valve

  // #region valve-error
  class ValveError extends Error {
    readonly name: string; // 'ValveError'
    readonly code: ValveErrorCode;
    // cause: the underlying error, where there is one
  }
  type ValveErrorCode =
    | 'QUEUE_FULL'
    | 'MAX_WAIT'
    | 'STORE_UNAVAILABLE'
    | 'LEASE_LOST'
    | 'CLOSED'
    | 'VALVE_REDIS_TIMEOUT'; // never a job's rejection: see RedisStoreTimeoutError
  // #endregion valve-error

  // #region is-valve-error
  function isValveError<C extends ValveErrorCode = ValveErrorCode>(
    err: unknown,
    code?: C,
  ): err is ValveError & { readonly code: C };
  // #endregion is-valve-error

  // #region memory-store
  function memoryStore(options?: { clock?: Clock }): Store;
  // #endregion memory-store

  // #region redis-store
  function redisStore(options: RedisStoreOptions): Store;
  // #endregion redis-store

  // #region redis-store-timeout-error
  class RedisStoreTimeoutError extends ValveError {
    readonly name: string; // 'RedisStoreTimeoutError'
    readonly code: 'VALVE_REDIS_TIMEOUT';
  }
  // #endregion redis-store-timeout-error

  // #region store
  interface Store {
    acquire(request: AcquireRequest): MaybePromise<AcquireResult>;
    pause(id: string, ms: number, by?: string): MaybePromise<number>; // → the pause's end, epoch ms
    resume(id: string): MaybePromise<void>;
    renew(id: string, tokens: readonly string[], ttl: number): MaybePromise<boolean[]>;
    release(id: string, tokens: readonly string[]): MaybePromise<void>;
    subscribe?(
      id: string,
      onWake: (event: WakeEvent) => void,
      onStatus?: (status: WakeStatus) => void, // { listening: boolean; error?: unknown }
    ): () => void;
    windowSend?(id: string, probeTtl: number): MaybePromise<WindowTicket>;
    windowReport?(id: string, seq: number, remaining: number, resetMs: number): MaybePromise<number>;
    readonly notifies?: boolean;
    listening?(id: string): boolean;
  }
  // #endregion store

  // #region clock
  interface Clock {
    now(): number; // epoch ms, may carry a fraction
    setTimeout(fn: () => void, ms: number): unknown; // fractional ms allowed; never fires early
    setPreciseTimeout?(fn: () => void, ms: number): unknown; // optional: fires within µs of its target
    clearTimeout(handle: unknown): void; // cancels either kind of timer
  }
  const systemClock: Clock;
  // #endregion clock
}

/** One entry per region above: its declarations are identical to the package's. */
export const checked = {
  createValve: true satisfies Equal<typeof Doc.createValve, typeof valve.createValve>,
  rule: true satisfies Equal<Doc.Rule, valve.Rule>,
  precision: true satisfies Equal<Doc.Precision, valve.Precision>,
  concurrency: true satisfies Equal<Doc.ConcurrencyOption, valve.ConcurrencyOption>,
  valve: true satisfies Equal<Doc.Valve, valve.Valve>,
  'valve-error':
    (true satisfies Equal<Doc.ValveError, valve.ValveError>) &&
    (true satisfies Equal<Doc.ValveErrorCode, valve.ValveErrorCode>),
  'is-valve-error': true satisfies Equal<typeof Doc.isValveError, typeof valve.isValveError>,
  'memory-store': true satisfies Equal<typeof Doc.memoryStore, typeof valve.memoryStore>,
  'redis-store': true satisfies Equal<typeof Doc.redisStore, typeof valve.redisStore>,
  'redis-store-timeout-error': true satisfies Equal<Doc.RedisStoreTimeoutError, valve.RedisStoreTimeoutError>,
  store: true satisfies Equal<Doc.Store, valve.Store>,
  clock:
    (true satisfies Equal<Doc.Clock, valve.Clock>) &&
    (true satisfies Equal<typeof Doc.systemClock, typeof valve.systemClock>),
};
