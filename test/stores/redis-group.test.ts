/**
 * A valve group over redisStore: many keys through one group use the store's one client and one
 * subscriber connection (counted with CLIENT LIST on a server of its own), the bounds hold per key
 * on the store's clock, and once the valves are dropped no channel is left subscribed and every
 * key of those ids expires.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { checkRules, type Grant } from '../helpers/bounds.js';
import { type ClientFamily, connectCluster } from '../helpers/redis-clients.js';
import { respCommand } from '../helpers/resp.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { sharedCluster, uniquePrefix } from '../helpers/shared-servers.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Records each grant's store-clock time per id (the store's answer `now`). */
function logGrants(store: Store, grants: Map<string, Grant[]>): void {
  const acquire = store.acquire.bind(store);
  store.acquire = async (request) => {
    const r = await acquire(request);
    let list = grants.get(request.id);
    if (list === undefined) {
      list = [];
      grants.set(request.id, list);
    }
    for (let i = 0; i < r.granted; i++) list.push({ t: r.now, cost: request.costs[i]! });
    return r;
  };
}

/** Client connections of the server other than the one asking (CLIENT LIST). */
async function connections(server: RedisServer): Promise<{ count: number; sub: number }> {
  const list = String(await server.command(['CLIENT', 'LIST']))
    .split('\n')
    .filter((l) => l.trim() !== '' && !/ cmd=client\|list /.test(l) && !/ cmd=client /.test(l));
  const sub = list.reduce((n, l) => n + Number(/ sub=(\d+)/.exec(l)?.[1] ?? 0), 0);
  return { count: list.length, sub };
}

describe('valve group over redisStore', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('500 keys through one group: one client and one subscriber connection, bounds per key on the store clock', async () => {
    const client = new Redis({ host: server.host, port: server.port });
    const subscriber = new Redis({ host: server.host, port: server.port });
    client.on('error', () => {});
    subscriber.on('error', () => {});
    const store = redisStore({ client, subscriber, prefix: 'grp' });
    const grants = new Map<string, Grant[]>();
    logGrants(store, grants);
    const rules = [{ limit: 4, interval: '400ms' }];
    const enterprise = [{ limit: 8, interval: '400ms', burst: 2 }];
    const group = createValveGroup({
      rules,
      store,
      idleTimeout: 300,
      options: (key) => (key.endsWith('-0') ? { rules: enterprise } : undefined),
    });
    try {
      const KEYS = 500;
      const JOBS = 6;
      let peak = { count: 0, sub: 0 };
      const sampling = (async () => {
        for (let i = 0; i < 8; i++) {
          await sleep(100);
          const c = await connections(server);
          if (c.sub > peak.sub) peak = c;
        }
      })();
      const runs: Promise<unknown>[] = [];
      for (let k = 0; k < KEYS; k++) {
        for (let j = 0; j < JOBS; j++) runs.push(group.run(`inst-${k}`, () => j));
      }
      await Promise.all(runs);
      await sampling;
      expect(group.stats()).toMatchObject({ started: KEYS * JOBS, created: KEYS });
      // Two connections in all, the subscriber listening to many ids' channels at once.
      expect(peak.count).toBe(2);
      expect(peak.sub).toBeGreaterThan(100);
      for (let k = 0; k < KEYS; k++) {
        const id = `inst-${k}`;
        const g = grants.get(id) ?? [];
        expect(g.length).toBe(JOBS);
        expect(checkRules(g, id.endsWith('-0') ? enterprise : rules)).toEqual([]);
      }
      // Idle keys: dropped, their channels unsubscribed, their Redis keys expiring.
      await sleep(1000);
      expect(group.size).toBe(0);
      expect(await connections(server)).toEqual({ count: 2, sub: 0 });
      const ttls = (await client.eval(
        "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do if redis.call('PTTL', k) < 0 then n = n + 1 end end return n",
        0,
        'grp:*',
      )) as number;
      expect(ttls).toBe(0);
      await sleep(500);
      expect(await client.eval("return #redis.call('KEYS', ARGV[1])", 0, 'grp:*')).toBe(0);
    } finally {
      await group.close();
      client.disconnect();
      subscriber.disconnect();
    }
  }, 60_000);

  for (const family of ['ioredis', 'redis'] as ClientFamily[]) {
    it(`Redis Cluster (${family}): 300 keys share one subscriber over sharded channels, bounds per key, nothing left`, async () => {
      const { nodes } = sharedCluster();
      const c = await connectCluster(family, nodes);
      const prefix = uniquePrefix('grp-cluster');
      const store = redisStore({ client: c.client, subscriber: c.subscriber, prefix });
      const grants = new Map<string, Grant[]>();
      logGrants(store, grants);
      const rules = [{ limit: 3, interval: '300ms' }];
      const group = createValveGroup({ rules, store, idleTimeout: 300 });
      const shardChannels = async (): Promise<number> => {
        let n = 0;
        for (const node of nodes) {
          const list = (await respCommand(node, ['PUBSUB', 'SHARDCHANNELS', `${prefix}:*`])) as unknown[];
          n += list.length;
        }
        return n;
      };
      try {
        const KEYS = 300;
        const runs: Promise<unknown>[] = [];
        for (let k = 0; k < KEYS; k++) for (let j = 0; j < 5; j++) runs.push(group.run(`org-${k}`, () => j));
        await sleep(400);
        // The keys' channels, spread over the shards, all on the one subscriber.
        expect(await shardChannels()).toBeGreaterThan(100);
        await Promise.all(runs);
        for (let k = 0; k < KEYS; k++) {
          const g = grants.get(`org-${k}`) ?? [];
          expect(g.length).toBe(5);
          expect(checkRules(g, rules)).toEqual([]);
        }
        await sleep(1200);
        expect(group.size).toBe(0);
        expect(await shardChannels()).toBe(0);
      } finally {
        await group.close();
        await c.close();
      }
    }, 60_000);
  }
});
