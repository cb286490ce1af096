/**
 * Child process of bench/scenarios/group.ts, case '100000 keys once' (run with --expose-gc):
 * `keys` keys used once each through one limiter group, then, after its idle timeout, the heap
 * against the baseline taken before, the timers left and (on Redis) the keys left once every
 * TTL has passed. Prints one JSON line.
 *
 *   node --expose-gc --import tsx group-once.ts <peer> <keys> <idleMs> [redisPort]
 *
 * Peers: valve-group (memory store), valve-group-redis (redisStore with a subscriber),
 * bottleneck-group (Bottleneck.Group, local, `timeout` = idleMs), rlf-memory (one
 * RateLimiterMemory keyed by the key: rate-limiter-flexible's own way to hold many keys).
 * Every peer: 10 per second per key.
 */
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { loadValve } from './valve-module.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with --expose-gc');
const [peer = 'valve-group', keysArg = '100000', idleArg = '1000', portArg] = process.argv.slice(2);
const KEYS = Number(keysArg);
const IDLE = Number(idleArg);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const MB = 1024 * 1024;

function heap(): number {
  for (let i = 0; i < 4; i++) gc!();
  return process.memoryUsage().heapUsed;
}
const timers = (): number =>
  process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'Immediate').length;

let run: (key: string) => Promise<unknown>;
let close: () => Promise<void> = async () => {};
let client: Redis | undefined;
let subscriber: Redis | undefined;
let admin: Redis | undefined;
if (peer === 'valve-group' || peer === 'valve-group-redis') {
  const mod = await loadValve();
  let store: unknown;
  if (peer === 'valve-group-redis') {
    const port = Number(portArg);
    client = new Redis({ port, host: '127.0.0.1' });
    subscriber = new Redis({ port, host: '127.0.0.1' });
    admin = new Redis({ port, host: '127.0.0.1' });
    store = mod.redisStore!({ client, subscriber, prefix: 'bench' });
  }
  const group = mod.createValveGroup!({
    rules: [{ limit: 10, interval: 1000 }],
    idleTimeout: IDLE,
    ...(store ? { store } : {}),
  } as Parameters<NonNullable<typeof mod.createValveGroup>>[0]);
  run = (key) => group.run(key, () => {});
  close = () => group.close();
} else if (peer === 'bottleneck-group') {
  const group = new Bottleneck.Group({
    reservoir: 10,
    reservoirRefreshAmount: 10,
    reservoirRefreshInterval: 1000,
    timeout: IDLE,
  });
  run = (key) => group.key(key).schedule(async () => {});
  close = async () => {
    for (const key of group.keys()) await group.deleteKey(key);
  };
} else if (peer === 'rlf-memory') {
  const limiter = new RateLimiterMemory({ points: 10, duration: 1 });
  run = (key) => limiter.consume(key, 1);
} else {
  throw new Error(`unknown peer ${peer}`);
}

// Warm up the code paths (and the store's scripts) on keys of their own, then let them go.
for (let i = 0; i < 200; i++) await run(`warm-${i}`);
await sleep(IDLE * 2 + 1200);
const timersBefore = timers();
const baseline = heap();
const started = performance.now();
const BATCH = 1000;
for (let i = 0; i < KEYS; i += BATCH) {
  const runs: Promise<unknown>[] = [];
  for (let j = i; j < Math.min(KEYS, i + BATCH); j++) runs.push(run(`tenant-${j}`));
  await Promise.all(runs);
}
const usedMs = performance.now() - started;
const peak = heap();
const timersAtPeak = timers();
// The idle timeout, then the closes (and unsubscribes), and every TTL (1 s rules) has passed.
await sleep(IDLE + 2000);
const after = heap();
const redisKeys = admin ? await admin.dbsize() : null;
process.stdout.write(
  `${JSON.stringify({
    keys: KEYS,
    usedMs: Math.round(usedMs),
    baselineMB: baseline / MB,
    peakMB: peak / MB,
    afterMB: after / MB,
    timersBefore,
    timersAtPeak,
    timersAfter: timers(),
    redisKeys,
  })}\n`,
);
await close();
client?.disconnect();
subscriber?.disconnect();
admin?.disconnect();
process.exit(0);
