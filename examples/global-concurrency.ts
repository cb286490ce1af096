/**
 * docs/share-a-concurrency-limit.md: at most 4 exports at once across every process that uses
 * the id on one Redis. Run it with `REDIS_URL=redis://… npx tsx examples/global-concurrency.ts`;
 * it starts JOBS exports (default 6) and prints when each ran and with which fence, as JSON.
 * test/acceptance/docs-examples.test.ts runs two of these processes at once against a test
 * Redis and checks that never more than 4 exports overlap and that the fences all differ.
 */
// #region docs
import { Redis } from 'ioredis';
import { createValve, redisStore } from '../src/index.js';

// #endregion docs

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const jobs = Number(process.env.JOBS ?? 6);
const log: { start: number; end: number; fence: number }[] = [];

/** A stand-in for the provider's export call: it takes 600 ms. */
async function exportReport({ signal, fence }: { signal: AbortSignal; fence: number }) {
  const start = Date.now();
  await new Promise((done) => setTimeout(done, 600));
  signal.throwIfAborted();
  log.push({ start, end: Date.now(), fence });
  return fence;
}

// #region docs
const client = new Redis(url, {
  lazyConnect: true,
  enableOfflineQueue: false,
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 0,
});
const subscriber = client.duplicate({ enableOfflineQueue: true });
client.on('error', (err) => console.warn('redis:', err.message)); // without one: a stack trace per reconnect
subscriber.on('error', (err) => console.warn('redis subscriber:', err.message));
await client.connect();

const valve = createValve({
  id: 'reports-api:tenant-7',
  rules: { limit: 10, interval: '1s' },
  store: redisStore({ client, subscriber }),
  concurrency: { limit: 4, scope: 'global', leaseTtl: '30s' },
});
// #endregion docs

async function oneExport() {
  // #region docs
  await valve.run(async ({ signal, lease }) => {
    // At most 4 of these run at once across every process using this id on this Redis.
    return exportReport({ signal, fence: lease!.fence });
  });
  // #endregion docs
}

await Promise.all(Array.from({ length: jobs }, oneExport));
await valve.close();
await Promise.all([client, subscriber].map((c) => c.quit().catch(() => c.disconnect())));
console.log(JSON.stringify(log));
