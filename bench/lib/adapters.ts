/**
 * One small interface for every limiter in the benchmark. Each adapter maps the same
 * `LimiterOptions` onto its library's closest configuration and is documented with that mapping.
 */
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import pLimit from 'p-limit';
import PQueue from 'p-queue';
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterRes } from 'rate-limiter-flexible';
import { nowMs } from './common.js';
import { referenceAdapter } from './reference.js';
import { redisReferenceAdapter, roundTripReferenceAdapter } from './reference-redis.js';
import { loadOtel, loadValve, type ValveGroupLike, type ValveLike } from './valve-module.js';

export interface LimiterOptions {
  /** Jobs per interval. */
  readonly limit: number;
  readonly intervalMs: number;
  /** GCRA burst (jobs that may start at once); peers without a burst concept use burst 1 spacing. */
  readonly burst: number;
  /** Local concurrency; unlimited when absent. */
  readonly concurrency?: number | undefined;
  /** Redis-backed peers: the server's port and the shared limiter id. */
  readonly redis?: { readonly port: number; readonly id: string } | undefined;
  /** valve only: record each grant's store-clock time (epoch ms) here. */
  readonly grantLog?: number[] | undefined;
  /** valve only: jobs per store call (default 32). */
  readonly batch?: number | undefined;
}

export interface Adapter {
  readonly name: string;
  setup(options: LimiterOptions): Promise<void>;
  /** Runs `fn` under the limiter; resolves when it has run. */
  schedule(fn: () => void): Promise<unknown>;
  /** Stops the limiter: queued jobs are dropped (their promises may reject) and connections closed. */
  teardown(): Promise<void>;
}

/** A never-binding rule in every library's terms (for throughput and overhead scenarios). */
export const NEVER_BINDS: LimiterOptions = { limit: 1_000_000_000, intervalMs: 1000, burst: 1_000_000_000 };

const redisClient = (port: number): Redis => {
  const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
  client.on('error', () => {});
  return client;
};

/** One connection per process and port, shared by every limiter of that process (many ids, one client). */
const shared = new Map<number, { client: Redis; users: number }>();

function sharedClient(port: number): Redis {
  let entry = shared.get(port);
  if (!entry) {
    entry = { client: redisClient(port), users: 0 };
    shared.set(port, entry);
  }
  entry.users++;
  return entry.client;
}

/** valve-redis's store per port (one per process), dropped with the port's client. */
const storesByPort = new Map<number, unknown>();

function releaseClient(port: number): void {
  const entry = shared.get(port);
  if (entry && --entry.users === 0) {
    shared.delete(port);
    storesByPort.delete(port);
    entry.client.disconnect();
  }
}

// ---------------------------------------------------------------------------------------------- valve

/**
 * A clock with plain Node timers (millisecond granularity, never early): valve's `clock` option,
 * to compare valve's own clock (which may wake more precisely) in the same run.
 */
const timerClock = {
  now: nowMs,
  setTimeout(fn: () => void, ms: number): unknown {
    const target = nowMs() + ms;
    const handle: { t: ReturnType<typeof setTimeout> | null } = { t: null };
    const check = (): void => {
      const left = target - nowMs();
      if (left > 0) handle.t = setTimeout(check, left);
      else fn();
    };
    handle.t = setTimeout(check, ms);
    return handle;
  },
  clearTimeout(handle: unknown): void {
    const t = (handle as { t: ReturnType<typeof setTimeout> | null }).t;
    if (t !== null) clearTimeout(t);
  },
};

/**
 * valve over its memory store, or (with `redis`) over redisStore through ioredis. With
 * `plainTimers`, valve (and its memory store) run on `timerClock` instead of the default clock;
 * `batch` overrides valve's default of 32 jobs per store call; `precision: 'spin'` is valve's
 * precise option (`valve-spin`). With `sliding`, the rule is a
 * sliding window of `limit` per `intervalMs` (burst ignored: the whole limit may start at once);
 * a limit above the sliding window's cap (10,000, e.g. NEVER_BINDS) becomes 10,000 per 1 ms,
 * which never binds either. With `otel`, the store is wrapped by valve/otel's instrumentStore()
 * and the valve instrumented: 'sdk' with a meter provider registered (valve-otel),
 * 'sdk-attributes' the same with one attribute (`valve.name`) on every data point, 'none'
 * with no meter provider (valve-otel-none: both calls then do nothing).
 */
function valveAdapter(
  name: string,
  useRedis: boolean,
  plainTimers = false,
  batch?: number,
  sliding = false,
  otel?: 'sdk' | 'sdk-attributes' | 'none',
  precision?: 'spin',
): Adapter {
  let valve: ValveLike | undefined;
  let port: number | undefined;
  return {
    name,
    async setup(o) {
      const mod = await loadValve();
      let store: unknown;
      if (useRedis) {
        if (!o.redis) throw new Error(`${name} needs a Redis server`);
        if (!mod.redisStore) throw new Error('redisStore is not exported yet');
        port = o.redis.port;
        // One store per process and port, shared by every valve (as a service holds one store
        // for all its valves: admissions of many ids go out together); BENCH_STORE_PER_VALVE=1
        // gives each valve its own store on the shared client, as before 2026-12-02.
        const client = sharedClient(port);
        if (process.env.BENCH_STORE_PER_VALVE === '1') store = mod.redisStore({ client, prefix: 'bench' });
        else {
          store = storesByPort.get(port) ?? mod.redisStore({ client, prefix: 'bench' });
          storesByPort.set(port, store);
        }
      } else {
        store = plainTimers ? mod.memoryStore({ clock: timerClock }) : mod.memoryStore();
      }
      if (o.grantLog) store = logGrants(store as GrantSource, o.grantLog);
      const instrumentation = otel === undefined ? undefined : await loadOtel(otel !== 'none');
      // As docs/metrics.md suggests: a name for the valve (one attribute), the store wrapped once.
      const attributes = otel === 'sdk-attributes' ? { attributes: { 'valve.name': 'bench' } } : {};
      if (instrumentation) store = instrumentation.instrumentStore(store);
      valve = mod.createValve({
        id: o.redis?.id ?? 'bench',
        rules: [
          !sliding
            ? { limit: o.limit, interval: o.intervalMs, burst: o.burst }
            : o.limit > 10_000
              ? { limit: 10_000, interval: 1, algorithm: 'sliding-window' as const }
              : { limit: o.limit, interval: o.intervalMs, algorithm: 'sliding-window' as const },
        ],
        store,
        ...(o.concurrency !== undefined ? { concurrency: o.concurrency } : {}),
        ...((o.batch ?? batch) !== undefined ? { batch: o.batch ?? batch } : {}),
        ...(plainTimers ? { clock: timerClock } : {}),
        ...(precision !== undefined ? { precision } : {}),
      });
      instrumentation?.instrument(valve, attributes);
      (valve as unknown as { on(event: string, listener: () => void): void }).on('store-error', () => {
        acquireStats.storeErrors++;
      });
    },
    schedule: (fn) => valve!.run(fn),
    async teardown() {
      await valve?.close({ drain: false }).catch(() => {});
      if (port !== undefined) releaseClient(port);
      port = undefined;
    },
  };
}

/**
 * valve-group: one createValveGroup() per process (and store), shared by every adapter of the
 * process; each adapter is one key (its `redis.id`, or 'bench'). Over the memory store, or with
 * `redis` over redisStore through the process's one ioredis client (no subscriber, like
 * valve-redis). What a group adds to each job: the key's lookup.
 */
const groups = new Map<string, { group: ValveGroupLike; users: number }>();

function groupAdapter(name: string, useRedis: boolean): Adapter {
  let slot: string | undefined;
  let group: ValveGroupLike | undefined;
  let key = 'bench';
  return {
    name,
    async setup(o) {
      const mod = await loadValve();
      if (!mod.createValveGroup) throw new Error('createValveGroup is not exported by this valve');
      if (useRedis && !o.redis) throw new Error(`${name} needs a Redis server`);
      key = o.redis?.id ?? 'bench';
      slot = `${useRedis ? o.redis!.port : 'memory'}:${o.limit}:${o.intervalMs}:${o.burst}:${o.batch ?? ''}`;
      let entry = groups.get(slot);
      if (!entry) {
        const store = useRedis
          ? countCalls(
              mod.redisStore!({ client: sharedClient(o.redis!.port), prefix: 'bench' }) as GrantSource,
            )
          : undefined;
        entry = {
          group: mod.createValveGroup({
            rules: [{ limit: o.limit, interval: o.intervalMs, burst: o.burst }],
            ...(store ? { store } : {}),
            ...(o.batch !== undefined ? { batch: o.batch } : {}),
          }),
          users: 0,
        };
        entry.group.on('store-error', () => {
          acquireStats.storeErrors++;
        });
        groups.set(slot, entry);
      }
      entry.users++;
      group = entry.group;
    },
    schedule: (fn) => group!.run(key, fn),
    async teardown() {
      const entry = slot === undefined ? undefined : groups.get(slot);
      if (entry && --entry.users === 0) {
        groups.delete(slot!);
        await entry.group.close().catch(() => {});
        if (useRedis) releaseClient(Number(slot!.split(':')[0]));
      }
      slot = undefined;
    },
  };
}

/**
 * The store with its acquire calls counted in acquireStats.calls (every other member inherited
 * unchanged): store calls per job, without a promise or a log per call.
 */
function countCalls(inner: GrantSource): unknown {
  const counted = Object.create(inner) as GrantSource;
  const acquire = (request: unknown): unknown => {
    acquireStats.calls++;
    return inner.acquire(request);
  };
  // The store's acquire may carry its callback form under a symbol (valve's internal
  // ACQUIRE_WITH, which a valve uses instead of the promise when present): counted too, so
  // that the wrapper does not send valve down the promise path a store passed as it is never
  // takes (until 2026-12-02 it did: a promise, its reaction and a microtask more per call).
  const own = inner.acquire as unknown as Record<symbol, unknown>;
  for (const symbol of Object.getOwnPropertySymbols(own)) {
    const form = own[symbol];
    if (typeof form !== 'function') continue;
    Object.defineProperty(acquire, symbol, {
      value: function (this: unknown, ...args: unknown[]): unknown {
        acquireStats.calls++;
        return (form as (...a: unknown[]) => unknown).apply(this, args);
      },
    });
  }
  counted.acquire = acquire;
  return counted;
}

interface Granted {
  readonly granted: number;
  readonly now: number;
}

interface GrantSource {
  acquire(request: unknown): unknown;
}

/**
 * Wraps a store so that every grant's time on the store's clock (`AcquireResult.now`) is logged:
 * the times the Guarantees page measures bounds on. Everything else passes through unchanged.
 */
/** Store calls made through logGrants() in this process, and how many of them granted nothing. */
export const acquireStats = { calls: 0, empty: 0, storeErrors: 0 };

/**
 * `BENCH_CALL_LOG=1`: every store call of this process is also kept as one row (sent and answered
 * on the local clock, ticket sent, jobs asked, granted, ticket held after, hint, store clock; ms),
 * written by the worker as JSON lines to `BENCH_CALL_LOG_DIR` (default the temp dir) at its end.
 */
export const callLog: number[][] | undefined = process.env.BENCH_CALL_LOG === '1' ? [] : undefined;

interface Asked {
  readonly count: number;
  readonly turn?: number;
}

interface Answered extends Granted {
  readonly turn?: number;
  readonly retryAfter: number;
}

function logGrants(inner: GrantSource, log: number[]): unknown {
  const record = (result: Granted): Granted => {
    acquireStats.calls++;
    if (result.granted === 0) acquireStats.empty++;
    for (let k = 0; k < result.granted; k++) log.push(result.now);
    return result;
  };
  const row = (request: Asked, sentAt: number, result: Granted): Granted => {
    const r = result as Answered;
    callLog!.push([
      sentAt,
      nowMs(),
      request.turn ?? -1,
      request.count,
      r.granted,
      r.turn ?? -1,
      r.retryAfter,
      r.now,
    ]);
    return record(result);
  };
  const acquire = (request: unknown): unknown => {
    const sentAt = callLog === undefined ? 0 : nowMs();
    const result = inner.acquire(request) as Granted | PromiseLike<Granted>;
    if (typeof (result as PromiseLike<Granted>).then === 'function') {
      if (callLog !== undefined) {
        return (result as PromiseLike<Granted>).then((r) => row(request as Asked, sentAt, r));
      }
      return (result as PromiseLike<Granted>).then(record);
    }
    if (callLog !== undefined) return row(request as Asked, sentAt, result as Granted);
    return record(result as Granted);
  };
  return new Proxy(inner as object, {
    get(target, key) {
      if (key === 'acquire') return acquire;
      const value = Reflect.get(target, key, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

// ---------------------------------------------------------------------------------------------- p-limit

/** p-limit: concurrency only (rate options ignored): the floor of a promise scheduler's overhead. */
function pLimitAdapter(): Adapter {
  let limit: ReturnType<typeof pLimit> | undefined;
  return {
    name: 'p-limit',
    async setup(o) {
      limit = pLimit(o.concurrency ?? Number.POSITIVE_INFINITY);
    },
    schedule: (fn) => limit!(fn),
    async teardown() {
      limit?.clearQueue();
    },
  };
}

// ---------------------------------------------------------------------------------------------- p-queue

/**
 * p-queue, timer-spaced: `intervalCap = burst` jobs per `interval = burst × intervalMs / limit`
 * (for burst 1 at 1000/s: one job per 1 ms window).
 */
function pQueueAdapter(): Adapter {
  let queue: PQueue | undefined;
  return {
    name: 'p-queue',
    async setup(o) {
      queue = new PQueue({
        concurrency: o.concurrency ?? Number.POSITIVE_INFINITY,
        intervalCap: o.burst,
        interval: (o.burst * o.intervalMs) / o.limit,
      });
    },
    schedule: (fn) => queue!.add(fn),
    async teardown() {
      queue?.clear();
      queue?.pause();
    },
  };
}

/** p-queue strict mode: `limit` jobs in any sliding `intervalMs` window (its own sliding-window algorithm). */
function pQueueStrictAdapter(): Adapter {
  let queue: PQueue | undefined;
  return {
    name: 'p-queue-strict',
    async setup(o) {
      queue = new PQueue({
        concurrency: o.concurrency ?? Number.POSITIVE_INFINITY,
        intervalCap: Math.min(o.limit, Number.MAX_SAFE_INTEGER),
        interval: o.intervalMs,
        strict: true,
      });
    },
    schedule: (fn) => queue!.add(fn),
    async teardown() {
      queue?.clear();
      queue?.pause();
    },
  };
}

// ---------------------------------------------------------------------------------------------- Bottleneck

/**
 * Bottleneck: `minTime = intervalMs / limit` (burst 1 spacing; Bottleneck has no burst), local or
 * clustered through ioredis (`datastore: 'ioredis'`, all processes share `id`).
 */
function bottleneckAdapter(name: string, useRedis: boolean): Adapter {
  let limiter: Bottleneck | undefined;
  let connection: Bottleneck.IORedisConnection | undefined;
  return {
    name,
    async setup(o) {
      const base: Bottleneck.ConstructorOptions = {
        maxConcurrent: o.concurrency ?? null,
        minTime: o.intervalMs / o.limit,
      };
      if (useRedis) {
        if (!o.redis) throw new Error(`${name} needs a Redis server`);
        connection = new Bottleneck.IORedisConnection({
          clientOptions: { port: o.redis.port, host: '127.0.0.1' },
        });
        connection.on('error', () => {});
        limiter = new Bottleneck({ ...base, id: o.redis.id, datastore: 'ioredis', connection });
        await limiter.ready();
      } else {
        limiter = new Bottleneck(base);
      }
      limiter.on('error', () => {});
    },
    schedule: (fn) => limiter!.schedule(async () => fn()),
    async teardown() {
      await limiter?.stop({ dropWaitingJobs: true }).catch(() => {});
      await connection?.disconnect(false).catch(() => {});
    },
  };
}

/**
 * Bottleneck's Group: one `Bottleneck.Group` per process (shared by every adapter of the process;
 * each adapter is one key, its `redis.id`), clustered through one ioredis connection
 * (`datastore: 'ioredis'`), `minTime = intervalMs / limit` like the Bottleneck adapter. The
 * group creates each key's limiter on first use (`group.key(key)`), with its own Redis state.
 */
const bottleneckGroups = new Map<
  string,
  { group: Bottleneck.Group; connection: Bottleneck.IORedisConnection; users: number }
>();

function bottleneckGroupAdapter(): Adapter {
  let slot: string | undefined;
  let key = 'bench';
  let group: Bottleneck.Group | undefined;
  return {
    name: 'bottleneck-group-redis',
    async setup(o) {
      if (!o.redis) throw new Error('bottleneck-group-redis needs a Redis server');
      key = o.redis.id;
      slot = `${o.redis.port}:${o.limit}:${o.intervalMs}`;
      let entry = bottleneckGroups.get(slot);
      if (!entry) {
        const connection = new Bottleneck.IORedisConnection({
          clientOptions: { port: o.redis.port, host: '127.0.0.1' },
        });
        connection.on('error', () => {});
        const g = new Bottleneck.Group({
          id: 'bench-group',
          datastore: 'ioredis',
          connection,
          maxConcurrent: o.concurrency ?? null,
          minTime: o.intervalMs / o.limit,
        });
        g.on('error', () => {});
        entry = { group: g, connection, users: 0 };
        bottleneckGroups.set(slot, entry);
      }
      entry.users++;
      group = entry.group;
    },
    schedule: (fn) => group!.key(key).schedule(async () => fn()),
    async teardown() {
      const entry = slot === undefined ? undefined : bottleneckGroups.get(slot);
      if (entry && --entry.users === 0) {
        bottleneckGroups.delete(slot!);
        await Promise.all(
          entry.group
            .limiters()
            .map(({ limiter }) => limiter.stop({ dropWaitingJobs: true }).catch(() => {})),
        );
        await entry.connection.disconnect(false).catch(() => {});
      }
      slot = undefined;
    },
  };
}

// ---------------------------------------------------------------------------------------------- rate-limiter-flexible

/**
 * rate-limiter-flexible: `limit` points per `intervalMs` (a fixed window per key), wrapped into a
 * scheduler: a job consumes one point; when refused it waits `msBeforeNext` and tries again.
 */
function rlfAdapter(name: string, useRedis: boolean): Adapter {
  let limiter: RateLimiterMemory | RateLimiterRedis | undefined;
  let port: number | undefined;
  let stopped = false;
  const key = 'bench';
  const attempt = async (fn: () => void): Promise<void> => {
    for (;;) {
      if (stopped) throw new Error('stopped');
      try {
        await limiter!.consume(key, 1);
        fn();
        return;
      } catch (res) {
        if (res instanceof Error) throw res;
        await new Promise((r) => setTimeout(r, Math.max(0, (res as RateLimiterRes).msBeforeNext)));
      }
    }
  };
  return {
    name,
    async setup(o) {
      stopped = false;
      const base = { points: Math.min(o.limit, Number.MAX_SAFE_INTEGER), duration: o.intervalMs / 1000 };
      if (useRedis) {
        if (!o.redis) throw new Error(`${name} needs a Redis server`);
        port = o.redis.port;
        limiter = new RateLimiterRedis({ ...base, storeClient: sharedClient(port), keyPrefix: o.redis.id });
      } else {
        limiter = new RateLimiterMemory(base);
      }
    },
    schedule: attempt,
    async teardown() {
      stopped = true;
      if (port !== undefined) releaseClient(port);
      port = undefined;
    },
  };
}

const factories: Record<string, () => Adapter> = {
  valve: () => valveAdapter('valve', false),
  'valve-group': () => groupAdapter('valve-group', false),
  'valve-group-redis': () => groupAdapter('valve-group-redis', true),
  'valve-redis': () => valveAdapter('valve-redis', true),
  'valve-redis-spin': () =>
    valveAdapter('valve-redis-spin', true, false, undefined, false, undefined, 'spin'),
  'valve-spin': () => valveAdapter('valve-spin', false, false, undefined, false, undefined, 'spin'),
  'valve-plain-timers': () => valveAdapter('valve-plain-timers', false, true),
  'valve-redis-plain-timers': () => valveAdapter('valve-redis-plain-timers', true, true),
  'valve-redis-batch128': () => valveAdapter('valve-redis-batch128', true, false, 128),
  'valve-otel': () => valveAdapter('valve-otel', false, false, undefined, false, 'sdk'),
  'valve-otel-attributes': () =>
    valveAdapter('valve-otel-attributes', false, false, undefined, false, 'sdk-attributes'),
  'valve-otel-none': () => valveAdapter('valve-otel-none', false, false, undefined, false, 'none'),
  'valve-sliding': () => valveAdapter('valve-sliding', false, false, undefined, true),
  'valve-redis-sliding': () => valveAdapter('valve-redis-sliding', true, false, undefined, true),
  'p-limit': pLimitAdapter,
  'p-queue': pQueueAdapter,
  'p-queue-strict': pQueueStrictAdapter,
  bottleneck: () => bottleneckAdapter('bottleneck', false),
  'bottleneck-redis': () => bottleneckAdapter('bottleneck-redis', true),
  'bottleneck-group-redis': bottleneckGroupAdapter,
  'rlf-memory': () => rlfAdapter('rlf-memory', false),
  'rlf-redis': () => rlfAdapter('rlf-redis', true),
  'ref-timer': () => referenceAdapter('ref-timer'),
  'ref-spin': () => referenceAdapter('ref-spin'),
  'ref-busy': () => referenceAdapter('ref-busy'),
  'ref-redis-poll': redisReferenceAdapter,
  'ref-roundtrip': roundTripReferenceAdapter,
};

export const peerNames = Object.keys(factories);

export function createAdapter(name: string): Adapter {
  const make = factories[name];
  if (!make) throw new Error(`unknown peer ${name}; known: ${peerNames.join(', ')}`);
  return make();
}

export { nowMs };
