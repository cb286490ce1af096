/**
 * docs/redis.md, "TLS": each client connected with the CA that signed the server's
 * certificate. test/acceptance/docs-examples.test.ts runs these against a TLS-only Redis and
 * a one-node TLS cluster of its own, and runs a valve through each client.
 */
import { readFileSync } from 'node:fs';
import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';

/**
 * `url`: a `rediss://` URL; `nodes`: a cluster's seeds; `ca.pem` in the working directory;
 * `log`: where connection errors go (see examples/client-settings.ts).
 */
export async function tlsClients(
  url: string,
  nodes: { host: string; port: number }[],
  nodeUrl: string,
  log: { warn(err: unknown): void } = console,
) {
  // #region tls
  // ioredis / iovalkey
  const client = new Redis(url, { tls: { ca: readFileSync('ca.pem') } });
  client.on('error', (err) => log.warn(err)); // ioredis emits 'error' on every failed reconnect
  // ioredis Cluster
  const cluster = new Cluster(nodes, {
    retryDelayOnFailover: 0, // see docs/timeouts-and-reconnection.md
    redisOptions: { tls: { ca: readFileSync('ca.pem') } },
  });
  cluster.on('error', (err) => log.warn(err));
  // node-redis: the listener before connect(); without one, an 'error' ends the process
  const nodeClient = createClient({ url, socket: { tls: true, ca: readFileSync('ca.pem') } });
  nodeClient.on('error', (err) => log.warn(err));
  await nodeClient.connect();
  // node-redis cluster
  const nodeCluster = createCluster({
    rootNodes: [{ url: nodeUrl }],
    defaults: { socket: { tls: true, ca: readFileSync('ca.pem') } },
  });
  nodeCluster.on('error', (err) => log.warn(err));
  await nodeCluster.connect();
  // #endregion tls
  return { client, cluster, nodeClient, nodeCluster };
}
