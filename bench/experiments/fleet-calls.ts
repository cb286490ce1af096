/**
 * A fleet of P processes with the same N valve ids on one Redis (bench/scenarios/scale.ts's
 * "fleet P×N" and "ids N" cases, with the workers' CPU and store errors printed):
 * `tsx bench/experiments/fleet-calls.ts <P> <N>`. Rule 10k per day, burst 3e6 (never binds),
 * 64 jobs outstanding per id per process, 9 s (3 s for one process).
 */
import { runFleet } from '../lib/fleet.js';
import { startRedis } from '../lib/redis-server.js';

const [p, n] = process.argv.slice(2).map(Number);
const server = await startRedis();
const r = await runFleet({
  processes: p!,
  peer: 'valve-redis',
  port: server.port,
  options: { limit: 10_000, intervalMs: 86_400_000, burst: 3_000_000 },
  ids: Array.from({ length: n! }, (_, i) => `bench-scale-${i}`),
  window: 64,
  durationMs: p! > 1 ? 9000 : 3000,
  warmUp: p! > 1,
});
const jobs = r.started;
console.log(
  JSON.stringify({
    p,
    n,
    jobsPerSec: Math.round((jobs / r.elapsedMs) * 1000),
    storeErrors: r.storeErrors,
    clientCpuUsPerJob: +((r.clientCpuMs * 1000) / jobs).toFixed(2),
    redisCpuUsPerJob: +((r.redis.cpuSec * 1e6) / jobs).toFixed(2),
    cmdsPerJob: +(r.redis.commands / jobs).toFixed(3),
    scriptsPerJob: +(r.redis.scripts / jobs).toFixed(4),
  }),
);
await server.stop();
process.exit(0);
