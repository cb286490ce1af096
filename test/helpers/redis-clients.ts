/**
 * Connects every supported Redis client family to a test server, as a user would, for the
 * redisStore tests (in-process and in worker processes). Real clients, real servers: nothing
 * here is mocked.
 *
 *   const c = await connectClient('ioredis', { host, port });
 *   redisStore({ client: c.client, subscriber: c.subscriber, prefix });
 *   await c.close();
 */

import IORedis from 'ioredis';
import IORedis6 from 'ioredis6';
import Valkey from 'iovalkey';
import * as nodeRedis from 'redis';
import * as nodeRedis6 from 'redis6';
import type { ClusterProxies } from './tcp-proxy.js';

export type ClientFamily = 'ioredis' | 'ioredis6' | 'iovalkey' | 'redis' | 'redis6';
export const CLIENT_FAMILIES: readonly ClientFamily[] = [
  'ioredis',
  'ioredis6',
  'iovalkey',
  'redis',
  'redis6',
];

export interface Target {
  host: string;
  port: number;
  username?: string | undefined;
  password?: string | undefined;
  /** CA (PEM) to connect with TLS. */
  tlsCa?: string | undefined;
}

export interface Connected {
  family: ClientFamily;
  cluster: boolean;
  client: object;
  /** A second connection for pub/sub (on ioredis clusters: shardedSubscribers when possible). */
  subscriber: object;
  /** Closes both connections. */
  close(): Promise<void>;
}

type Closable = { quit?: () => Promise<unknown>; disconnect?: () => unknown; destroy?: () => unknown };

async function closeIo(c: Closable): Promise<void> {
  try {
    c.disconnect?.();
  } catch {}
}

async function closeNode(c: Closable): Promise<void> {
  try {
    if (c.destroy) c.destroy();
    else await c.quit?.();
  } catch {}
}

type Connectable = Closable & { connect(): Promise<unknown>; on(e: string, f: () => void): void };

/** Connects a client and its subscriber (errors are the tests' to observe through calls). */
async function pair(
  family: ClientFamily,
  cluster: boolean,
  client: Connectable,
  subscriber: Connectable,
  close: (c: Closable) => Promise<void>,
): Promise<Connected> {
  client.on('error', () => {});
  subscriber.on('error', () => {});
  await client.connect();
  await subscriber.connect();
  return {
    family,
    cluster,
    client,
    subscriber,
    close: async () => {
      await close(client);
      await close(subscriber);
    },
  };
}

/** A standalone client of `family` (and a subscriber) connected to `target`. */
export async function connectClient(family: ClientFamily, target: Target): Promise<Connected> {
  const auth = target.username ? { username: target.username, password: target.password } : {};
  if (family === 'ioredis' || family === 'ioredis6' || family === 'iovalkey') {
    const Ctor = (family === 'ioredis'
      ? IORedis
      : family === 'ioredis6'
        ? IORedis6
        : Valkey) as unknown as new (
      o: object,
    ) => Closable & { connect(): Promise<void>; on(e: string, f: () => void): void };
    const options = {
      host: target.host,
      port: target.port,
      lazyConnect: true,
      maxRetriesPerRequest: 2,
      ...auth,
      ...(target.tlsCa ? { tls: { ca: target.tlsCa } } : {}),
    };
    return pair(family, false, new Ctor(options), new Ctor(options), closeIo);
  }
  const lib = family === 'redis' ? nodeRedis : nodeRedis6;
  const url = `${target.tlsCa ? 'rediss' : 'redis'}://${target.host}:${target.port}`;
  const options = {
    url,
    ...auth,
    ...(target.tlsCa ? { socket: { tls: true as const, ca: target.tlsCa } } : {}),
  };
  const client = (
    lib.createClient as (o: object) => Closable & {
      connect(): Promise<unknown>;
      on(e: string, f: () => void): void;
      duplicate(): Closable & { connect(): Promise<unknown>; on(e: string, f: () => void): void };
    }
  )(options);
  return pair(family, false, client, client.duplicate(), closeNode);
}

/**
 * A cluster client of `family` connected to `nodes`. ioredis (5 and 6) gets a subscriber
 * Cluster with `shardedSubscribers: true`; iovalkey's Cluster cannot shard subscriptions, so
 * its subscriber is a plain Cluster (redisStore then reports `notifies: false`).
 */
export async function connectCluster(
  family: ClientFamily,
  nodes: readonly { host: string; port: number }[],
): Promise<Connected> {
  if (family === 'ioredis' || family === 'ioredis6' || family === 'iovalkey') {
    const Cluster = (family === 'ioredis'
      ? IORedis.Cluster
      : family === 'ioredis6'
        ? IORedis6.Cluster
        : Valkey.Cluster) as unknown as new (
      n: object[],
      o: object,
    ) => Closable & { on(e: string, f: () => void): void; connect(): Promise<void> };
    const seeds = nodes.map((n) => ({ host: n.host, port: n.port }));
    const client = new Cluster(seeds, { lazyConnect: true, redisOptions: { maxRetriesPerRequest: 2 } });
    const subscriber = new Cluster(seeds, {
      lazyConnect: true,
      ...(family === 'iovalkey' ? {} : { shardedSubscribers: true }),
    });
    return pair(family, true, client, subscriber, closeIo);
  }
  const lib = family === 'redis' ? nodeRedis : nodeRedis6;
  const rootNodes = nodes.map((n) => ({ url: `redis://${n.host}:${n.port}` }));
  type NodeCluster = Closable & { connect(): Promise<unknown>; on(e: string, f: () => void): void };
  const make = () => (lib.createCluster as (o: object) => NodeCluster)({ rootNodes });
  return pair(family, true, make(), make(), closeNode);
}

/**
 * A cluster command client as docs/redis.md and docs/timeouts-and-reconnection.md set it up
 * for production (no offline queue, bounded retries), straight to `nodes`.
 */
export async function documentedClusterClient(
  family: 'ioredis' | 'node-redis',
  nodes: readonly { host: string; port: number }[],
): Promise<{ client: object; close: () => void }> {
  if (family === 'ioredis') {
    const c = new IORedis.Cluster(
      nodes.map((n) => ({ host: n.host, port: n.port })),
      {
        lazyConnect: true,
        enableOfflineQueue: false,
        retryDelayOnFailover: 0,
        clusterRetryStrategy: (times) => Math.min(times * 100, 2000),
        redisOptions: { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0, connectTimeout: 5000 },
      },
    );
    c.on('error', () => {});
    await c.connect();
    return { client: c, close: () => c.disconnect() };
  }
  const c = await nodeRedis
    .createCluster({
      rootNodes: nodes.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
      defaults: NODE_DEFAULTS,
    })
    .on('error', () => {})
    .connect();
  return { client: c, close: () => c.destroy() };
}

/**
 * A sharded cluster subscriber as docs/redis.md sets it up, straight to `nodes`, or through
 * `proxies` (TCP proxies in front of each node, test/helpers/tcp-proxy.ts) when given.
 */
export async function documentedClusterSubscriber(
  family: 'ioredis' | 'node-redis',
  nodes: readonly { host: string; port: number }[],
  proxies?: ClusterProxies,
): Promise<{ sub: object; close: () => void }> {
  if (family === 'ioredis') {
    const s = proxies
      ? new IORedis.Cluster(proxies.seeds, { shardedSubscribers: true, natMap: proxies.natMap })
      : new IORedis.Cluster(
          nodes.map((n) => ({ host: n.host, port: n.port })),
          { shardedSubscribers: true },
        );
    s.on('error', () => {});
    return { sub: s, close: () => s.disconnect() };
  }
  const s = await nodeRedis
    .createCluster({
      rootNodes: (proxies ? proxies.seeds : nodes).map((n) => ({ url: `redis://${n.host}:${n.port}` })),
      ...(proxies ? { nodeAddressMap: proxies.natMap } : {}),
      defaults: NODE_DEFAULTS,
    })
    .on('error', () => {})
    .connect();
  return { sub: s, close: () => s.destroy() };
}

/** node-redis cluster defaults of the documented production set-up. */
const NODE_DEFAULTS = {
  disableOfflineQueue: true,
  socket: { connectTimeout: 5000, reconnectStrategy: (r: number) => Math.min(r * 100, 2000) },
};
