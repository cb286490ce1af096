/**
 * A fault-suite worker process: one valve on a real Redis (through ioredis, with the settings
 * docs/timeouts-and-reconnection.md recommends), running a planned set of jobs and logging
 * every fact the tests check as one JSON object per stdout line.
 *
 *   node --import tsx test/faults/worker.ts '<WorkerConfig as JSON>'
 *
 * Times `t` are CLOCK_MONOTONIC ms (process.hrtime), the same clock in every process of the
 * machine, so intervals logged by different workers and the test compare directly. `grantAt`
 * is the store's clock (Redis TIME, epoch ms) at the admission that granted the job.
 *
 * A process-level detector logs every unhandled rejection and uncaught exception ("unhandled")
 * and makes the process exit with code 70: the tests fail on either.
 */
import { Redis as IORedis } from 'ioredis';
import { createClient, createCluster } from 'redis';
import type { ConcurrencyOption, Rule, StoreErrorMode } from '../../src/index.js';
import { createValve, isValveError } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { AcquireRequest, AcquireResult, Store, WakeEvent } from '../../src/stores/store.js';
import { waitForGo } from '../helpers/workers.js';

export interface WorkerConfig {
  /** Label in the test's messages. */
  name: string;
  /** Redis client library (default 'ioredis'). */
  client?: 'ioredis' | 'node-redis';
  /**
   * Connect as a cluster client instead: seeds, and the map from each node's announced
   * "host:port" to the address to use (the test's proxies). `host`/`port` are then unused.
   */
  cluster?: {
    seeds: { host: string; port: number }[];
    natMap: Record<string, { host: string; port: number }>;
  };
  host: string;
  port: number;
  prefix: string;
  id: string;
  rules: Rule[];
  concurrency?: ConcurrencyOption;
  onStoreError?: StoreErrorMode;
  /** redisStore's own deadline per store call (ms). */
  storeTimeout: number;
  /** Use a second connection for pub/sub wake-ups. */
  subscriber?: boolean;
  /** Jobs to run. */
  jobs: number;
  /** ms between two submissions (0: all at once). */
  submitEvery?: number;
  /** ms to wait after "ready" before the first submission. */
  submitAfter?: number;
  /** Each job runs for a random duration in [min, max] ms (or until its signal aborts). */
  durationMs: [number, number];
  /** Then the job blocks the event loop this many ms before it returns (a CPU-bound end). */
  syncTailMs?: number;
  maxWait?: number;
  batch?: number;
  /** The process gives up (exit code 3) after this many ms. */
  exitAfterMs: number;
  /**
   * After "ready" (connected), wait for a line "go <epoch ms>" on stdin before the first submission
   * (`submitAfter` counts from it), so that workers that took different times to start
   * (compiling, connecting on a loaded machine) submit their jobs together.
   */
  waitForGo?: boolean;
}

export type WorkerEvent =
  | { e: 'ready'; t: number; pid: number }
  | { e: 'submit'; t: number; job: number }
  | { e: 'start'; t: number; job: number; grantAt: number | null; token?: string; fence?: number }
  | { e: 'abort'; t: number; job: number; code: string | null }
  | { e: 'cb-end'; t: number; job: number }
  | { e: 'settled'; t: number; job: number; ok: boolean; code: string | null; cause: string | null }
  | {
      e: 'call';
      op: string;
      t0: number;
      t1: number;
      ok: boolean;
      err?: string;
      granted?: number;
      now?: number;
      costs?: number[];
      fences?: number[];
      held?: boolean[];
      tokens?: string[];
    }
  | { e: 'store-error'; t: number; op: string; action: string | null; err: string }
  | { e: 'lease-lost'; t: number; fence: number; reason: string }
  | { e: 'unhandled'; t: number; kind: string; reason: string }
  | { e: 'lag'; t: number; ms: number }
  | { e: 'done'; t: number; stats: Record<string, unknown> }
  | { e: 'go'; t: number }
  | { e: 'linger'; t: number; resources: string[] };

const mono = (): number => Number(process.hrtime.bigint()) / 1e6;

function emit(event: WorkerEvent): void {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

function errName(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return `${err.name}${typeof code === 'string' ? `(${code})` : ''}: ${err.message.slice(0, 160)}`;
  }
  return String(err);
}

process.on('unhandledRejection', (reason) => {
  emit({ e: 'unhandled', t: mono(), kind: 'unhandledRejection', reason: errName(reason) });
  process.exitCode = 70;
});
process.on('uncaughtException', (err) => {
  emit({ e: 'unhandled', t: mono(), kind: 'uncaughtException', reason: errName(err) });
  process.exit(70);
});

/**
 * Event-loop stall probe: a 20 ms tick that logs every stall over 50 ms ("lag", ending at
 * `t`, lasting `ms`). On a loaded 2-core machine the OS can stop a worker for hundreds of ms;
 * the checkers excuse lateness only by a stall measured at that very moment.
 */
const LAG_TICK = 20;
let expectedTick = mono() + LAG_TICK;
setInterval(() => {
  const now = mono();
  const lag = now - expectedTick;
  if (lag > 50) emit({ e: 'lag', t: now, ms: lag });
  expectedTick = now + LAG_TICK;
}, LAG_TICK).unref();

/** The store-clock time of the grant that is starting jobs right now (see the wrapper below). */
let grantNow: number | null = null;

/**
 * Wraps the real store only to log each call and its outcome (no behaviour changes): a job is
 * started synchronously by the valve when its acquire answer arrives, before any other answer
 * can, so `grantNow` is the admission time of the jobs being started.
 */
function logged(inner: Store): Store {
  const call = <T>(op: string, run: () => T | Promise<T>, describe: (value: T) => Partial<WorkerEvent>) => {
    const t0 = mono();
    return Promise.resolve()
      .then(run)
      .then(
        (value) => {
          emit({ e: 'call', op, t0, t1: mono(), ok: true, ...describe(value) } as WorkerEvent);
          return value;
        },
        (err: unknown) => {
          emit({ e: 'call', op, t0, t1: mono(), ok: false, err: errName(err) });
          throw err;
        },
      );
  };
  const store: Store = {
    acquire(request: AcquireRequest): Promise<AcquireResult> {
      const costs = request.costs.slice(0, request.count);
      return call(
        'acquire',
        () => inner.acquire(request),
        (r) => ({
          granted: r.granted,
          now: r.now,
          costs: costs.slice(0, r.granted),
          fences: r.leases?.map((l) => l.fence),
        }),
      ).then(
        (r) => {
          grantNow = r.now;
          return r;
        },
        (err: unknown) => {
          // 'open' mode starts jobs without the store until an acquisition succeeds again.
          grantNow = null;
          throw err;
        },
      );
    },
    pause: (id, ms) =>
      call(
        'pause',
        () => inner.pause(id, ms),
        () => ({}),
      ),
    resume: (id) =>
      call(
        'resume',
        () => inner.resume(id),
        () => ({}),
      ),
    renew: (id, tokens, ttl) =>
      call(
        'renew',
        () => inner.renew(id, tokens, ttl),
        (held) => ({ held, tokens: [...tokens] }),
      ),
    release: (id, tokens) =>
      call(
        'release',
        () => inner.release(id, tokens),
        () => ({}),
      ),
  };
  const subscribe = inner.subscribe;
  if (typeof subscribe === 'function') {
    Object.defineProperty(store, 'subscribe', {
      value: (id: string, onWake: (event: WakeEvent) => void) => subscribe.call(inner, id, onWake),
    });
    Object.defineProperty(store, 'notifies', { get: () => inner.notifies === true });
  }
  return store;
}

/** A command connection (and a subscriber) with the settings docs/timeouts-and-reconnection.md recommends. */
async function connect(
  config: WorkerConfig,
): Promise<{ client: object; subscriber: object | undefined; close: () => Promise<void> }> {
  if (config.cluster) return connectCluster(config, config.cluster);
  if (config.client === 'node-redis') {
    const options = {
      url: `redis://${config.host}:${config.port}`,
      disableOfflineQueue: true,
      socket: {
        connectTimeout: 1000,
        reconnectStrategy: (retries: number) => Math.min(50 * (retries + 1), 500),
      },
    };
    const client = createClient(options);
    client.on('error', () => {});
    await client.connect();
    let sub: typeof client | undefined;
    if (config.subscriber) {
      sub = client.duplicate({ disableOfflineQueue: false });
      sub.on('error', () => {});
      await sub.connect();
    }
    return {
      client,
      subscriber: sub,
      close: async () => {
        client.destroy();
        sub?.destroy();
      },
    };
  }
  const options = {
    host: config.host,
    port: config.port,
    lazyConnect: true,
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    connectTimeout: 1000,
    retryStrategy: (times: number) => Math.min(50 * times, 500),
  };
  const client = new IORedis(options);
  client.on('error', () => {});
  await client.connect();
  let sub: IORedis | undefined;
  if (config.subscriber) {
    sub = new IORedis({ ...options, enableOfflineQueue: true });
    sub.on('error', () => {});
    await sub.connect();
  }
  return {
    client,
    subscriber: sub,
    close: async () => {
      client.disconnect();
      sub?.disconnect();
    },
  };
}

/** Cluster clients with the settings docs/timeouts-and-reconnection.md recommends. */
async function connectCluster(
  config: WorkerConfig,
  cluster: NonNullable<WorkerConfig['cluster']>,
): Promise<{ client: object; subscriber: object | undefined; close: () => Promise<void> }> {
  if (config.client === 'node-redis') {
    const make = (disableOfflineQueue: boolean) =>
      createCluster({
        rootNodes: cluster.seeds.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
        nodeAddressMap: cluster.natMap,
        defaults: {
          disableOfflineQueue,
          socket: {
            connectTimeout: 1000,
            reconnectStrategy: (retries: number) => Math.min(50 * (retries + 1), 500),
          },
        },
      });
    const client = make(true);
    client.on('error', () => {});
    await client.connect();
    const sub = config.subscriber ? make(false) : undefined;
    if (sub) {
      sub.on('error', () => {});
      await sub.connect();
    }
    return {
      client,
      subscriber: sub,
      close: async () => {
        client.destroy();
        sub?.destroy();
      },
    };
  }
  const retry = (times: number) => Math.min(50 * times, 500);
  const client = new IORedis.Cluster(cluster.seeds, {
    lazyConnect: true,
    enableOfflineQueue: false,
    natMap: cluster.natMap,
    clusterRetryStrategy: retry,
    redisOptions: { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0, connectTimeout: 1000 },
  });
  client.on('error', () => {});
  await client.connect();
  let sub: InstanceType<typeof IORedis.Cluster> | undefined;
  if (config.subscriber) {
    sub = new IORedis.Cluster(cluster.seeds, {
      lazyConnect: true,
      natMap: cluster.natMap,
      shardedSubscribers: true,
      clusterRetryStrategy: retry,
    });
    sub.on('error', () => {});
    await sub.connect();
  }
  return {
    client,
    subscriber: sub,
    close: async () => {
      client.disconnect();
      sub?.disconnect();
    },
  };
}

async function main(): Promise<void> {
  const config = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
  const hardStop = setTimeout(() => {
    emit({
      e: 'unhandled',
      t: mono(),
      kind: 'timeout',
      reason: `worker still running after ${config.exitAfterMs} ms`,
    });
    process.exit(3);
  }, config.exitAfterMs);
  hardStop.unref();

  const { client, subscriber, close } = await connect(config);
  const store = logged(
    redisStore({ client, subscriber, prefix: config.prefix, timeout: config.storeTimeout }),
  );
  const valve = createValve({
    id: config.id,
    rules: config.rules,
    store,
    ...(config.concurrency !== undefined ? { concurrency: config.concurrency } : {}),
    ...(config.onStoreError !== undefined ? { onStoreError: config.onStoreError } : {}),
    ...(config.maxWait !== undefined ? { maxWait: config.maxWait } : {}),
    ...(config.batch !== undefined ? { batch: config.batch } : {}),
  });
  valve.on('store-error', (err, ctx) => {
    emit({ e: 'store-error', t: mono(), op: ctx.operation, action: ctx.action ?? null, err: errName(err) });
  });
  valve.on('lease-lost', (ev) => {
    emit({ e: 'lease-lost', t: mono(), fence: ev.fence, reason: ev.reason });
  });

  emit({ e: 'ready', t: mono(), pid: process.pid });
  if (config.waitForGo) {
    await waitForGo();
    emit({ e: 'go', t: mono() });
  }
  if (config.submitAfter) await new Promise((r) => setTimeout(r, config.submitAfter));

  const [dMin, dMax] = config.durationMs;
  const all: Promise<void>[] = [];
  for (let job = 0; job < config.jobs; job++) {
    if (job > 0 && config.submitEvery) await new Promise((r) => setTimeout(r, config.submitEvery));
    emit({ e: 'submit', t: mono(), job });
    const duration = dMin + Math.random() * (dMax - dMin);
    const promise = valve.run(async (ctx) => {
      const lease = ctx.lease;
      emit({
        e: 'start',
        t: mono(),
        job,
        grantAt: grantNow,
        ...(lease ? { token: lease.token, fence: lease.fence } : {}),
      });
      const signal = ctx.signal;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, duration);
        signal.addEventListener(
          'abort',
          () => {
            clearTimeout(timer);
            emit({
              e: 'abort',
              t: mono(),
              job,
              code: isValveError(signal.reason) ? signal.reason.code : null,
            });
            resolve();
          },
          { once: true },
        );
      });
      if (config.syncTailMs && !signal.aborted) {
        const until = mono() + config.syncTailMs;
        while (mono() < until) {
          // CPU-bound: no timer, renewal or expiry check runs meanwhile.
        }
      }
      emit({ e: 'cb-end', t: mono(), job });
      // A job that honours its signal stops and fails with the reason.
      if (signal.aborted) throw signal.reason;
    });
    all.push(
      promise.then(
        () => emit({ e: 'settled', t: mono(), job, ok: true, code: null, cause: null }),
        (err: unknown) => {
          const cause = err instanceof Error && err.cause !== undefined ? errName(err.cause) : null;
          emit({
            e: 'settled',
            t: mono(),
            job,
            ok: false,
            code: isValveError(err) ? err.code : errName(err),
            cause,
          });
        },
      ),
    );
  }
  await Promise.all(all);
  await valve.close();
  emit({ e: 'done', t: mono(), stats: { ...valve.stats() } });
  await close();
  clearTimeout(hardStop);
  // Everything is closed: the process should exit now. If something still holds the event loop
  // (a socket or timer of a client, or of valve), log what it is and give up, so a test never
  // waits for a process that has finished its work.
  setTimeout(() => {
    emit({ e: 'linger', t: mono(), resources: process.getActiveResourcesInfo() });
    process.exit(4);
  }, 3000).unref();
}

main().catch((err: unknown) => {
  emit({ e: 'unhandled', t: mono(), kind: 'main', reason: errName(err) });
  process.exit(71);
});
