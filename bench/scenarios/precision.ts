/**
 * Scenario 2, precision: a saturated queue under one GCRA rule for 5 s, one process.
 * Cases: 1000/s burst 1, 200/s burst 1, 1000/s burst 10. Per peer: achieved rate and utilisation
 * (starts in the 5 s after the first start, over limit × 5 s), violations (starts that make some
 * half-open 1 s window hold more than limit + burst - 1), and p50/p99 lateness of the k-th start
 * against the ideal evenly spaced schedule anchored at the first start. For valve, violations are
 * also counted on the grant times its store reports (AcquireResult.now, the store's clock), which
 * is what valve's bounds are stated on; observed starts can bunch by the delay between a grant
 * and the job's first line. `cpuPct`: the process's CPU time over the run, in % of one core.
 * `valve-sliding` (case 200/s b1) runs the same limit as a sliding window (200 in any 1 s, all
 * at once allowed): the same bound, no lateness figure (its schedule is not evenly spaced).
 * `valve` is the default (`precision: 'timer'`, plain timers); `valve-spin` is `precision: 'spin'`.
 * `cpuUsPerStart`: the process's CPU time over the run ÷ the jobs started in it.
 * `--seconds N` runs each measurement for N s instead of 5 (a long-running process's code is
 * optimized by V8 after some thousands of starts, which a 5 s run at 200/s does not reach);
 * `lastUtilisationPct` is the utilisation over the run's last 5 s (the whole run at 5 s).
 */
import { createAdapter } from '../lib/adapters.js';
import { emit, lateness, parseScenarioArgs, percentile, round, windowStats } from '../lib/common.js';
import { runFor } from '../lib/drive.js';

export const peers = [
  'valve',
  'valve-spin',
  'valve-sliding',
  'p-queue',
  'p-queue-strict',
  'bottleneck',
  'rlf-memory',
  'ref-timer',
  'ref-spin',
  'ref-busy',
];
export const cases: Record<string, { limit: number; burst: number }> = {
  '1000/s b1': { limit: 1000, burst: 1 },
  '200/s b1': { limit: 200, burst: 1 },
  '1000/s b10': { limit: 1000, burst: 10 },
};

const args = parseScenarioArgs();
const secondsArg = process.argv.indexOf('--seconds');
const seconds = secondsArg >= 0 ? Number(process.argv[secondsArg + 1]) : 5;
if (!(seconds >= 1 && seconds <= 600))
  throw new RangeError(`--seconds must be 1 to 600, got ${process.argv[secondsArg + 1]}`);
const durationMs = args.quick ? 1000 : seconds * 1000;
/** The steady-state figure's span: the run's last 5 s (or all of a shorter run). */
const lastMs = Math.min(durationMs, 5000);
const intervalMs = 1000;

async function measure(peer: string, name: string, limit: number, burst: number): Promise<void> {
  const adapter = createAdapter(peer);
  const isValve = peer.startsWith('valve');
  const grants: number[] = [];
  await adapter.setup({ limit, intervalMs, burst, grantLog: isValve ? grants : undefined });
  const log: number[] = [];
  const cpu0 = process.cpuUsage();
  const run = await runFor(adapter, { window: 1000, durationMs: durationMs + 250, log });
  const cpu = process.cpuUsage(cpu0);
  await adapter.teardown();
  log.sort((a, b) => a - b);
  const s0 = log[0] ?? 0;
  const inRun = log.filter((t) => t < s0 + durationMs);
  const bound = limit + burst - 1;
  const w = windowStats(log, intervalMs, bound);
  const g = isValve ? windowStats(grants, intervalMs, bound) : undefined;
  const late = peer.includes('sliding') ? [] : lateness(inRun, intervalMs / limit, burst);
  const achieved = inRun.length / (durationMs / 1000);
  const lastFrom = s0 + durationMs - lastMs;
  const inLast = inRun.filter((t) => t >= lastFrom).length / (lastMs / 1000);
  emit({
    scenario: 'precision',
    case: name,
    peer,
    metrics: {
      achievedPerSec: round(achieved, 1),
      utilisationPct: round((achieved / limit) * 100, 2),
      lastUtilisationPct: round((inLast / limit) * 100, 2),
      violations: w.violations,
      maxIn1s: w.maxInWindow,
      bound,
      latenessP50Ms: late.length ? round(percentile(late, 50), 2) : null,
      latenessP99Ms: late.length ? round(percentile(late, 99), 2) : null,
      grantViolations: g ? g.violations : null,
      grantMaxIn1s: g ? g.maxInWindow : null,
      cpuPct: round(((cpu.user + cpu.system) / 1000 / run.elapsedMs) * 100, 1),
      cpuUsPerStart: round((cpu.user + cpu.system) / Math.max(1, log.length), 1),
    },
  });
}

async function main(): Promise<void> {
  for (const [name, c] of Object.entries(cases)) {
    if (args.case && args.case !== name) continue;
    for (const peer of args.peer ? [args.peer] : peers) await measure(peer, name, c.limit, c.burst);
  }
  process.exit(0);
}

await main();
