/**
 * A benchmark worker process (forked with IPC by fleet.ts): sets up one adapter per id, waits
 * for the common start time, keeps the limiters saturated for the duration, and reports its
 * starts (and, for valve, the store-clock grant times).
 */
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
    const cpu0 = process.cpuUsage();
    const calls0 = acquireStats.calls;
    const runs = await Promise.all(
      adapters.map((adapter) =>
        runFor(adapter, {
          window: s.window,
          durationMs: s.durationMs,
          log: s.logStarts ? starts : undefined,
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
    };
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
