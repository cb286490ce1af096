/**
 * Scenario 4, shared limit: 4 or 16 processes share 2000/s through one Redis, each keeping 500
 * jobs outstanding. Per peer: utilisation (all processes' starts in the run after the first
 * start, over 2000 × its length) and violations over the merged start times (starts that make
 * some half-open 1 s window hold more than limit + burst - 1). For valve also on the grant times
 * reported by the store (AcquireResult.now, the store's clock), logged by wrapping the store,
 * with jobs granted per store call, store calls per granted job and the share of calls that
 * granted nothing. For every peer the store's cost: Redis commands per job and Redis server CPU
 * per job (INFO commandstats and used_cpu deltas, as in redis-throughput.ts).
 * Cases: "burst B, P processes" for B in 1, 20 and P in 4, 16 (10 s each, 3 s with --quick);
 * `--peer valve-redis-spin` runs valve with precision: 'spin' in any of them.
 * `--background N`: the Redis also serves N other commands a second during the run (GET and SET
 * from another client, bench/lib/background.ts); Redis CPU and commands per job are then the
 * peer's marginal cost (the run's minus the background's own, measured alone for 3 s before
 * and after the run), and `backgroundCpuPct` is what the background alone costs the server.
 */
import { type Background, startBackground } from '../lib/background.js';
import { emit, parseScenarioArgs, round, windowStats } from '../lib/common.js';
import { runFleet } from '../lib/fleet.js';
import { startRedis } from '../lib/redis-server.js';

export const peers = [
  'valve-redis',
  'valve-redis-plain-timers',
  'valve-redis-spin',
  'bottleneck-redis',
  'rlf-redis',
  'ref-redis-poll',
];
const side = ['valve-redis', 'bottleneck-redis', 'rlf-redis'];
/** Peers a case runs only when asked for by name (--peer): valve with precision: 'spin'. */
const byName = ['valve-redis-spin'];
export const cases: Record<string, { burst: number; processes: number; peers: string[]; extra?: string[] }> =
  {
    'burst 1': { burst: 1, processes: 4, peers },
    'burst 20': { burst: 20, processes: 4, peers: ['valve-redis', 'valve-redis-plain-timers'] },
    'burst 1, 4 processes': { burst: 1, processes: 4, peers: side, extra: byName },
    'burst 1, 16 processes': { burst: 1, processes: 16, peers: side, extra: byName },
    'burst 20, 4 processes': { burst: 20, processes: 4, peers: side, extra: byName },
    'burst 20, 16 processes': { burst: 20, processes: 16, peers: side, extra: byName },
  };

const args = parseScenarioArgs();
const durationMs = args.quick ? 3000 : 10_000;
const limit = 2000;
const intervalMs = 1000;
const bgAt = process.argv.indexOf('--background');
const background = bgAt >= 0 ? Number(process.argv[bgAt + 1]) : 0;
if (!(background >= 0))
  throw new RangeError(`--background: expected commands per second, got ${process.argv[bgAt + 1]}`);

async function measure(peer: string, name: string, burst: number, processes: number): Promise<void> {
  const server = await startRedis();
  let bg: Background | undefined;
  try {
    let bgBefore = { cpuSecPerMs: 0, commandsPerMs: 0 };
    if (background > 0) {
      bg = await startBackground(server.port, background);
      bgBefore = await bg.alone(3000);
    }
    const isValve = peer.startsWith('valve') || peer === 'ref-redis-poll';
    const r = await runFleet({
      processes,
      peer,
      port: server.port,
      options: { limit, intervalMs, burst },
      ids: ['bench-shared'],
      window: 500,
      durationMs: durationMs + 300,
      logStarts: true,
      logGrants: isValve,
    });
    const bound = limit + burst - 1;
    const s0 = r.starts[0] ?? 0;
    const inRun = r.starts.filter((t) => t < s0 + durationMs).length;
    const observed = windowStats(r.starts, intervalMs, bound);
    const granted = isValve ? windowStats(r.grants, intervalMs, bound) : undefined;
    const jobs = Math.max(1, r.started);
    let redisCpuSec = r.redis.cpuSec;
    let commands = r.redis.commands;
    let bgCpuPct: number | null = null;
    if (bg) {
      const bgAfter = await bg.alone(3000);
      const cpuPerMs = (bgBefore.cpuSecPerMs + bgAfter.cpuSecPerMs) / 2;
      redisCpuSec -= cpuPerMs * r.counterMs;
      commands -= ((bgBefore.commandsPerMs + bgAfter.commandsPerMs) / 2) * r.counterMs;
      bgCpuPct = round(cpuPerMs * 1000 * 100, 1);
      if (bg.errors > 0) throw new Error(`background: ${bg.errors} commands failed`);
    }
    emit({
      scenario: 'shared-limit',
      case: name,
      peer,
      metrics: {
        utilisationPct: round((inRun / (limit * (durationMs / 1000))) * 100, 2),
        violations: observed.violations,
        maxIn1s: observed.maxInWindow,
        bound,
        grantViolations: granted ? granted.violations : null,
        grantMaxIn1s: granted ? granted.maxInWindow : null,
        jobsPerCall: isValve && r.calls > 0 ? round(r.grants.length / r.calls, 2) : null,
        callsPerGrantedJob: isValve && r.grants.length > 0 ? round(r.calls / r.grants.length, 3) : null,
        commandsPerJob: round(commands / jobs, 2),
        redisCpuUsPerJob: round((redisCpuSec * 1e6) / jobs, 2),
        clientCpuPctPerProcess: round((r.clientCpuMs / processes / r.elapsedMs) * 100, 1),
        emptyCallsPct: isValve && r.calls > 0 ? round((r.emptyCalls / r.calls) * 100, 1) : null,
        backgroundPerSec: background,
        backgroundCpuPct: bgCpuPct,
      },
    });
  } finally {
    await bg?.stop();
    await server.stop();
  }
}

async function main(): Promise<void> {
  for (const [name, c] of Object.entries(cases)) {
    // The first two cases (4 processes, the history's names) run only when asked for by name.
    if (args.case ? args.case !== name : !name.includes('processes')) continue;
    for (const peer of args.peer ? [args.peer] : c.peers) {
      if (c.peers.includes(peer) || (args.peer && c.extra?.includes(peer))) {
        await measure(peer, name, c.burst, c.processes);
      }
    }
  }
  process.exit(0);
}

await main();
