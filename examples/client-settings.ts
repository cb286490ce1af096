/**
 * The client settings of docs/timeouts-and-reconnection.md: no offline queue, no resend of
 * sent commands (on an ioredis Cluster, none after a node connection closed either),
 * unanswered commands failed on disconnect, a bounded reconnect backoff, and an 'error'
 * listener on every connection (without one, node-redis ends the process at a disconnect and
 * ioredis prints a stack trace per failed reconnect attempt).
 * Each function connects with them and returns the connection(s);
 * test/acceptance/docs-examples.test.ts connects each to the suite's Redis (standalone or
 * cluster), runs a valve through it, and checks that a command fails at once while the client
 * is disconnected instead of waiting in a queue.
 */
// biome-ignore-all assist/source/organizeImports: each doc block shows its own import line
// #region ioredis
import { Redis } from 'ioredis';
// #endregion ioredis
// #region node-redis
import { createClient } from 'redis';
// #endregion node-redis
// #region node-redis-cluster
import { createCluster } from 'redis';
// #endregion node-redis-cluster

export interface Log {
  warn(err: unknown): void;
}

export async function ioredisClient(host: string, port: number, log: Log) {
  // #region ioredis
  const client = new Redis({
    host,
    port,
    lazyConnect: true,
    enableOfflineQueue: false, // fail commands while disconnected
    autoResendUnfulfilledCommands: false, // never resend a command sent before a disconnect
    maxRetriesPerRequest: 0, // reject unanswered commands when the connection closes
    retryStrategy: (times) => Math.min(times * 100, 2000), // keep reconnecting, backoff capped at 2 s
    connectTimeout: 5000,
  });
  client.on('error', (err) => log.warn(err)); // ioredis emits 'error' on every failed reconnect
  await client.connect(); // with no offline queue, wait until it is ready

  const subscriber = client.duplicate({ enableOfflineQueue: true }); // may queue its (re)subscriptions
  subscriber.on('error', (err) => log.warn(err)); // duplicate() copies no listeners
  // #endregion ioredis
  return { client, subscriber };
}

export async function ioredisCluster(nodes: { host: string; port: number }[], log: Log = console) {
  // #region ioredis-cluster
  const client = new Redis.Cluster(nodes, {
    lazyConnect: true,
    enableOfflineQueue: false,
    retryDelayOnFailover: 0, // never resend a command whose node connection closed: it may have run
    clusterRetryStrategy: (times) => Math.min(times * 100, 2000),
    redisOptions: { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0, connectTimeout: 5000 },
  });
  client.on('error', (err) => log.warn(err));
  await client.connect();
  const subscriber = new Redis.Cluster(nodes, { shardedSubscribers: true });
  subscriber.on('error', (err) => log.warn(err));
  // #endregion ioredis-cluster
  return { client, subscriber };
}

export async function nodeRedisClient(url: string, log: Log) {
  // #region node-redis
  const client = createClient({
    url, // e.g. 'redis://host:6379'
    disableOfflineQueue: true, // reject commands while reconnecting
    socket: {
      connectTimeout: 5000,
      reconnectStrategy: (retries) => Math.min(retries * 100, 2000),
    },
  });
  client.on('error', (err) => log.warn(err));
  await client.connect();
  const subscriber = client.duplicate({ disableOfflineQueue: false });
  subscriber.on('error', (err) => log.warn(err)); // duplicate() copies no listeners
  await subscriber.connect();
  // #endregion node-redis
  return { client, subscriber };
}

export async function nodeRedisCluster(rootNodes: { url: string }[], log: Log = console) {
  // #region node-redis-cluster
  const client = createCluster({
    rootNodes, // e.g. [{ url: 'redis://node-1:6379' }, { url: 'redis://node-2:6379' }]
    defaults: {
      disableOfflineQueue: true,
      socket: { connectTimeout: 5000, reconnectStrategy: (retries) => Math.min(retries * 100, 2000) },
    },
  });
  client.on('error', (err) => log.warn(err)); // without a listener, an 'error' ends the process
  await client.connect();
  // #endregion node-redis-cluster
  return client;
}
