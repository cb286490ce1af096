/**
 * Experiment (not part of `npm run bench`): what the memory store's sweep costs the event loop
 * with many ids. Fills one memoryStore with `ids` ids, each holding the state of one GCRA rule of
 * `interval` (1h: nothing expires while measured; 5s: every id expires and is dropped), then for
 * `durationMs` of idle time records every gap longer than 10 ms between two ticks of a 1 ms timer
 * (the event loop held), Node's GC pauses longer than 10 ms beside them, the CPU used and what the
 * store still holds. Then, with the ids still held (in a checkout whose sweep goes in turns), it
 * times one pass of the sweep turn by turn, synchronously: once as it is, once with the store's
 * clock two days on (every id expired and dropped). `root` runs another checkout's sources (a
 * `git archive` of an older commit).
 *
 *   node --expose-gc --max-old-space-size=4096 --import tsx bench/experiments/memory-sweep.ts \
 *     [ids=1000000] [interval=1h] [durationMs=5000] [root=.]
 */

import { resolve } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

const ids = Number(process.argv[2] ?? 1_000_000);
const interval = process.argv[3] ?? '1h';
const durationMs = Number(process.argv[4] ?? 5000);
const root = resolve(process.argv[5] ?? '.');
const load = (path: string) => import(pathToFileURL(resolve(root, path)).href);
const { memoryStore } = (await load('src/index.js')) as typeof import('../../src/index.js');
const { inspectMemoryStore } = (await load(
  'src/stores/memory.js',
)) as typeof import('../../src/stores/memory.js');
const { normalizeRule } = (await load('src/rules/rule.js')) as typeof import('../../src/rules/rule.js');

const gc = (globalThis as { gc?: () => void }).gc;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const heapMb = async (): Promise<number> => {
  for (let i = 0; i < 4; i++) {
    gc?.();
    await sleep(5);
  }
  return process.memoryUsage().heapUsed / 1e6;
};

let offsetMs = 0;
const clock = { now: () => Date.now() + offsetMs, setTimeout, clearTimeout };
const store = memoryStore({ clock });
const contents = () => (store as unknown as Record<symbol, () => { ids: number }>)[inspectMemoryStore]!();
const rules = [normalizeRule({ limit: 10, interval, burst: 5 }, 'r')];
const h0 = await heapMb();
for (let i = 0; i < ids; i++) store.acquire({ id: `id-${i}`, rules, costs: [1], count: 1 });
const h1 = await heapMb();

const gcs: number[] = [];
const observer = new PerformanceObserver((list) => {
  for (const e of list.getEntries()) if (e.duration > 10) gcs.push(Math.round(e.duration));
});
observer.observe({ entryTypes: ['gc'] });
const stalls: number[] = [];
let last = performance.now();
const ticker = setInterval(() => {
  const now = performance.now();
  if (now - last > 10) stalls.push(Math.round(now - last));
  last = now;
}, 1);
const cpu0 = process.cpuUsage();
await sleep(durationMs);
const cpu = process.cpuUsage(cpu0);
clearInterval(ticker);
observer.disconnect();
const h2 = await heapMb();
const idsLeft = contents().ids;

/** The sweep's internals (memory-state.ts, IdSweeper), when it goes in turns. */
interface Turns {
  turn?: () => void;
  timer: ReturnType<typeof setTimeout> | null;
  walk: unknown;
  onOthers: boolean;
}
const sweeper = (store as unknown as { sweeper: Turns }).sweeper;
/** One pass, turn by turn: each turn's ms, sorted. */
function pass(): number[] {
  const times: number[] = [];
  do {
    if (sweeper.timer !== null) clearTimeout(sweeper.timer);
    sweeper.timer = null;
    const t0 = performance.now();
    sweeper.turn!();
    times.push(performance.now() - t0);
  } while (sweeper.walk !== null || sweeper.onOthers);
  if (sweeper.timer !== null) clearTimeout(sweeper.timer);
  sweeper.timer = null;
  return times.sort((a, b) => a - b);
}
const quantiles = (t: number[]) => ({
  turns: t.length,
  p50: +t[Math.floor(t.length / 2)]!.toFixed(2),
  p99: +t[Math.floor(t.length * 0.99)]!.toFixed(2),
  max: +t.at(-1)!.toFixed(2),
});
let turnMs: unknown = null;
if (typeof sweeper.turn === 'function' && idsLeft > 0) {
  pass(); // ends the pass under way
  const live = quantiles(pass());
  offsetMs = 2 * 86_400_000;
  const expired = quantiles(pass());
  turnMs = { live, expired, idsLeftAfter: contents().ids };
}
console.log(
  JSON.stringify({
    ids,
    interval,
    durationMs,
    heapMb: { before: Math.round(h0), filled: Math.round(h1), after: Math.round(h2) },
    idsLeft,
    maxStallMs: Math.max(0, ...stalls),
    stallsOver10ms: stalls,
    gcPausesOver10ms: gcs,
    cpuMsPerS: Math.round((cpu.user + cpu.system) / durationMs),
    turnMs,
  }),
);
process.exit(0);
