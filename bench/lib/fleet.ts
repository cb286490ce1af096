/** Runs one peer in several worker processes against one Redis server, started together. */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { LimiterOptions } from './adapters.js';
import { nowMs } from './common.js';
import { diffCounters, type RedisCounters, readCounters } from './redis-server.js';
import type { WorkerDone, WorkerSetup } from './worker.js';

const workerPath = fileURLToPath(new URL('./worker.ts', import.meta.url));

export interface FleetResult {
  readonly started: number;
  readonly elapsedMs: number;
  /** Every worker's observed start times, sorted. */
  readonly starts: number[];
  /** valve only: grant times on the store's clock, sorted. */
  readonly grants: number[];
  /** valve with logGrants: store calls, and calls that granted nothing, over all processes. */
  readonly calls: number;
  readonly emptyCalls: number;
  /** Store calls made during the run (from the start to each worker's end), over all processes. */
  readonly runCalls: number;
  /** valve groups: 'store-error' events over all processes. */
  readonly storeErrors: number;
  /** CPU time of all worker processes during the run, ms. */
  readonly clientCpuMs: number;
  /** Garbage collections in all worker processes during the run: count and total duration, ms. */
  readonly gcs: number;
  readonly gcMs: number;
  /** With FleetOptions.steady: the starts (by their start times) in that window, and its length. */
  readonly steady?: { readonly started: number; readonly ms: number };
  readonly redis: RedisCounters;
  /** Wall time between the two Redis counter readings that `redis` is the difference of, ms. */
  readonly counterMs: number;
  /** Keys and used memory sampled halfway through the run (keys with a TTL may be gone at the end). */
  readonly mid: { readonly keys: number; readonly usedMemoryDelta: number };
}

export interface FleetOptions {
  readonly processes: number;
  readonly peer: string;
  readonly port: number;
  readonly options: LimiterOptions;
  readonly ids: readonly string[];
  readonly window: number;
  readonly durationMs: number;
  readonly logStarts?: boolean;
  readonly logGrants?: boolean;
  /** Give each process its own share of `ids` (round robin) instead of every id. */
  readonly splitIds?: boolean;
  /** Each worker runs one job per id before the start (see WorkerSetup.warmUp). */
  readonly warmUp?: boolean;
  /**
   * Each worker waits for every job it issued and counts them all (see runFor's `drain`): jobs,
   * CPU, store calls and the Redis counters cover the same work (the counters are read once
   * every worker is done).
   */
  readonly drain?: boolean;
  /**
   * Also count the starts from `fromMs` to `toMs` after the common start, by each start's own
   * time (FleetResult.steady): a steady rate that leaves out the ramp-up and the tail, and that
   * a worker whose event loop lags cannot shift. The run lasts until `toMs` at least.
   */
  readonly steady?: { readonly fromMs: number; readonly toMs: number };
}

type Reply = { type: 'ready' } | WorkerDone | { type: 'error'; message: string };

function waitFor<T extends Reply['type']>(
  child: ChildProcess,
  type: T,
): Promise<Extract<Reply, { type: T }>> {
  return new Promise((resolve, reject) => {
    const onMessage = (reply: Reply) => {
      if (reply.type === type) {
        cleanup();
        resolve(reply as Extract<Reply, { type: T }>);
      } else if (reply.type === 'error') {
        cleanup();
        reject(new Error(`worker failed: ${reply.message}`));
      }
    };
    const onExit = (code: number | null) => {
      cleanup();
      reject(new Error(`worker exited (${code}) while waiting for ${type}`));
    };
    const cleanup = () => {
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    child.on('message', onMessage);
    child.on('exit', onExit);
  });
}

export async function runFleet(o: FleetOptions): Promise<FleetResult> {
  const children: ChildProcess[] = [];
  const admin = new Redis({ port: o.port, host: '127.0.0.1' });
  try {
    for (let i = 0; i < o.processes; i++) {
      children.push(
        fork(workerPath, [], {
          // BENCH_WORKER_FLAGS: extra node flags for the workers, e.g. '--cpu-prof --cpu-prof-dir=prof'.
          execArgv: [
            '--import',
            'tsx',
            ...(process.env.BENCH_WORKER_FLAGS?.split(' ').filter(Boolean) ?? []),
          ],
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        }),
      );
    }
    const setup: WorkerSetup = {
      type: 'setup',
      peer: o.peer,
      options: { ...o.options, redis: { port: o.port, id: o.ids[0] ?? 'bench' } },
      ids: o.ids,
      window: o.window,
      durationMs: o.durationMs,
      logStarts: o.logStarts ?? false,
      logGrants: o.logGrants ?? false,
      warmUp: o.warmUp ?? false,
      drain: o.drain ?? false,
      ...(o.steady ? { steady: o.steady } : {}),
    };
    const ready = children.map((c) => waitFor(c, 'ready'));
    children.forEach((c, i) => {
      const ids = o.splitIds ? o.ids.filter((_, k) => k % o.processes === i) : o.ids;
      c.send({ ...setup, ids });
    });
    await Promise.all(ready);
    const before = await readCounters(admin);
    const countedFrom = nowMs();
    const done = children.map((c) => waitFor(c, 'done'));
    const at = nowMs() + 300;
    for (const c of children) c.send({ type: 'go', at });
    await new Promise((r) => setTimeout(r, Math.max(0, at + o.durationMs / 2 - nowMs())));
    const midway = await readCounters(admin);
    const results = await Promise.all(done);
    const countedTo = nowMs();
    const after = await readCounters(admin);
    const exited = children.map((c) => new Promise((r) => c.once('exit', r)));
    for (const c of children) c.send({ type: 'exit' });
    await Promise.race([Promise.all(exited), new Promise((r) => setTimeout(r, 5000))]);
    return {
      started: results.reduce((s, r) => s + r.started, 0),
      elapsedMs: Math.max(...results.map((r) => r.elapsedMs)),
      starts: results.flatMap((r) => r.starts).sort((a, b) => a - b),
      grants: results.flatMap((r) => r.grants).sort((a, b) => a - b),
      calls: results.reduce((s, r) => s + r.calls, 0),
      emptyCalls: results.reduce((s, r) => s + r.emptyCalls, 0),
      storeErrors: results.reduce((s, r) => s + (r.storeErrors ?? 0), 0),
      runCalls: results.reduce((s, r) => s + (r.runCalls ?? 0), 0),
      clientCpuMs: results.reduce((s, r) => s + r.cpuMs, 0),
      gcs: results.reduce((s, r) => s + r.gcs, 0),
      gcMs: results.reduce((s, r) => s + r.gcMs, 0),
      ...(o.steady
        ? {
            steady: {
              started: results.reduce((s, r) => s + (r.steadyStarted ?? 0), 0),
              ms: o.steady.toMs - o.steady.fromMs,
            },
          }
        : {}),
      redis: diffCounters(before, after, 2),
      counterMs: countedTo - countedFrom,
      mid: { keys: midway.keys, usedMemoryDelta: midway.usedMemory - before.usedMemory },
    };
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    admin.disconnect();
  }
}
