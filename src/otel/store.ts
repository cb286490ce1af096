import { type Attributes, type Histogram, type Meter, ROOT_CONTEXT } from '@opentelemetry/api';
import type { Clock } from '../clock.js';
import { describe } from '../duration.js';
import { isThenable } from '../maybe-promise.js';
import { ACQUIRE_WITH, type AcquireRequest, type AcquireWith, type Store } from '../stores/store.js';
import { checkOptions, errorType, type MetricsOptions, STORE_BUCKETS } from './instruments.js';

/*
 * instrumentStore(): a Store that times every call of the store it wraps
 * (valve.store.operation.duration, with error.type when the call failed). A synchronous store
 * (memory) stays synchronous; subscribe(), notifies and listening() pass through untimed.
 */

/** The options of instrumentStore(). */
export interface InstrumentStoreOptions extends MetricsOptions {
  /** Where durations are read (ms): a valve Clock, or anything with now(). Default: performance.now(). */
  clock?: Pick<Clock, 'now'> | undefined;
}

type Operation = 'acquire' | 'pause' | 'resume' | 'renew' | 'release';

const byMeter = new WeakMap<Meter, Histogram>();

function durationHistogram(meter: Meter): Histogram {
  let found = byMeter.get(meter);
  if (found === undefined) {
    found = meter.createHistogram('valve.store.operation.duration', {
      description:
        'Duration of store calls (acquire, pause, resume, renew, release), with error.type when one failed.',
      unit: 's',
      advice: { explicitBucketBoundaries: STORE_BUCKETS },
    });
    byMeter.set(meter, found);
  }
  return found;
}

const performanceClock = { now: () => performance.now() };

/**
 * Wraps `store` so that every call is timed into `valve.store.operation.duration`. Give the
 * result to createValve() or createValveGroup() as their `store`. With no meter provider
 * registered (and no `meter` given), returns `store` itself.
 */
export function instrumentStore(store: Store, options?: InstrumentStoreOptions): Store {
  if (
    typeof store !== 'object' ||
    store === null ||
    typeof store.acquire !== 'function' ||
    typeof store.pause !== 'function'
  ) {
    throw new TypeError(
      `Expected instrumentStore()'s first argument to be a Store (memoryStore(), redisStore(), or your own), got ${describe(store)}`,
    );
  }
  const o = checkOptions(options, 'instrumentStore()', ['clock']);
  const clock = (options as InstrumentStoreOptions | undefined)?.clock ?? performanceClock;
  if (typeof clock !== 'object' || clock === null || typeof clock.now !== 'function') {
    throw new TypeError(`Expected \`clock\` to be an object with now(), got ${describe(clock)}`);
  }
  if (o.meter === null) return store;
  const histogram = durationHistogram(o.meter);
  const base = o.attributes;
  const includeId = o.includeId;
  /** Attributes by operation, id (with includeId) and error.type: made once each. */
  const cache = new Map<string, Attributes>();
  const attributes = (operation: Operation, id: string, error: string | undefined): Attributes => {
    const key = `${operation}\0${includeId ? id : ''}\0${error ?? ''}`;
    let found = cache.get(key);
    if (found === undefined) {
      found = { ...base, 'valve.store.operation.name': operation };
      if (includeId) found['valve.id'] = id;
      if (error !== undefined) found['error.type'] = error;
      // With includeId the cache would grow with the ids: keep only the id-free ones.
      if (!includeId) cache.set(key, found);
    }
    return found;
  };
  const record = (
    operation: Operation,
    id: string,
    startedAt: number,
    error: unknown,
    failed: boolean,
  ): void => {
    // A metric that cannot be recorded never changes the store's answer.
    try {
      const seconds = Math.max(0, clock.now() - startedAt) / 1000;
      histogram.record(
        seconds,
        attributes(operation, id, failed ? errorType(error) : undefined),
        ROOT_CONTEXT,
      );
    } catch {}
  };
  function timed<A extends unknown[], R>(
    operation: Operation,
    call: (...args: A) => R,
    idOf: (...args: A) => string,
  ) {
    return (...args: A): R => {
      const startedAt = clock.now();
      let result: R;
      try {
        result = call(...args);
      } catch (err) {
        record(operation, idOf(...args), startedAt, err, true);
        throw err;
      }
      if (isThenable(result)) {
        return (result as PromiseLike<unknown>).then(
          (value) => {
            record(operation, idOf(...args), startedAt, undefined, false);
            return value;
          },
          (err: unknown) => {
            record(operation, idOf(...args), startedAt, err, true);
            throw err;
          },
        ) as R;
      }
      record(operation, idOf(...args), startedAt, undefined, false);
      return result;
    };
  }
  const byId = (id: string) => id;
  const wrapped: Store = {
    acquire: timed(
      'acquire',
      (r: AcquireRequest) => store.acquire(r),
      (r) => r.id,
    ),
    pause: timed('pause', (id: string, ms: number, by?: string) => store.pause(id, ms, by), byId),
    resume: timed('resume', (id: string) => store.resume(id), byId),
    renew: timed(
      'renew',
      (id: string, tokens: readonly string[], ttl: number) => store.renew(id, tokens, ttl),
      byId,
    ),
    release: timed('release', (id: string, tokens: readonly string[]) => store.release(id, tokens), byId),
    get notifies() {
      return store.notifies;
    },
  };
  // The store's callback form of acquire (the Redis store's; see ACQUIRE_WITH), timed too: a
  // valve then makes no promise per call through the wrapper either.
  const acquireWith = (store.acquire as { [ACQUIRE_WITH]?: AcquireWith })[ACQUIRE_WITH];
  if (typeof acquireWith === 'function') {
    const timedWith: AcquireWith = (request, onAnswer, onFail) => {
      const startedAt = clock.now();
      const id = typeof request === 'object' && request !== null ? request.id : '';
      acquireWith.call(
        store,
        request,
        (result) => {
          record('acquire', id, startedAt, undefined, false);
          onAnswer(result);
        },
        (err) => {
          record('acquire', id, startedAt, err, true);
          onFail(err);
        },
      );
    };
    Object.defineProperty(wrapped.acquire, ACQUIRE_WITH, { value: timedWith });
  }
  // The fleet window (wrapFetch uses it only when a store has both): passed through, untimed.
  if (typeof store.windowSend === 'function' && typeof store.windowReport === 'function') {
    wrapped.windowSend = store.windowSend.bind(store);
    wrapped.windowReport = store.windowReport.bind(store);
  }
  if (typeof store.subscribe === 'function') wrapped.subscribe = store.subscribe.bind(store);
  if (typeof store.listening === 'function') wrapped.listening = store.listening.bind(store);
  return wrapped;
}
