/**
 * Child process of test/stores/group-heap.test.ts (run with --expose-gc --import tsx):
 * `KEYS` keys used once each through one valve group, then, after its idleTimeout, the heap
 * against the baseline taken before the group was used, and the timers left. Prints one JSON line.
 *
 *   node --expose-gc --import tsx group-heap-child.ts <keys> <idleTimeoutMs> [redis-url prefix]
 */
import { Redis } from 'ioredis';
import { createValveGroup, redisStore, type Store } from '../../src/index.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with --expose-gc');
const [keysArg = '100000', idleArg = '500', url, prefix = 'valve-heap'] = process.argv.slice(2);
const KEYS = Number(keysArg);
const IDLE = Number(idleArg);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function heap(): number {
  for (let i = 0; i < 4; i++) gc!();
  return process.memoryUsage().heapUsed;
}
const timers = () =>
  process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'Immediate').length;

let client: Redis | undefined;
let subscriber: Redis | undefined;
let store: Store | undefined;
if (url !== undefined) {
  client = new Redis(url);
  subscriber = new Redis(url);
  client.on('error', () => {});
  subscriber.on('error', () => {});
  store = redisStore({ client, subscriber, prefix });
}
const group = createValveGroup({
  rules: [{ limit: 10, interval: '100ms' }],
  idleTimeout: IDLE,
  ...(store ? { store } : {}),
});
// Warm up the code paths (and the store's scripts) on keys of their own, then let them go.
for (let i = 0; i < 200; i++) await group.run(`warm-${i}`, () => i);
await sleep(IDLE * 2 + 300);
const timersBefore = timers();
const baseline = heap();

const started = performance.now();
const BATCH = 1000;
for (let i = 0; i < KEYS; i += BATCH) {
  const runs: Promise<unknown>[] = [];
  for (let j = i; j < Math.min(KEYS, i + BATCH); j++) runs.push(group.run(`tenant-${j}`, () => j));
  await Promise.all(runs);
}
const usedMs = performance.now() - started;
const peak = heap();
const sizeAtPeak = group.size;
// idleTimeout, then enough for the closes (and the subscriber's unsubscribes) to finish.
await sleep(IDLE + 1000);
const after = heap();
const stats = group.stats();
process.stdout.write(
  `${JSON.stringify({
    keys: KEYS,
    usedMs: Math.round(usedMs),
    baseline,
    peak,
    after,
    sizeAtPeak,
    size: group.size,
    evicted: stats.evicted,
    started: stats.started,
    timersBefore,
    timersAfter: timers(),
  })}\n`,
);
await group.close();
client?.disconnect();
subscriber?.disconnect();
