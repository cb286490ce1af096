/**
 * On a Redis Cluster, the subscriber holds one sharded pub/sub connection per master. When the
 * one to a master drops (a network cut, a proxy or load balancer reset) while the master itself
 * stays up, neither ioredis `Cluster` (`shardedSubscribers: true`) nor a node-redis cluster
 * reports it on the cluster object: it stays ready while that shard's subscriber reconnects,
 * and a `resume` published on that master meanwhile reaches nobody. The store used to keep the
 * channel confirmed, so a valve held by a cached pause trusted it for up to 30 s (PAUSE_TRUST)
 * after another process had resumed the id. Now the channels of that master count as
 * unconfirmed until a probe comes back (docs/redis.md: while the subscriber is disconnected, a
 * cached pause is checked at least once a second), so the job starts while the cut lasts.
 *
 * Only the waiting process's subscriber goes through the TCP proxies; the pausing process and
 * both command clients reach the shared cluster directly.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createValve, redisStore } from '../../src/index.js';
import { keySlot } from '../../src/stores/redis/adapter.js';
import { documentedClusterClient, documentedClusterSubscriber } from '../helpers/redis-clients.js';
import { respCommand } from '../helpers/resp.js';
import { sharedCluster, uniquePrefix } from '../helpers/shared-servers.js';
import { type ClusterProxies, startClusterProxies } from '../helpers/tcp-proxy.js';

type Family = 'ioredis' | 'node-redis';
type Node = { host: string; port: number };

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const proxyGroups: ClusterProxies[] = [];
afterAll(async () => {
  await Promise.all(proxyGroups.map((p) => p.close()));
});

async function until(check: () => boolean, ms: number): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end && !check(); ) await sleep(50);
}

/** The index in `nodes` of the master serving `key`. */
async function masterOf(nodes: Node[], key: string): Promise<number> {
  const slot = keySlot(key);
  const ranges = (await respCommand(nodes[0]!, ['CLUSTER', 'SLOTS'])) as [number, number, [string, number]][];
  const range = ranges.find(([from, to]) => slot >= Number(from) && slot <= Number(to))!;
  const port = Number(range[2][1]);
  return nodes.findIndex((n) => n.port === port);
}

describe('cluster: the subscriber connection to one master drops while the master stays up', () => {
  for (const family of ['ioredis', 'node-redis'] as Family[]) {
    it(`${family}: the channels of that master stop counting as confirmed, and a resume made meanwhile starts the waiting job`, {
      timeout: 120_000,
    }, async () => {
      const { nodes } = sharedCluster();
      const proxies = await startClusterProxies(nodes);
      proxyGroups.push(proxies);
      const prefix = uniquePrefix('shard-drop');
      const id = 'job';
      const node = await masterOf(nodes, `${prefix}:{${id}}:wake`);
      expect(node).toBeGreaterThanOrEqual(0);
      const a = await documentedClusterClient(family, nodes);
      const b = await documentedClusterClient(family, nodes);
      const s = await documentedClusterSubscriber(family, nodes, proxies);
      const storeB = redisStore({ client: b.client, subscriber: s.sub, prefix });
      const pauser = createValve({ id, store: redisStore({ client: a.client, prefix }) });
      const waiter = createValve({ id, store: storeB });
      const unhandled: unknown[] = [];
      const onUnhandled = (err: unknown) => unhandled.push(err);
      process.on('unhandledRejection', onUnhandled);
      let release = () => {};
      try {
        await pauser.pause(60_000);
        let started = false;
        const job = waiter.run(() => {
          started = true;
        });
        await until(() => storeB.listening!(id), 30_000);
        expect(storeB.listening!(id)).toBe(true);
        expect(started).toBe(false);

        // Cut the subscriber's connection to that master (and keep it cut).
        proxies.proxies[node]!.refuse(true);
        proxies.proxies[node]!.dropAll();
        await until(() => !storeB.listening!(id), 20_000);
        expect(storeB.listening!(id)).toBe(false);

        // Resumed elsewhere while the cut lasts: the wake-up is lost, polling finds it.
        await pauser.resume();
        await until(() => started, 20_000); // was ~30 s (PAUSE_TRUST) before the fix
        expect(started).toBe(true);
        await job;

        // Once the connection is back, the channel is confirmed again.
        proxies.proxies[node]!.refuse(false);
        const held = waiter.run(() => new Promise<void>((r) => (release = r)));
        await until(() => storeB.listening!(id), 60_000);
        expect(storeB.listening!(id)).toBe(true);
        release();
        await held;
        expect(unhandled).toEqual([]);
      } finally {
        release();
        proxies.proxies[node]!.refuse(false);
        process.off('unhandledRejection', onUnhandled);
        await waiter.close();
        await pauser.close();
        a.close();
        b.close();
        s.close();
      }
    });
  }
});
