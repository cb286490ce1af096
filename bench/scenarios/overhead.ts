/**
 * Scenario 1, overhead: 200k no-op jobs through a limiter whose rule never binds, one process.
 * Per peer: jobs/s, peak RSS, and heap bytes per queued job (200k enqueued behind a blocked
 * limiter before any runs; heapUsed after a full GC before and after, divided).
 * Run with --expose-gc.
 */
import { type Adapter, createAdapter, NEVER_BINDS } from '../lib/adapters.js';
import { emit, gcHeap, noop, parseScenarioArgs, peakRssMb, round, sleep } from '../lib/common.js';
import { runBatch } from '../lib/drive.js';

export const peers = ['valve', 'p-limit', 'p-queue', 'bottleneck', 'rlf-memory'];

const args = parseScenarioArgs();
const N = args.quick ? 20_000 : 200_000;
/** Bottleneck's local mode runs a few hundred jobs/s: fewer jobs keep its run within seconds. */
const jobsFor = (peer: string): number => (peer === 'bottleneck' ? Math.min(N, args.quick ? 1000 : 5000) : N);

async function throughput(peer: string, n: number): Promise<number> {
  const adapter = createAdapter(peer);
  await adapter.setup(NEVER_BINDS);
  const ms = await runBatch(adapter, n, noop);
  await adapter.teardown();
  return (n / ms) * 1000;
}

const never = (): Promise<never> => new Promise<never>(() => {});

async function heapPerQueuedJob(peer: string, n: number): Promise<number> {
  const adapter: Adapter = createAdapter(peer);
  // Blocked: one job per hour and one at a time, the first job never finishes.
  await adapter.setup({ limit: 1, intervalMs: 3_600_000, burst: 1, concurrency: 1 });
  adapter.schedule(never).catch(() => {});
  await sleep(20);
  const held: (Promise<unknown> | null)[] = [];
  for (let i = 0; i < n; i++) held.push(null);
  const before = gcHeap();
  for (let i = 0; i < n; i++) held[i] = adapter.schedule(noop);
  await sleep(50); // let deferred work (microtasks, first store calls) happen
  const after = gcHeap();
  if (process.env.BENCH_DEBUG) console.error(peer, before, after);
  if (held.length !== n) throw new Error('unreachable');
  return (after - before) / n;
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
