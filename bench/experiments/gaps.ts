/**
 * Experiment: the distribution of gaps between consecutive starts of one saturated limiter
 * (default valve, 1000/s burst 1, 3 s). Shows where lateness comes from (timer granularity,
 * rounding, early timers that must re-arm).
 *
 *   node --import tsx bench/experiments/gaps.ts [peer] [limit] [burst]
 */
import { createAdapter } from '../lib/adapters.js';
import { runFor } from '../lib/drive.js';

const peer = process.argv[2] ?? 'valve';
const limit = Number(process.argv[3] ?? 1000);
const burst = Number(process.argv[4] ?? 1);
const adapter = createAdapter(peer);
await adapter.setup({ limit, intervalMs: 1000, burst });
const log: number[] = [];
await runFor(adapter, { window: 1000, durationMs: 3000, log });
await adapter.teardown();
const spacing = 1000 / limit;
const buckets = new Map<number, { n: number; ms: number }>();
for (let i = 1; i < log.length; i++) {
  const gap = log[i]! - log[i - 1]!;
  const b = Math.min(4, Math.floor((gap / spacing) * 4) / 4); // quarter-spacing buckets, 4+ together
  const e = buckets.get(b) ?? { n: 0, ms: 0 };
  e.n++;
  e.ms += gap;
  buckets.set(b, e);
}
process.stdout.write(
  `${peer} ${limit}/s burst ${burst}: ${log.length} starts in 3 s (${((log.length / (3 * limit)) * 100).toFixed(1)}%)\n`,
);
for (const [b, e] of [...buckets.entries()].sort((x, y) => x[0] - y[0])) {
  const label = b >= 4 ? '≥ 4.00      ' : `${b.toFixed(2)}–${(b + 0.25).toFixed(2)}`;
  process.stdout.write(
    `  gap ${label} × spacing: ${String(e.n).padStart(5)} gaps, ${e.ms.toFixed(0).padStart(5)} ms\n`,
  );
}
process.exit(0);
