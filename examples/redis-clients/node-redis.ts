/** docs/redis.md, "node-redis": the connections, their 'error' listeners, the store, and how to close. */
// #region docs
import { createClient } from 'redis';
import { redisStore } from '../../src/index.js';
// #endregion docs

export async function setup(url: string) {
  // #region docs
  // node-redis throws an 'error' event that has no listener, which ends the process.
  const client = await createClient({ url, disableOfflineQueue: true })
    .on('error', (err) => console.warn('redis:', err.message))
    .connect();
  const subscriber = await client
    .duplicate() // optional: wake-ups
    .on('error', (err) => console.warn('redis subscriber:', err.message))
    .connect();
  const store = redisStore({ client, subscriber });

  // On shutdown, once every valve using the store is closed:
  const close = () => Promise.all([client.close(), subscriber.close()]);
  // #endregion docs
  return { store, close };
}
