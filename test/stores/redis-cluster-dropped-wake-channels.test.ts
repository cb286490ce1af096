/**
 * The cluster variant of redis-dropped-wake-channels.test.ts: on a 3-master Redis Cluster with
 * sharded pub/sub, valves whose channels sit on one master go idle and are dropped while the
 * subscriber's connection to that master is down; once it is back, none of their channels is
 * left subscribed on any node (PUBSUB SHARDCHANNELS), the one still in use is, and wake-ups on
 * that master reach a waiting valve at once. Clients: ioredis `Cluster` and node-redis cluster
 * as docs/redis.md sets them up, with the settings of docs/timeouts-and-reconnection.md (the
 * node-redis subscriber takes the client's `defaults.disableOfflineQueue: true`: its
 * SUNSUBSCRIBE fails while the shard is down, and it kept the channel and subscribed it again
 * on reconnection). The outage is a SIGKILL and restart of the master, or a TCP proxy in front
 * of it that resets and refuses the subscriber's connections.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createValve, createValveGroup, redisStore } from '../../src/index.js';
import { CHANNEL_LINGER } from '../../src/stores/redis/subscriber.js';
import { documentedClusterClient, documentedClusterSubscriber } from '../helpers/redis-clients.js';
import { type RedisCluster, startCluster } from '../helpers/servers.js';
import { type ClusterProxies, startClusterProxies } from '../helpers/tcp-proxy.js';
import { resumeToStart } from '../helpers/wake-check.js';

type Family = 'ioredis' | 'redis';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const clusters: RedisCluster[] = [];
const proxyGroups: ClusterProxies[] = [];
afterAll(async () => {
  await Promise.all(proxyGroups.map((p) => p.close()));
  await Promise.all(clusters.map((c) => c.stop()));
});

async function until(check: () => Promise<boolean> | boolean, ms = 20_000): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end && !(await check()); ) await sleep(50);
}

/** A command client straight to the nodes and a subscriber (through `proxies` when given). */
async function connect(family: Family, cluster: RedisCluster, proxies?: ClusterProxies) {
  const kind = family === 'ioredis' ? 'ioredis' : 'node-redis';
  const c = await documentedClusterClient(kind, cluster.nodes);
  const s = await documentedClusterSubscriber(kind, cluster.nodes, proxies);
  const close = async () => {
    c.close();
    s.close();
  };
  return { client: c.client, subscriber: s.sub, close };
}

/** The shard channels of prefix `g` on every node, sorted. */
async function channels(cluster: RedisCluster): Promise<string[]> {
  const lists = await Promise.all(
    cluster.servers.map(async (s) => (await s.command(['PUBSUB', 'SHARDCHANNELS', 'g:*'])) as string[]),
  );
  return lists.flat().map(String).sort();
}

/** Three ids whose wake channel `g:{id}:wake` is served by `cluster.servers[node]`, and one elsewhere. */
async function ids(cluster: RedisCluster, node: number): Promise<{ on: string[]; elsewhere: string }> {
  const server = cluster.servers[node]!;
  const ranges = ((await server.command(['CLUSTER', 'NODES'])) as string)
    .split('\n')
    .find((line) => line.includes('myself'))!
    .split(' ')
    .slice(8)
    .map((r) => r.split('-').map(Number) as [number, number?]);
  const mine = (slot: number) => ranges.some(([a, b]) => slot >= a && slot <= (b ?? a));
  const on: string[] = [];
  let elsewhere = '';
  for (let i = 0; on.length < 3 || elsewhere === ''; i++) {
    const id = `i${i}`;
    const slot = Number(await server.command(['CLUSTER', 'KEYSLOT', `g:{${id}}:wake`]));
    if (mine(slot)) {
      if (on.length < 3) on.push(id);
    } else if (elsewhere === '') elsewhere = id;
  }
  return { on, elsewhere };
}

async function scenario(family: Family, outage: 'restart' | 'proxy') {
  const cluster = await startCluster();
  clusters.push(cluster);
  const proxies = outage === 'proxy' ? await startClusterProxies(cluster.nodes) : undefined;
  if (proxies) proxyGroups.push(proxies);
  const node = 1;
  const server = cluster.servers[node]!;
  const {
    on: [a, b, c],
    elsewhere: x,
  } = await ids(cluster, node);
  const { client, subscriber, close } = await connect(family, cluster, proxies);
  const store = redisStore({ client, subscriber, prefix: 'g', timeout: 300 });
  const group = createValveGroup({ rules: [{ limit: 100, interval: 1000 }], store, idleTimeout: 500 });
  const other = await connect(family, cluster);
  // Waits on `a`, on the master that was down, once it is back.
  const remote = createValve({ id: a!, store: redisStore({ client: other.client, prefix: 'g' }) });
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => unhandled.push(err);
  process.on('unhandledRejection', onUnhandled);
  const hold: (() => void)[] = [];
  try {
    const held = () => new Promise<void>((r) => hold.push(r));
    const keys = [a!, b!, c!, x];
    const runs = keys.map((k) => group.run(k, held));
    await until(() => hold.length === 4 && keys.every((k) => store.listening!(k)));
    expect(await channels(cluster)).toEqual(keys.map((k) => `g:{${k}}:wake`).sort());
    if (proxies) {
      proxies.proxies[node]!.refuse(true);
      proxies.proxies[node]!.dropAll();
    } else {
      server.kill('SIGKILL');
      await server.exited();
    }
    for (const release of hold.splice(0)) release();
    await Promise.allSettled(runs);
    await until(() => group.size === 0, 10_000); // idle and evicted while down
    expect(group.size).toBe(0);
    await sleep(CHANNEL_LINGER + 500); // and their channels dropped
    const gate = new Promise<void>((r) => hold.push(r)); // released whether or not the job started yet
    const again = group.run(c!, () => gate); // c has work again before the master is back
    await sleep(100);
    if (proxies) {
      proxies.proxies[node]!.refuse(false);
    } else {
      await server.restart(); // same port and nodes.conf: it rejoins as the same master
      await cluster.waitForOk(30_000);
    }
    const want = [`g:{${c}}:wake`];
    await until(async () => store.listening!(c!) && (await channels(cluster)).join() === want.join());
    expect(await channels(cluster)).toEqual(want);
    expect(store.listening!(c!)).toBe(true);
    // Wake-ups on that master work: a resume made elsewhere starts a waiting job at once.
    expect(
      await resumeToStart(
        remote,
        (job) => group.run(a!, job),
        () => store.listening!(a!),
      ),
    ).toBeLessThan(1000);
    for (const release of hold.splice(0)) release();
    await again;
    await until(async () => (await channels(cluster)).length === 0, 5000);
    expect(await channels(cluster)).toEqual([]);
    expect(unhandled).toEqual([]);
  } finally {
    for (const release of hold.splice(0)) release();
    process.off('unhandledRejection', onUnhandled);
    await group.close();
    await remote.close();
    await other.close();
    await close();
  }
}

describe.each(['ioredis', 'redis'] as const)(
  'sharded channels of valves dropped while a master was out of reach (%s cluster)',
  (family) => {
    it('the master SIGKILLed and restarted: no channel of a dropped valve stays subscribed', async () => {
      await scenario(family, 'restart');
    }, 90_000);

    it("the subscriber's connections to the master reset and refused: no channel of a dropped valve stays subscribed", async () => {
      await scenario(family, 'proxy');
    }, 90_000);
  },
);
