/** docs/redis.md, "iovalkey": the connections, their 'error' listeners, the store, and how to close. */
// #region docs
import { Valkey } from 'iovalkey';
import { redisStore } from '../../src/index.js';
// #endregion docs

export async function setup(url: string) {
  // #region docs
  const client = new Valkey(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
  const subscriber = client.duplicate(); // optional: wake-ups
  client.on('error', (err) => console.warn('valkey:', err.message));
  subscriber.on('error', (err) => console.warn('valkey subscriber:', err.message));
  await Promise.all([client.connect(), subscriber.connect()]); // no offline queue: connect before use
  const store = redisStore({ client, subscriber });

  // On shutdown, once every valve using the store is closed (quit() fails while the server is down):
  const close = () => Promise.all([client, subscriber].map((c) => c.quit().catch(() => c.disconnect())));
  // #endregion docs
  return { store, close };
}
