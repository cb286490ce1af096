/**
 * How the Redis store's calls behave on a cluster: the documented ioredis/iovalkey Cluster
 * settings never run an acquire twice when a node connection drops between execution and
 * answer; script loads are per node and a call valve gave up on is never sent again; a call
 * refused with TRYAGAIN (slot migration) is sent again; Cluster options valve cannot work with
 * are refused or warned about.
 */
import IORedis, { Cluster, Redis } from 'ioredis';
import Valkey from 'iovalkey';
import * as nodeRedis from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ioredisCluster } from '../../examples/client-settings.js';
import { createValve } from '../../src/index.js';
import { RedisStoreTimeoutError, redisStore } from '../../src/stores/redis/index.js';
import { ACQUIRE } from '../../src/stores/redis/scripts.generated.js';
import { type RedisCluster, startCluster } from '../helpers/servers.js';
import { sharedCluster, uniquePrefix } from '../helpers/shared-servers.js';
import { startClusterProxies } from '../helpers/tcp-proxy.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('Cluster options valve cannot work with', () => {
  it('retryDelayOnFailover above 0 (the ioredis default): one process warning', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    const a = new Cluster(sharedCluster().nodes, { lazyConnect: true });
    const b = new Cluster(sharedCluster().nodes, { lazyConnect: true, retryDelayOnFailover: 0 });
    try {
      redisStore({ client: b });
      redisStore({ client: a });
      redisStore({ client: a, prefix: 'other' });
      await sleep(20);
      const ours = warnings.filter((w) => (w as { code?: string }).code === 'VALVE_REDIS_CLUSTER_RESEND');
      expect(ours).toHaveLength(1);
      expect(ours[0]!.message).toMatch(/retryDelayOnFailover: 0/);
    } finally {
      process.off('warning', onWarning);
      a.disconnect();
      b.disconnect();
    }
  });

  it("a Cluster keyPrefix with a hash tag, or a sharded subscriber's keyPrefix: TypeError naming the option", () => {
    const nodes = sharedCluster().nodes;
    const opened: { disconnect(): void }[] = [];
    const cluster = (options: object) => {
      const c = new Cluster(nodes, { lazyConnect: true, retryDelayOnFailover: 0, ...options });
      opened.push(c);
      return c;
    };
    try {
      expect(() => redisStore({ client: cluster({ keyPrefix: '{app}:' }) })).toThrow(TypeError);
      expect(() => redisStore({ client: cluster({ keyPrefix: 'app}:' }) })).toThrow(/`keyPrefix`/);
      const client = cluster({ keyPrefix: 'app:' });
      const subscriber = cluster({ keyPrefix: 'app:', shardedSubscribers: true });
      expect(() => redisStore({ client, subscriber })).toThrow(TypeError);
      expect(() => redisStore({ client, subscriber })).toThrow(/`keyPrefix`.*pubsub: 'classic'/);
      // Without a subscriber, or with classic pub/sub (channels ioredis does not prefix): fine.
      expect(() => redisStore({ client })).not.toThrow();
      expect(() => redisStore({ client, subscriber, pubsub: 'classic' })).not.toThrow();
      // A standalone ioredis subscriber in sharded mode: the same.
      const standalone = new Redis({ lazyConnect: true, keyPrefix: 'app:' });
      opened.push(standalone);
      const plain = new Redis({ lazyConnect: true });
      opened.push(plain);
      expect(() => redisStore({ client: plain, subscriber: standalone, pubsub: 'sharded' })).toThrow(
        /keyPrefix/,
      );
    } finally {
      for (const c of opened) c.disconnect();
    }
  });
});

describe('the documented Cluster settings: a node connection dropped between execution and answer', () => {
  for (const family of ['ioredis', 'iovalkey'] as const) {
    it(`${family}: examples/client-settings.ts's Cluster runs the acquire once`, async () => {
      const proxies = await startClusterProxies(sharedCluster().nodes);
      const direct = new Cluster(sharedCluster().nodes, { retryDelayOnFailover: 0 });
      direct.on('error', () => {});
      // The example's Cluster, reaching the nodes through the proxies (natMap added, nothing
      // else changed), as ioredis or iovalkey.
      const Base = (family === 'ioredis' ? IORedis.Cluster : Valkey.Cluster) as unknown as typeof Cluster;
      class ThroughProxies extends Base {
        constructor(nodes: { host: string; port: number }[], options: object) {
          super(nodes, { ...options, natMap: proxies.natMap });
        }
      }
      const original = Object.getOwnPropertyDescriptor(IORedis, 'Cluster')!;
      Object.defineProperty(IORedis, 'Cluster', { configurable: true, get: () => ThroughProxies });
      let made: Awaited<ReturnType<typeof ioredisCluster>>;
      try {
        made = await ioredisCluster(proxies.seeds);
      } finally {
        Object.defineProperty(IORedis, 'Cluster', original);
      }
      const { client, subscriber } = made;
      client.on('error', () => {});
      subscriber.on('error', () => {});
      const prefix = uniquePrefix(`resend-${family}`);
      const id = 'x';
      const lease = { limit: 5, ttl: 60_000 };
      try {
        expect(client).toBeInstanceOf(ThroughProxies);
        const store = redisStore({ client, prefix, timeout: 3000 });
        const warm = await store.acquire({ id, rules: [], costs: [1], count: 1, lease });
        await store.release(
          id,
          warm.leases!.map((l) => l.token),
        );
        proxies.setLatency(300);
        const call = Promise.resolve(store.acquire({ id, rules: [], costs: [1], count: 1, lease }));
        const outcome = call.then(
          (r) => `granted ${r.granted}`,
          () => 'failed',
        );
        await sleep(450); // the request reached the server at ~300 ms and ran; the answer is held
        proxies.setLatency(0);
        proxies.dropAll();
        await outcome;
        await sleep(500);
        // One acquisition: one execution at most, so one lease at most (none was released).
        expect(await direct.zcard(`${prefix}:{${id}}:leases`)).toBeLessThanOrEqual(1);
      } finally {
        client.disconnect();
        subscriber.disconnect();
        direct.disconnect();
        await proxies.close();
      }
    }, 30_000);
  }
});

describe('on a cluster of its own', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterAll(async () => cluster?.stop());

  /** The master ("host:port") of a key's slot. */
  async function ownerOf(key: string): Promise<{ id: string; port: number }> {
    const slot = Number(await cluster.servers[0]!.command(['CLUSTER', 'KEYSLOT', key]));
    const text = String(await cluster.servers[0]!.command(['CLUSTER', 'NODES']));
    for (const line of text.split('\n')) {
      const parts = line.split(' ');
      for (const range of parts.slice(8)) {
        const [a, b] = range.split('-').map(Number);
        if (a !== undefined && slot >= a && slot <= (b ?? a)) {
          return { id: parts[0]!, port: Number(parts[1]!.split('@')[0]!.split(':')[1]) };
        }
      }
    }
    throw new Error(`no owner for ${key}`);
  }

  it("script loads: a call never waits for another node's load, nor is sent after valve gave up on it", async () => {
    const real = new Cluster(cluster.nodes, { retryDelayOnFailover: 0 });
    real.on('error', () => {});
    await real.ping();
    const prefix = 'loads';
    const slowId = 'slow';
    let fastId = 'fast0';
    const slowNode = (await ownerOf(`${prefix}:{${slowId}}:pause`)).port;
    for (let i = 1; (await ownerOf(`${prefix}:{${fastId}}:pause`)).port === slowNode; i++)
      fastId = `fast${i}`;
    // The slow node's script load (EVAL) is sent only after 3 s, like one stuck in a slow
    // link; every acquire EVALSHA to it is recorded (a release of the late answer's lease is not).
    const slowKey = `${prefix}:{${slowId}}:`;
    const evalshaAt: number[] = [];
    const client = new Proxy(real, {
      get(target, key, receiver) {
        if (key === 'eval') {
          return (script: string, numKeys: number, all: string[]) =>
            String(all[0]).startsWith(slowKey)
              ? sleep(3000).then(() => target.eval(script, numKeys, ...all))
              : target.eval(script, numKeys, ...all);
        }
        if (key === 'evalsha') {
          return (sha: string, numKeys: number, all: string[]) => {
            if (sha === ACQUIRE.sha && String(all[0]).startsWith(slowKey)) evalshaAt.push(performance.now());
            return target.evalsha(sha, numKeys, ...all);
          };
        }
        const value = Reflect.get(target, key, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    try {
      const store = redisStore({ client, prefix, timeout: 1000 });
      for (const s of cluster.servers) await s.command(['SCRIPT', 'FLUSH']);
      const lease = { limit: 5, ttl: 60_000 };
      // The first call loads the script on the slow node; the second waits for that load.
      const first = Promise.resolve(store.acquire({ id: slowId, rules: [], costs: [1], count: 1, lease }));
      first.catch(() => {});
      await sleep(50);
      const second = Promise.resolve(store.acquire({ id: slowId, rules: [], costs: [1], count: 1, lease }));
      second.catch(() => {});
      await sleep(50);
      // A call to another node loads the script there at once.
      const t0 = performance.now();
      const fast = await store.acquire({ id: fastId, rules: [], costs: [1], count: 1, lease });
      expect(fast.granted).toBe(1);
      expect(performance.now() - t0).toBeLessThan(500);
      await expect(second).rejects.toBeInstanceOf(RedisStoreTimeoutError);
      const gaveUpAt = performance.now();
      await sleep(3500); // the slow load went out and was answered
      expect(evalshaAt).toHaveLength(2); // both calls' first EVALSHA, answered NOSCRIPT
      expect(evalshaAt.filter((t) => t > gaveUpAt)).toEqual([]);
    } finally {
      real.disconnect();
    }
  }, 30_000);

  it("node-redis: a job under onStoreError 'throw' started during a slot migration (TRYAGAIN) runs", async () => {
    const client = nodeRedis.createCluster({
      rootNodes: cluster.nodes.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
    });
    client.on('error', () => {});
    await client.connect();
    const prefix = 'ta';
    const id = 'm';
    try {
      const valve = createValve({
        id,
        store: redisStore({ client, prefix }),
        rules: { limit: 100, interval: '1s', burst: 10 },
        concurrency: { limit: 5, scope: 'global', leaseTtl: 5000 },
        onStoreError: 'throw',
      });
      await valve.run(() => 0); // the id's keys exist: rule state, leases, fence
      const key = `${prefix}:{${id}}:pause`;
      const slot = Number(await cluster.servers[0]!.command(['CLUSTER', 'KEYSLOT', key]));
      const src = await ownerOf(key);
      const srcServer = cluster.servers.find((s) => s.port === src.port)!;
      const dstServer = cluster.servers.find((s) => s.port !== src.port)!;
      const dstId = String(await dstServer.command(['CLUSTER', 'MYID']));
      await dstServer.command(['CLUSTER', 'SETSLOT', slot, 'IMPORTING', src.id]);
      await srcServer.command(['CLUSTER', 'SETSLOT', slot, 'MIGRATING', dstId]);
      const one = (await srcServer.command(['CLUSTER', 'GETKEYSINSLOT', slot, 1])) as string[];
      await srcServer.command(['MIGRATE', dstServer.host, dstServer.port, '', 0, 5000, 'KEYS', ...one]);
      // The id's keys are split between the two nodes for 300 ms: the script gets TRYAGAIN.
      const job = valve
        .run(() => 'ran')
        .then(
          (v) => v,
          (e: { code?: string }) => `rejected ${e.code}`,
        );
      await sleep(300);
      for (;;) {
        const keys = (await srcServer.command(['CLUSTER', 'GETKEYSINSLOT', slot, 100])) as string[];
        if (!keys || keys.length === 0) break;
        await srcServer.command(['MIGRATE', dstServer.host, dstServer.port, '', 0, 5000, 'KEYS', ...keys]);
      }
      for (const s of cluster.servers) await s.command(['CLUSTER', 'SETSLOT', slot, 'NODE', dstId]);
      expect(await job).toBe('ran');
      await valve.close();
    } finally {
      client.destroy();
    }
  }, 30_000);
});
