/**
 * A benchmark worker process (forked with IPC by fleet.ts): sets up one adapter per id, waits
 * for the common start time, keeps the limiters saturated for the duration, and reports its
 * starts (and, for valve, the store-clock grant times).
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { type Adapter, acquireStats, callLog, createAdapter, type LimiterOptions } from './adapters.js';
import { nowMs, sleep } from './common.js';
import { runFor } from './drive.js';

export interface WorkerSetup {
  readonly type: 'setup';
  readonly peer: string;
  readonly options: LimiterOptions;
  /** One limiter per id (all sharing the options); `options.redis.id` is ignored when given. */
  readonly ids: readonly string[];
  /** Outstanding jobs per id. */
  readonly window: number;
  readonly durationMs: number;
  readonly logStarts: boolean;
  readonly logGrants: boolean;
  /** Run one job per limiter before reporting ready (first-use costs out of the measurement). */
  readonly warmUp?: boolean;
  /**
   * Wait for every job issued to settle and count them all (see runFor's `drain`): the totals
   * (starts, CPU, store calls, collections) then cover the same work.
   */
  readonly drain?: boolean;
  /** Also count the starts from `fromMs` to `toMs` after the common start (WorkerDone.steadyStarted). */
  readonly steady?: { readonly fromMs: number; readonly toMs: number };
}

export interface WorkerDone {
  readonly type: 'done';
  readonly started: number;
  readonly elapsedMs: number;
  readonly starts: number[];
  readonly grants: number[];
  /** valve with logGrants: store calls, and calls that granted nothing. */
  readonly calls: number;
  readonly emptyCalls: number;
  /** Store calls made from the start to the end of the run (no warm-up; calls still answered after it included). */
  readonly runCalls: number;
  /** valve groups: 'store-error' events (e.g. calls past the store's timeout). */
  readonly storeErrors: number;
  /** This process's CPU time (user + system) during the run, ms. */
  readonly cpuMs: number;
  /** Garbage collections during the run: their count and their total duration (wall), ms. */
  readonly gcs: number;
  readonly gcMs: number;
  /** With WorkerSetup.steady: the starts in that window, by their start times. */
  readonly steadyStarted?: number;
}

type Message = WorkerSetup | { type: 'go'; at: number } | { type: 'exit' };

let setup: WorkerSetup | undefined;
let adapters: Adapter[] = [];
const starts: number[] = [];
const grants: number[] = [];

const send = (message: unknown): void => {
  process.send?.(message);
};

process.on('message', (message: Message) => {
  void handle(message).catch((err: unknown) => {
    send({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) });
  });
});

async function handle(message: Message): Promise<void> {
  if (message.type === 'setup') {
    setup = message;
    adapters = [];
    for (const id of message.ids) {
      const adapter = createAdapter(message.peer);
      const redis = message.options.redis ? { port: message.options.redis.port, id } : undefined;
      await adapter.setup({ ...message.options, redis, grantLog: message.logGrants ? grants : undefined });
      adapters.push(adapter);
    }
    if (message.warmUp) await Promise.all(adapters.map((a) => a.schedule(() => {})));
    send({ type: 'ready' });
  } else if (message.type === 'go') {
    const s = setup!;
    await sleep(Math.max(0, message.at - nowMs()));
    // BENCH_PROFILE_DIR: a CPU profile of the run alone (set-up and warm-up left out), per process.
    const profiler = process.env.BENCH_PROFILE_DIR ? new Session() : undefined;
    if (profiler) {
      profiler.connect();
      await profiler.post('Profiler.enable');
      await profiler.post('Profiler.start');
    }
    let gcs = 0;
    let gcMs = 0;
    const gcObserver = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        gcs++;
        gcMs += entry.duration;
      }
    });
    gcObserver.observe({ entryTypes: ['gc'] });
    const tally = s.steady
      ? { from: message.at + s.steady.fromMs, to: message.at + s.steady.toMs, started: 0 }
      : undefined;
    const cpu0 = process.cpuUsage();
    const calls0 = acquireStats.calls;
    const runs = await Promise.all(
      adapters.map((adapter) =>
        runFor(adapter, {
          window: s.window,
          durationMs: s.steady ? Math.max(s.durationMs, s.steady.toMs) : s.durationMs,
          log: s.logStarts ? starts : undefined,
          drain: s.drain,
          tally,
        }),
      ),
    );
    const done: WorkerDone = {
      type: 'done',
      started: runs.reduce((sum, r) => sum + r.started, 0),
      elapsedMs: Math.max(...runs.map((r) => r.elapsedMs)),
      starts,
      grants,
      calls: acquireStats.calls,
      runCalls: acquireStats.calls - calls0,
      emptyCalls: acquireStats.empty,
      storeErrors: acquireStats.storeErrors,
      cpuMs: ((c) => (c.user + c.system) / 1000)(process.cpuUsage(cpu0)),
      gcs,
      gcMs,
      ...(tally ? { steadyStarted: tally.started } : {}),
    };
    gcObserver.disconnect();
    if (profiler) {
      const { profile } = await profiler.post('Profiler.stop');
      writeFileSync(
        join(process.env.BENCH_PROFILE_DIR!, `run-${process.pid}.cpuprofile`),
        JSON.stringify(profile),
      );
    }
    if (callLog !== undefined) {
      const file = join(process.env.BENCH_CALL_LOG_DIR ?? tmpdir(), `calls-${process.pid}.jsonl`);
      writeFileSync(file, callLog.map((r) => JSON.stringify(r)).join('\n'));
    }
    send(done);
  } else if (message.type === 'exit') {
    await Promise.race([Promise.all(adapters.map((a) => a.teardown())), sleep(2000)]);
    process.exit(0);
  }
}
