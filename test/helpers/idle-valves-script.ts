/**
 * Run with `node --expose-gc --import tsx test/helpers/idle-valves-script.ts [redis-url]`: creates
 * throwaway valves on one store, lets each run one job and go idle without close(), drops them,
 * and prints how many bytes of heap each one still holds after GC (JSON on stdout).
 * With a Redis URL: a redisStore with a subscriber (ioredis); also prints the channels still
 * subscribed (PUBSUB CHANNELS under the prefix).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { createValve, memoryStore, redisStore, type Store } from '../../src/index.js';
import { FULL_SWEEP_MS } from '../../src/stores/memory-state.js';
import { CHANNEL_LINGER } from '../../src/stores/redis/subscriber.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with node --expose-gc');

async function collect(): Promise<number> {
  for (let i = 0; i < 6; i++) {
    gc!();
    await sleep(10);
  }
  return process.memoryUsage().heapUsed;
}

async function main(): Promise<void> {
  const url = process.argv[2];
  const count = Number(process.argv[3] ?? 20_000);
  let store: Store;
  let done = async () => {};
  let channels = async (): Promise<string[]> => [];
  const prefix = `t:idle:${randomBytes(4).toString('hex')}`;
  if (url) {
    const { Redis } = await import('ioredis');
    const client = new Redis(url, { lazyConnect: false });
    const subscriber = new Redis(url, { lazyConnect: false });
    const admin = new Redis(url, { lazyConnect: false });
    store = redisStore({ client, subscriber, prefix });
    done = async () => {
      client.disconnect();
      subscriber.disconnect();
      admin.disconnect();
    };
    channels = async () => (await admin.pubsub('CHANNELS', `${prefix}:*`)) as string[];
  } else {
    store = memoryStore();
  }
  const concurrency = { limit: 4, scope: 'global' as const, leaseTtl: 30_000 };
  // Each throwaway valve: its own id, a rule and a global limit; one job; never closed.
  const batch = async (from: number, n: number, width: number) => {
    for (let i = from; i < from + n; i += width) {
      const runs: Promise<unknown>[] = [];
      for (let k = i; k < Math.min(from + n, i + width); k++) {
        const valve = createValve({
          id: `v${k}`,
          store,
          rules: { limit: 1000, interval: '1s' },
          concurrency,
        });
        runs.push(valve.run(() => k));
      }
      await Promise.all(runs);
    }
    // Releases of the last ones; a Redis channel lingers a moment after its last listener left;
    // the store keeps each id's state (its rule set's record) for one rule interval (1 s), and
    // the memory store drops expired state within FULL_SWEEP_MS.
    await sleep(Math.max(CHANNEL_LINGER, 1000 + FULL_SWEEP_MS) + 300);
  };
  await batch(0, 2000, 100); // warm-up: code, caches, the store's own tables
  const before = await collect();
  await batch(10_000_000, count, 100);
  const after = await collect();
  const left = await channels();
  await done();
  process.stdout.write(
    `${JSON.stringify({ perValve: (after - before) / count, count, channels: left.length })}\n`,
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
