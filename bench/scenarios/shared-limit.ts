/**
 * Scenario 4, shared limit: 4 processes share 2000/s through one Redis for 10 s, each keeping
 * 500 jobs outstanding. Per peer: utilisation (all processes' starts in the 10 s after the first
 * start, over 2000 × 10) and violations over the merged start times (starts that make some
 * half-open 1 s window hold more than limit + burst - 1). For valve also on the grant times
 * reported by the store (AcquireResult.now, the store's clock), logged by wrapping the store,
 * with jobs granted per store call and the share of calls that granted nothing.
 */
import { emit, parseScenarioArgs, round, windowStats } from '../lib/common.js';
import { runFleet } from '../lib/fleet.js';
import { startRedis } from '../lib/redis-server.js';

export const cases: Record<string, { burst: number; peers: string[] }> = {
  'burst 1': {
    burst: 1,
    peers: ['valve-redis', 'valve-redis-plain-timers', 'bottleneck-redis', 'rlf-redis', 'ref-redis-poll'],
  },
  'burst 20': { burst: 20, peers: ['valve-redis', 'valve-redis-plain-timers'] },
};
export const peers = [
  'valve-redis',
  'valve-redis-plain-timers',
  'bottleneck-redis',
  'rlf-redis',
  'ref-redis-poll',
];

const args = parseScenarioArgs();
const durationMs = args.quick ? 2000 : 10_000;
const limit = 2000;
const intervalMs = 1000;
const processes = 4;

async function measure(peer: string, name: string, burst: number): Promise<void> {
  const server = await startRedis();
  try {
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
        emptyCallsPct: isValve && r.calls > 0 ? round((r.emptyCalls / r.calls) * 100, 1) : null,
      },
    });
  } finally {
    await server.stop();
  }
}

async function main(): Promise<void> {
  for (const [name, c] of Object.entries(cases)) {
    if (args.case && args.case !== name) continue;
    for (const peer of args.peer ? [args.peer] : c.peers) {
      if (c.peers.includes(peer)) await measure(peer, name, c.burst);
    }
  }
  process.exit(0);
}

await main();
