/**
 * Scenario group, valve groups (createValveGroup):
 * - 'overhead': 200k no-op jobs under a rule that never binds, one process, through
 *   `group.run('bench', job)` against a plain valve's `valve.run(job)` (same store, same rule):
 *   what the group's key lookup adds to an enqueue (target: within 10 %).
 * - '10 keys', '1000 keys', '10000 keys': 4 processes on one Redis, jobs spread over the keys
 *   (every process uses every key; 1000 jobs outstanding per process, at least 1 per key, so
 *   10,000 per process at 10,000 keys: batching per id cannot help), a rule that never binds.
 *   valve-group-redis (one group per process), rate-limiter-flexible (one RateLimiterRedis per
 *   key, one call per job) and Bottleneck's Group (one limiter per key, clustered), all on one
 *   connection per process (valve-redis, one plain valve per key, with `--peer`). Per peer:
 *   jobs/s, Redis commands per job and Redis CPU per job (INFO deltas, as redis-throughput),
 *   Redis keys and bytes per key (halfway through the run).
 *   Each worker runs one job per key before the start, so first uses are not measured, and
 *   jobs/s counts the starts from 1 s after the start to 1 s + duration by their start times;
 *   the per-job costs divide the whole run's work (CPU, store calls, Redis counters) by every
 *   job issued, the jobs in flight at the end drained and counted.
 * - '100000 keys once': 100,000 keys used once each through one group (10 per second per key),
 *   then, after its idle timeout (1 s here; the default is 5 minutes), the heap against the
 *   baseline (after a full GC), the timers left, and on Redis the keys left once every TTL
 *   passed (DBSIZE on a private server). Peers: valve-group (memory store), valve-group-redis
 *   (redisStore with a subscriber), bottleneck-group (Bottleneck.Group with `timeout`),
 *   rlf-memory (one RateLimiterMemory keyed per call). Runs bench/lib/group-once.ts with
 *   --expose-gc.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createAdapter, NEVER_BINDS } from '../lib/adapters.js';
import { emit, noop, parseScenarioArgs, round } from '../lib/common.js';
import { runBatch } from '../lib/drive.js';
import { runFleet } from '../lib/fleet.js';
import { startRedis } from '../lib/redis-server.js';

export const cases: Record<string, { keys: number }> = {
  overhead: { keys: 1 },
  '10 keys': { keys: 10 },
  '1000 keys': { keys: 1000 },
  '10000 keys': { keys: 10_000 },
  '100000 keys once': { keys: 100_000 },
};
export const peersFor = (name: string): string[] =>
  name === 'overhead'
    ? ['valve', 'valve-group']
    : name === '100000 keys once'
      ? ['valve-group', 'valve-group-redis', 'bottleneck-group', 'rlf-memory']
      : ['valve-group-redis', 'rlf-redis', 'bottleneck-group-redis'];

const args = parseScenarioArgs();
const N = args.quick ? 20_000 : 200_000;
const durationMs = args.quick ? 1500 : 3000;
const OUTSTANDING = 1000;

async function throughput(peer: string, n: number): Promise<number> {
  const adapter = createAdapter(peer);
  await adapter.setup(NEVER_BINDS);
  const ms = await runBatch(adapter, n, noop);
  await adapter.teardown();
  return (n / ms) * 1000;
}

async function overhead(peer: string): Promise<void> {
  await throughput(peer, N >> 3); // warm-up
  const runs: number[] = [];
  for (let i = 0; i < 3; i++) runs.push(await throughput(peer, N));
  runs.sort((a, b) => a - b);
  emit({ scenario: 'group', case: 'overhead', peer, metrics: { jobsPerSec: round(runs[1]!) } });
}

async function keyed(peer: string, name: string, keys: number): Promise<void> {
  const server = await startRedis();
  try {
    const ids = Array.from({ length: keys }, (_, i) => `tenant-${i}`);
    const r = await runFleet({
      processes: 4,
      peer,
      port: server.port,
      options: NEVER_BINDS,
      ids,
      window: Math.max(1, Math.floor(OUTSTANDING / keys)),
      durationMs,
      warmUp: true,
      // jobs/s: the starts in a steady window, by their start times (the first second, with
      // every key's first calls after the warm-up, left out). Per-job costs: every job issued,
      // drained at the end, against all the work (at 10,000 keys each process has 10,000 jobs
      // in flight at the deadline, whose store calls would otherwise count against the jobs
      // started before it).
      steady: { fromMs: 1000, toMs: 1000 + durationMs },
      drain: true,
    });
    const jobs = Math.max(1, r.started);
    const steady = r.steady!;
    emit({
      scenario: 'group',
      case: name,
      peer,
      metrics: {
        jobsPerSec: round((steady.started / steady.ms) * 1000),
        commandsPerJob: round(r.redis.commands / jobs, 3),
        // valve-group-redis: its store's acquire calls (each one acquire.lua request, whether
        // sent alone or with others in one acquire-many.lua call) per job.
        storeCallsPerJob: r.runCalls > 0 ? round(r.runCalls / jobs, 3) : null,
        scriptCallsPerJob: round(r.redis.scripts / jobs, 3),
        redisCpuUsPerJob: round((r.redis.cpuSec * 1e6) / jobs, 2),
        clientCpuUsPerJob: round((r.clientCpuMs * 1000) / jobs, 2),
        storeErrors: r.storeErrors,
        // Redis keys and used memory per key, sampled halfway through the run.
        redisKeysPerKey: round(r.mid.keys / keys, 2),
        redisBytesPerKey: Math.round(r.mid.usedMemoryDelta / keys),
      },
    });
  } finally {
    await server.stop();
  }
}

const onceChild = fileURLToPath(new URL('../lib/group-once.ts', import.meta.url));

async function once(peer: string, keys: number): Promise<void> {
  const server = peer === 'valve-group-redis' ? await startRedis() : undefined;
  try {
    const idleMs = 1000;
    const out = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        [
          '--expose-gc',
          '--import',
          'tsx',
          onceChild,
          peer,
          String(keys),
          String(idleMs),
          String(server?.port ?? ''),
        ],
        { timeout: 600_000, maxBuffer: 1 << 20 },
        (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
      );
    });
    const f = JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, number | null>;
    emit({
      scenario: 'group',
      case: '100000 keys once',
      peer,
      metrics: {
        keys,
        usedMs: f.usedMs!,
        heapPeakAboveBaselineMB: round(f.peakMB! - f.baselineMB!, 2),
        heapAfterAboveBaselineMB: round(f.afterMB! - f.baselineMB!, 2),
        timersAtPeak: f.timersAtPeak!,
        timersLeft: f.timersAfter! - f.timersBefore!,
        redisKeysLeft: f.redisKeys ?? null,
      },
    });
  } finally {
    await server?.stop();
  }
}

async function main(): Promise<void> {
  for (const [name, c] of Object.entries(cases)) {
    if (args.case && args.case !== name) continue;
    for (const peer of args.peer ? [args.peer] : peersFor(name)) {
      if (name === 'overhead') await overhead(peer);
      else if (name === '100000 keys once') await once(peer, args.quick ? 10_000 : c.keys);
      else await keyed(peer, name, c.keys);
    }
  }
  process.exit(0);
}

await main();
