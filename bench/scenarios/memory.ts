/**
 * Scenario 5, memory under load (run with --expose-gc).
 * - "1M queued": heap bytes per queued job with 1 million jobs queued behind a blocked limiter.
 * - "through": 1 million no-op jobs (10 million with --full) through a never-binding limiter in
 *   chunks of 250k (500k with --full); heapUsed after a full GC following each chunk. A limiter that keeps nothing
 *   per finished job shows no growth from the first chunk to the last.
 */
import { createAdapter, NEVER_BINDS } from '../lib/adapters.js';
import { emit, gcHeap, noop, parseScenarioArgs, peakRssMb, round } from '../lib/common.js';
import { heapPerQueuedJob, runBatch } from '../lib/drive.js';

export const peers = ['valve', 'p-limit', 'p-queue'];
export const cases = ['1M queued', 'through'];

const args = parseScenarioArgs();
const queued = args.quick ? 100_000 : 1_000_000;
const through = args.quick ? 200_000 : args.full ? 10_000_000 : 1_000_000;
const chunk = args.quick ? 50_000 : args.full ? 500_000 : 250_000;

async function queuedCase(peer: string): Promise<void> {
  const bytes = await heapPerQueuedJob(peer, queued);
  emit({
    scenario: 'memory',
    case: '1M queued',
    peer,
    metrics: { bytesPerQueuedJob: round(bytes), peakRssMb: round(peakRssMb(), 1) },
    ...(queued !== 1_000_000 ? { notes: `${queued} queued` } : {}),
  });
}

async function throughCase(peer: string): Promise<void> {
  const adapter = createAdapter(peer);
  await adapter.setup(NEVER_BINDS);
  const samples: number[] = [];
  let ms = 0;
  for (let done = 0; done < through; done += chunk) {
    ms += await runBatch(adapter, chunk, noop);
    samples.push(gcHeap());
  }
  await adapter.teardown();
  const first = samples[0]!;
  const last = samples[samples.length - 1]!;
  emit({
    scenario: 'memory',
    case: 'through',
    peer,
    metrics: {
      jobs: through,
      jobsPerSec: round((through / ms) * 1000),
      heapFirstMb: round(first / 2 ** 20, 2),
      heapLastMb: round(last / 2 ** 20, 2),
      growthBytesPerMillion: round(((last - first) / (through - chunk)) * 1e6),
      peakRssMb: round(peakRssMb(), 1),
    },
  });
}

async function main(): Promise<void> {
  for (const peer of args.peer ? [args.peer] : peers) {
    if (!args.case || args.case === 'through') await throughCase(peer);
    if (!args.case || args.case === '1M queued') await queuedCase(peer);
  }
  process.exit(0);
}

await main();
