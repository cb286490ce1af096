/**
 * Scenario 1, overhead: 200k no-op jobs through a limiter whose rule never binds, one process.
 * Per peer: jobs/s, peak RSS, and heap bytes per queued job (200k enqueued behind a blocked
 * limiter before any runs; heapUsed after a full GC before and after, divided).
 * Run with --expose-gc.
 */
import { createAdapter, NEVER_BINDS } from '../lib/adapters.js';
import { emit, noop, parseScenarioArgs, peakRssMb, round } from '../lib/common.js';
import { heapPerQueuedJob, runBatch } from '../lib/drive.js';

export const peers = ['valve', 'valve-otel', 'p-limit', 'p-queue', 'bottleneck', 'rlf-memory'];

const args = parseScenarioArgs();
const N = args.quick ? 20_000 : 200_000;
/** Bottleneck's local mode runs a few hundred jobs/s: fewer jobs keep its run within seconds. */
const jobsFor = (peer: string): number => (peer === 'bottleneck' ? Math.min(N, args.quick ? 1000 : 2000) : N);

async function throughput(peer: string, n: number): Promise<number> {
  const adapter = createAdapter(peer);
  await adapter.setup(NEVER_BINDS);
  const ms = await runBatch(adapter, n, noop);
  await adapter.teardown();
  return (n / ms) * 1000;
}

async function main(): Promise<void> {
  for (const peer of args.peer ? [args.peer] : peers) {
    const n = jobsFor(peer);
    await throughput(peer, Math.max(1000, n >> 3)); // warm-up
    const jobsPerSec = await throughput(peer, n);
    const rss = peakRssMb();
    const bytes = await heapPerQueuedJob(peer, N);
    emit({
      scenario: 'overhead',
      case: 'never-binds',
      peer,
      metrics: { jobsPerSec: round(jobsPerSec), peakRssMb: round(rss, 1), bytesPerQueuedJob: round(bytes) },
      ...(n !== N ? { notes: `${n} jobs` } : {}),
    });
  }
  process.exit(0);
}

await main();
