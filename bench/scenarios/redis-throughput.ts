/**
 * Scenario 3, Redis throughput: a limit that never binds, 1 process and 4 processes sharing one
 * id, each keeping 1000 jobs outstanding for 2 s. Per peer: jobs/s over all processes, Redis
 * commands per job and script calls per job (INFO commandstats deltas, INFO itself excluded), and
 * Redis server CPU per job (used_cpu_user + used_cpu_sys delta: command execution plus network
 * I/O and event-loop turns) and command execution time per job (commandstats usec of the scripts).
 * `valve-redis-sliding`: the same with a sliding-window rule that never binds (10,000 per 1 ms),
 * the cost of keeping its log.
 */
import { NEVER_BINDS } from '../lib/adapters.js';
import { emit, parseScenarioArgs, round } from '../lib/common.js';
import { runFleet } from '../lib/fleet.js';
import { startRedis } from '../lib/redis-server.js';

export const peers = [
  'valve-redis',
  'valve-redis-batch128',
  'valve-redis-sliding',
  'bottleneck-redis',
  'rlf-redis',
  'ref-roundtrip',
];
export const cases: Record<string, { processes: number }> = {
  '1 process': { processes: 1 },
  '4 processes': { processes: 4 },
};

const args = parseScenarioArgs();
const durationMs = args.quick ? 1000 : 2000;

async function measure(peer: string, name: string, processes: number): Promise<void> {
  const server = await startRedis();
  try {
    const r = await runFleet({
      processes,
      peer,
      port: server.port,
      options: NEVER_BINDS,
      ids: ['bench-throughput'],
      window: 1000,
      durationMs,
    });
    const jobs = Math.max(1, r.started);
    emit({
      scenario: 'redis-throughput',
      case: name,
      peer,
      metrics: {
        jobsPerSec: round((r.started / r.elapsedMs) * 1000),
        commandsPerJob: round(r.redis.commands / jobs, 3),
        scriptsPerJob: round(r.redis.scripts / jobs, 4),
        redisCpuUsPerJob: round((r.redis.cpuSec * 1e6) / jobs, 2),
        scriptUsPerJob: round(r.redis.commandUs / jobs, 2),
      },
    });
  } finally {
    await server.stop();
  }
}

async function main(): Promise<void> {
  for (const [name, c] of Object.entries(cases)) {
    if (args.case && args.case !== name) continue;
    for (const peer of args.peer ? [args.peer] : peers) await measure(peer, name, c.processes);
  }
  process.exit(0);
}

await main();
