/** docs/redis.md, "ioredis": the connections, their 'error' listeners, the store, and how to close. */
// #region docs
import { Redis } from 'ioredis';
import { redisStore } from '../../src/index.js';
// #endregion docs

export async function setup(url: string) {
  // #region docs
  const client = new Redis(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
  const subscriber = client.duplicate(); // optional: wake-ups
  // ioredis emits 'error' on every failed (re)connection; with no listener it prints "Unhandled error event".
  client.on('error', (err) => console.warn('redis:', err.message));
  subscriber.on('error', (err) => console.warn('redis subscriber:', err.message));
  await Promise.all([client.connect(), subscriber.connect()]); // no offline queue: connect before use
  const store = redisStore({ client, subscriber });

  // On shutdown, once every valve using the store is closed (quit() fails while the server is down):
  const close = () => Promise.all([client, subscriber].map((c) => c.quit().catch(() => c.disconnect())));
  // #endregion docs
  return { store, close };
}
