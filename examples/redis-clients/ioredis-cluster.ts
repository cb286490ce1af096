/** docs/redis.md, "ioredis-cluster": the connections, their 'error' listeners, the store, and how to close. */
// #region docs
import { Cluster } from 'ioredis';
import { redisStore } from '../../src/index.js';
// #endregion docs

export async function setup(nodes: { host: string; port: number }[]) {
  // #region docs
  // retryDelayOnFailover: 0, or the Cluster resends a command whose connection closed after it ran.
  const client = new Cluster(nodes, {
    lazyConnect: true,
    enableOfflineQueue: false,
    retryDelayOnFailover: 0,
  });
  // Sharded pub/sub (SSUBSCRIBE) needs shardedSubscribers on the subscriber's Cluster.
  const subscriber = new Cluster(nodes, { shardedSubscribers: true });
  client.on('error', (err) => console.warn('redis:', err.message));
  subscriber.on('error', (err) => console.warn('redis subscriber:', err.message));
  await client.connect(); // no offline queue: connect before use
  const store = redisStore({ client, subscriber });

  // On shutdown, once every valve using the store is closed (quit() fails while nodes are down):
  const close = () => Promise.all([client, subscriber].map((c) => c.quit().catch(() => c.disconnect())));
  // #endregion docs
  return { store, close };
}
