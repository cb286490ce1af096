import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * valve is imported as it ships (see loadValve below). The benchmark types only the few
 * names it uses, so the harness builds and runs its peer adapters before every part of valve exists.
 */

export interface ValveLike {
  run(job: () => unknown, options?: { cost?: number; priority?: number }): Promise<unknown>;
  close(options?: { drain?: boolean }): Promise<void>;
  stats(): { queued: number; running: number; started: number };
}

export interface ValveGroupLike {
  run(key: string, job: () => unknown): Promise<unknown>;
  on(event: 'store-error', listener: () => void): unknown;
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
const srcDir = process.env.VALVE_SRC
  ? join(process.env.VALVE_SRC.replace(/\/$/, ''), 'src')
  : fileURLToPath(new URL('../../src/', import.meta.url));

/**
 * valve as it ships: `src/index.ts` bundled by esbuild as tsup builds the package (no
 * `keepNames`). Importing the TypeScript source through tsx would measure a slower valve: tsx
 * compiles with `keepNames`, which renames every function valve creates, so each closure costs a
 * call and a property store (a valve of a group took 14 KB instead of 7 KB). The bundle is built
 * once per version of `src/` (its files' hash names it) and shared by every process of a run.
 * `VALVE_BENCH_TSX=1` imports the source through tsx instead.
 */
async function bundle(): Promise<string> {
  const hash = createHash('sha1');
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) =>
      a.name.localeCompare(b.name),
    )) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.(ts|lua)$/.test(entry.name)) hash.update(path).update(readFileSync(path));
    }
  };
  walk(srcDir);
  const dir = join(tmpdir(), 'valve-bench');
  const file = join(dir, `valve-${hash.digest('hex').slice(0, 16)}.mjs`);
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    const { build } = await import('esbuild');
    const partial = `${file}.${process.pid}.tmp`;
    await build({
      entryPoints: [join(srcDir, 'index.ts')],
      bundle: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      outfile: partial,
      logLevel: 'silent',
    });
    renameSync(partial, file);
  }
  return pathToFileURL(file).href;
}

let loaded: Promise<ValveModule> | undefined;

export function loadValve(): Promise<ValveModule> {
  loaded ??= load();
  return loaded;
}

async function load(): Promise<ValveModule> {
  const source =
    process.env.VALVE_BENCH_TSX === '1' ? pathToFileURL(join(srcDir, 'index.ts')).href : await bundle();
  const mod = (await import(source)) as Partial<ValveModule>;
  if (typeof mod.createValve !== 'function' || typeof mod.memoryStore !== 'function') {
    throw new Error('valve is not there yet: src/index.ts does not export createValve and memoryStore');
  }
  if (typeof mod.redisStore !== 'function') throw new Error('src/index.ts does not export redisStore');
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
  // Through tsx: it reaches the bundled valve by the observer hook (a Symbol.for key), as across two copies.
  return (await import(pathToFileURL(join(srcDir, 'otel.ts')).href)) as OtelModule;
}
