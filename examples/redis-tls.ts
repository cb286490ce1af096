/**
 * docs/redis.md, "TLS": each client connected with the CA that signed the server's
 * certificate. test/acceptance/docs-examples.test.ts runs these against a TLS-only Redis and
 * a one-node TLS cluster of its own, and runs a valve through each client.
 */
import { readFileSync } from 'node:fs';
import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';

/** `url`: a `rediss://` URL; `nodes`: a cluster's seeds; `ca.pem` in the working directory. */
export async function tlsClients(url: string, nodes: { host: string; port: number }[], nodeUrl: string) {
  // #region tls
  // ioredis / iovalkey
  const client = new Redis(url, { tls: { ca: readFileSync('ca.pem') } });
  // ioredis Cluster
  const cluster = new Cluster(nodes, {
    retryDelayOnFailover: 0, // see docs/timeouts-and-reconnection.md
    redisOptions: { tls: { ca: readFileSync('ca.pem') } },
  });
  // node-redis
  const nodeClient = await createClient({ url, socket: { tls: true, ca: readFileSync('ca.pem') } }).connect();
  // node-redis cluster
  const nodeCluster = await createCluster({
    rootNodes: [{ url: nodeUrl }],
    defaults: { socket: { tls: true, ca: readFileSync('ca.pem') } },
  }).connect();
  // #endregion tls
  return { client, cluster, nodeClient, nodeCluster };
}
