/**
 * Child process of test/unit/group-close-gc.test.ts (run with --expose-gc --import tsx): one
 * valve group with `KEYS` live valves (each ran one job; idleTimeout 1 h, so none is evicted),
 * then `await group.close()` while the group object stays referenced. Prints one JSON line: how
 * many of those valves are still reachable (WeakRefs) before and after the close, and the heap
 * against the baseline taken before the group was used.
 *
 *   node --expose-gc --import tsx group-close-heap-child.ts <keys>
 */
import { createValveGroup } from '../../src/index.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with --expose-gc');
const KEYS = Number(process.argv[2] ?? '5000');
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Several collections, with turns between them (a WeakRef target lives to the end of its turn). */
async function heap(): Promise<number> {
  for (let i = 0; i < 6; i++) {
    gc!();
    await sleep(10);
  }
  return process.memoryUsage().heapUsed;
}

// Warm up the code paths on a group of their own, then let it go.
const warm = createValveGroup({ rules: [{ limit: 10, interval: '100ms' }], idleTimeout: '1h' });
for (let i = 0; i < 200; i++) await warm.run(`warm-${i}`, () => i);
await warm.close();
const baseline = await heap();

const group = createValveGroup({ rules: [{ limit: 10, interval: '100ms' }], idleTimeout: '1h' });
const refs: WeakRef<object>[] = [];
const BATCH = 1000;
for (let i = 0; i < KEYS; i += BATCH) {
  const runs: Promise<unknown>[] = [];
  for (let j = i; j < Math.min(KEYS, i + BATCH); j++) {
    refs.push(new WeakRef(group.valve(`tenant-${j}`)));
    runs.push(group.run(`tenant-${j}`, () => j));
  }
  await Promise.all(runs);
}
const alive = () => refs.filter((r) => r.deref() !== undefined).length;
const open = await heap();
const aliveOpen = alive();
await group.close();
const closed = await heap();
const aliveClosed = alive();
const stats = group.stats(); // the group is still referenced here
process.stdout.write(
  `${JSON.stringify({
    keys: KEYS,
    aliveOpen,
    aliveClosed,
    openBytes: open - baseline,
    closedBytes: closed - baseline,
    size: group.size,
    closed: stats.closed,
    started: stats.started,
  })}\n`,
);
