/**
 * Scenario 6, scale: Redis cost per job as the number of ids and of processes grows.
 * - "ids N": one process, N valves (ids), 64 jobs outstanding per id, for 3 s (10k ids: 4
 *   processes with 2,500 ids each, for 9 s).
 * - "processes P": P processes sharing one id, 1000 jobs outstanding each, for 3 s.
 * The rule never binds within the run but keeps its state alive while measured: 10k per day
 * (8.64 s per job) with burst 3e6 (the largest tolerance is 365 days), so every job pushes the key's expiry further out. Per step: jobs/s, commands/job, script calls/job, Redis CPU µs/job,
 * keys per id and Redis memory per id (both sampled halfway through the run), the processes'
 * CPU µs/job and their store errors (calls that failed or timed out).
 * - "fleet P×N": P processes, each with the same N ids (64 jobs outstanding per id per process),
 *   for 9 s after one job per valve: a fleet sharing many credentials whose limits rarely bind. Compare its Redis CPU per
 *   job with "ids N" (one process). Steps: fleet 4×1000 and 16×1000 (--quick: 4×100).
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

const fleetSteps: [number, number][] = args.quick
  ? [[4, 100]]
  : [
      [4, 1000],
      [16, 1000],
    ];

export const cases = [
  ...idSteps.map((n) => `ids ${n}`),
  ...processSteps.map((p) => `processes ${p}`),
  ...fleetSteps.map(([p, n]) => `fleet ${p}×${n}`),
];

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
      options: { limit: 10_000, intervalMs: 86_400_000, burst: 3_000_000 },
      ids: Array.from({ length: ids }, (_, i) => `bench-scale-${i}`),
      window: ids === 1 ? 1000 : 64,
      // The 10k ids and a fleet of many ids run three times longer; a fleet's valves make their
      // first store call before the measurement (each process sets up 1000 valves).
      durationMs: ids >= 10_000 || (processes > 1 && ids > 1) ? 3 * durationMs : durationMs,
      splitIds,
      warmUp: processes > 1 && ids > 1,
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
        clientCpuUsPerJob: round((r.clientCpuMs * 1000) / jobs, 2),
        storeErrors: r.storeErrors,
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
    for (const [p, n] of fleetSteps) {
      if (!args.case || args.case === `fleet ${p}×${n}`) await measure(peer, `fleet ${p}×${n}`, p, n);
    }
  }
  process.exit(0);
}

await main();
