/**
 * Scenario 6, scale: Redis cost per job as the number of ids and of processes grows.
 * - "ids N": one process, N valves (ids), 64 jobs outstanding per id, for 3 s (10k ids: 4
 *   processes with 2,500 ids each, for 9 s).
 * - "processes P": P processes sharing one id, 1000 jobs outstanding each, for 3 s.
 * The rule never binds within the run but keeps its state alive while measured: 10k per day
 * (8.64 s per job) with burst 1e7, so every job pushes the key's expiry further out. Per step: jobs/s, commands/job, script calls/job, Redis CPU µs/job,
 * keys per id and Redis memory per id (both sampled halfway through the run).
 * Default steps: ids 1, 100, 1000 and processes 1, 2, 4, 8; --full adds ids 10000 and 16 processes.
 */
import { emit, parseScenarioArgs, round } from '../lib/common.js';
import { runFleet } from '../lib/fleet.js';
import { startRedis } from '../lib/redis-server.js';

export const peers = ['valve-redis'];

const args = parseScenarioArgs();
const durationMs = args.quick ? 1000 : 3000;
const idSteps = args.quick ? [1, 100] : args.full ? [1, 100, 1000, 10_000] : [1, 100, 1000];
const processSteps = args.quick ? [1, 2] : args.full ? [1, 2, 4, 8, 16] : [1, 2, 4, 8];

export const cases = [...idSteps.map((n) => `ids ${n}`), ...processSteps.map((p) => `processes ${p}`)];

async function measure(
  peer: string,
  name: string,
  processes: number,
  ids: number,
  splitIds = false,
): Promise<void> {
  const server = await startRedis();
  try {
    const r = await runFleet({
      processes,
      peer,
      port: server.port,
      options: { limit: 10_000, intervalMs: 86_400_000, burst: 10_000_000 },
      ids: Array.from({ length: ids }, (_, i) => `bench-scale-${i}`),
      window: ids === 1 ? 1000 : 64,
      durationMs: ids >= 10_000 ? 3 * durationMs : durationMs,
      splitIds,
    });
    const jobs = Math.max(1, r.started);
    emit({
      scenario: 'scale',
      case: name,
      peer,
      metrics: {
        jobsPerSec: round((r.started / r.elapsedMs) * 1000),
        commandsPerJob: round(r.redis.commands / jobs, 3),
        scriptsPerJob: round(r.redis.scripts / jobs, 4),
        redisCpuUsPerJob: round((r.redis.cpuSec * 1e6) / jobs, 2),
        keysPerId: round(r.mid.keys / ids, 2),
        redisBytesPerId: round(r.mid.usedMemoryDelta / ids),
      },
    });
  } finally {
    await server.stop();
  }
}

async function main(): Promise<void> {
  for (const peer of args.peer ? [args.peer] : peers) {
    for (const n of idSteps)
      if (!args.case || args.case === `ids ${n}`) await measure(peer, `ids ${n}`, 1, n);
    for (const p of processSteps) {
      if (!args.case || args.case === `processes ${p}`) await measure(peer, `processes ${p}`, p, 1);
    }
  }
  process.exit(0);
}

await main();
