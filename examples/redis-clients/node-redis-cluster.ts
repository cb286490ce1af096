/** docs/redis.md, "node-redis-cluster": the connections, their 'error' listeners, the store, and how to close. */
// #region docs
import { createCluster } from 'redis';
import { redisStore } from '../../src/index.js';
// #endregion docs

export async function setup(nodes: { host: string; port: number }[]) {
  // #region docs
  const options = {
    rootNodes: nodes.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
    // Fail commands while a node is down: a queued one would keep close() from ever settling.
    defaults: { disableOfflineQueue: true },
  };
  const client = await createCluster(options)
    .on('error', (err) => console.warn('redis:', err.message))
    .connect();
  const subscriber = await createCluster(options)
    .on('error', (err) => console.warn('redis subscriber:', err.message))
    .connect();
  const store = redisStore({ client, subscriber }); // sSubscribe: sharded pub/sub

  // On shutdown, once every valve using the store is closed:
  const close = () => Promise.all([client.close(), subscriber.close()]);
  // #endregion docs
  return { store, close };
}
