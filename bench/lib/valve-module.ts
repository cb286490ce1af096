import { pathToFileURL } from 'node:url';

/**
 * valve is imported from its source (../../src/index.js). The benchmark types only the few
 * names it uses, so the harness builds and runs its peer adapters before every part of valve exists.
 */

export interface ValveLike {
  run(job: () => unknown, options?: { cost?: number; priority?: number }): Promise<unknown>;
  close(options?: { drain?: boolean }): Promise<void>;
  stats(): { queued: number; running: number; started: number };
}

export interface ValveGroupLike {
  run(key: string, job: () => unknown): Promise<unknown>;
  close(options?: { drain?: boolean }): Promise<void>;
  readonly size: number;
}

export interface ValveModule {
  createValve(options: {
    id: string;
    rules: {
      limit: number;
      interval: number;
      burst?: number;
      algorithm?: 'gcra' | 'fixed-window' | 'sliding-window';
    }[];
    store?: unknown;
    concurrency?: number;
    batch?: number;
    clock?: unknown;
  }): ValveLike;
  memoryStore(options?: { clock?: unknown }): unknown;
  /** Absent in versions of valve before valve groups. */
  createValveGroup?: (options: {
    rules: { limit: number; interval: number; burst?: number }[];
    store?: unknown;
    batch?: number;
  }) => ValveGroupLike;
  redisStore?: (options: { client: unknown; subscriber?: unknown; prefix?: string }) => unknown;
}

/**
 * `VALVE_SRC` (a directory holding valve's `src/`, e.g. a git worktree of another commit) benchmarks
 * another version of valve for before/after comparisons; default: this repository's `src/`.
 */
const root = process.env.VALVE_SRC
  ? pathToFileURL(`${process.env.VALVE_SRC.replace(/\/$/, '')}/`).href
  : undefined;
const source = root ? `${root}src/index.ts` : '../../src/index.js';
/** Until the package root exports redisStore, it is taken from its own module. */
const redisSource = root ? `${root}src/stores/redis/index.ts` : '../../src/stores/redis/index.js';

export async function loadValve(): Promise<ValveModule> {
  const mod = (await import(source)) as Partial<ValveModule>;
  if (typeof mod.createValve !== 'function' || typeof mod.memoryStore !== 'function') {
    throw new Error('valve is not there yet: src/index.ts does not export createValve and memoryStore');
  }
  if (typeof mod.redisStore !== 'function') {
    const redis = (await import(redisSource).catch(() => ({}))) as Partial<ValveModule>;
    if (typeof redis.redisStore === 'function')
      return { ...(mod as ValveModule), redisStore: redis.redisStore };
  }
  return mod as ValveModule;
}

export interface OtelModule {
  instrument(valve: unknown, options?: unknown): { stop(): void };
  instrumentStore<S>(store: S, options?: unknown): S;
}

/** The SDK's meter provider, registered once per process (valve-otel). */
let registered = false;

/**
 * valve/otel from the same source as valve. With `sdk`, a global MeterProvider is registered
 * first (a PeriodicExportingMetricReader exporting in memory every 60 s, the SDK's default
 * interval: no export happens during a scenario's run); without, no provider exists, as in an
 * application that installed valve/otel but no OpenTelemetry SDK.
 */
export async function loadOtel(sdk: boolean): Promise<OtelModule> {
  if (sdk && !registered) {
    const { metrics } = await import('@opentelemetry/api');
    const { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } =
      await import('@opentelemetry/sdk-metrics');
    const reader = new PeriodicExportingMetricReader({
      exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
      exportIntervalMillis: 60_000,
    });
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
    registered = true;
  }
  return (await import(root ? `${root}src/otel.ts` : '../../src/otel.js')) as OtelModule;
}
