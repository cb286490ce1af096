/**
 * Child process of test/stores/group-rules-heap.test.ts (run with --expose-gc --import tsx):
 * `KEYS` keys of 20 characters used through one valve group (10 per second, memory store,
 * idleTimeout 300 ms), each as `mode` says, then, once their rule changes (one second) are over
 * and every valve was dropped, the heap per key against the baseline taken before. Prints one
 * JSON line.
 *
 *   node --expose-gc --import tsx group-rules-heap-child.ts <mode> <keys>
 *
 * Modes: `control` (used once), `set-first` (rules set before the first job, then used),
 * `set-back` (used, rules set, set back to the defaults), `set-back-used` (the same, then used
 * again), `set-while-used` (used, rules set, used again: the change converts), `set-twice-used`
 * (used, rules set, used, set back, used: the defaults count from the second change).
 */
import { createValveGroup } from '../../src/index.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with --expose-gc');
const [mode = 'control', keysArg = '100000'] = process.argv.slice(2);
const KEYS = Number(keysArg);
const IDLE = 300;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
function heap(): number {
  for (let i = 0; i < 4; i++) gc!();
  return process.memoryUsage().heapUsed;
}

const DEFAULTS = [{ limit: 10, interval: 1000 }];
const OTHER = { limit: 20, interval: 1000 };
const group = createValveGroup({ rules: DEFAULTS, idleTimeout: IDLE });

async function use(key: string): Promise<void> {
  const run = () => group.run(key, () => 0);
  switch (mode) {
    case 'set-first':
      await group.valve(key).setRules(OTHER);
      await run();
      return;
    case 'set-back':
    case 'set-back-used':
      await run();
      await group.valve(key).setRules(OTHER);
      await group.valve(key).setRules(DEFAULTS);
      if (mode === 'set-back-used') await run();
      return;
    case 'set-while-used':
      await run();
      await group.valve(key).setRules(OTHER);
      await run();
      return;
    case 'set-twice-used':
      await run();
      await group.valve(key).setRules(OTHER);
      await run();
      await group.valve(key).setRules(DEFAULTS);
      await run();
      return;
    default:
      await run();
  }
}

// Warm up the code paths on keys of their own, then let them go.
for (let i = 0; i < 200; i++) await use(`warm-${String(i).padStart(15, '0')}`);
await sleep(3000);
const baseline = heap();
for (let i = 0; i < KEYS; i += 500) {
  const runs: Promise<void>[] = [];
  for (let j = i; j < Math.min(KEYS, i + 500); j++) runs.push(use(`tenant-${String(j).padStart(13, '0')}`));
  await Promise.all(runs);
}
// The changes' transitions (one interval) are over, every valve is dropped, and the group's
// timer has looked at each key once more.
await sleep(1000 + 3 * IDLE + 1000);
const after = heap();
const size = group.size;
await group.close();
const closed = heap();
process.stdout.write(
  `${JSON.stringify({
    mode,
    keys: KEYS,
    size,
    perKey: (after - baseline) / KEYS,
    perKeyClosed: (closed - baseline) / KEYS,
  })}\n`,
);
