/**
 * An ioredis or iovalkey client (Redis or Cluster) with `enableOfflineQueue: false`, handed to
 * the store while it still connects: the store holds its first calls until the client is ready
 * (each within its own deadline, and never sends one it gave up on), so the first job works in
 * every onStoreError mode, with no store error. Once the client has been ready, nothing waits:
 * a call made while it reconnects fails at once, as the offline queue setting asks. And the
 * set-ups of docs/redis.md are usable as soon as they return.
 */
import { Cluster as IOCluster, Redis as IORedis } from 'ioredis';
import { Valkey, Cluster as ValkeyCluster } from 'iovalkey';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setup as ioredisSetup } from '../../examples/redis-clients/ioredis.js';
import { setup as ioredisClusterSetup } from '../../examples/redis-clients/ioredis-cluster.js';
import { setup as iovalkeySetup } from '../../examples/redis-clients/iovalkey.js';
import { setup as iovalkeyClusterSetup } from '../../examples/redis-clients/iovalkey-cluster.js';
import { createValve, redisStore, type Store } from '../../src/index.js';
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { startProxy, type TcpProxy } from '../helpers/tcp-proxy.js';

type Client = IORedis | IOCluster;
const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** A client made and handed over at once, still connecting. */
const clients: [string, () => Client][] = [
  ['ioredis', () => new IORedis(sharedRedis().url, { enableOfflineQueue: false })],
  [
    'iovalkey',
    () => new Valkey(sharedRedis('valkey').url, { enableOfflineQueue: false }) as unknown as Client,
  ],
  [
    'ioredis Cluster',
    () => new IOCluster(sharedCluster().nodes, { enableOfflineQueue: false, retryDelayOnFailover: 0 }),
  ],
  [
    'iovalkey Cluster',
    () =>
      new ValkeyCluster(sharedCluster('valkey').nodes, {
        enableOfflineQueue: false,
        retryDelayOnFailover: 0,
      }) as unknown as Client,
  ],
];

/** Runs one job on a new valve of `store`: its outcome and the store errors it met. */
async function firstJob(store: Store, mode: 'wait' | 'throw' | 'open', id: string) {
  const valve = createValve({ id, rules: { limit: 10, interval: '1s' }, store, onStoreError: mode });
  const errors: string[] = [];
  valve.on('store-error', (err, ctx) => errors.push(`${ctx.operation}: ${String(err)}`));
  const out = await valve
    .run(() => 'ok')
    .catch((err: { code?: string; message?: string }) => `${err.code}: ${err.message}`);
  await valve.close();
  return { out, errors };
}

describe('a client handed over while it connects, enableOfflineQueue: false', () => {
  for (const mode of ['wait', 'throw', 'open'] as const) {
    it.each(clients)(
      `%s, onStoreError '${mode}': the first job goes through the store`,
      async (name, make) => {
        const client = make();
        client.on('error', () => {});
        try {
          expect(client.status).not.toBe('ready');
          const store = redisStore({ client, prefix: uniquePrefix('setups') });
          const { out, errors } = await firstJob(store, mode, `first-${name.replace(' ', '-')}-${mode}`);
          expect(out).toBe('ok');
          expect(errors).toEqual([]);
        } finally {
          client.disconnect();
        }
      },
    );
  }

  it('a lazyConnect client never connected: the store connects it, as its first command would', async () => {
    const client = new IORedis(sharedRedis().url, { lazyConnect: true, enableOfflineQueue: false });
    client.on('error', () => {});
    try {
      expect(client.status).toBe('wait');
      const store = redisStore({ client, prefix: uniquePrefix('setups') });
      expect(await firstJob(store, 'throw', 'first-lazy')).toEqual({ out: 'ok', errors: [] });
      expect(client.status).toBe('ready');
    } finally {
      client.disconnect();
    }
  });
});

describe('the wait is bounded by the call deadline and shared by the calls', () => {
  let proxy: TcpProxy;
  beforeAll(async () => {
    const { host, port } = sharedRedis();
    proxy = await startProxy({ target: { host, port } });
  });
  afterAll(() => proxy?.close());

  it('calls past their deadline reject with the timeout and are never sent; one listener set for all', async () => {
    proxy.blackhole(true); // connects, but the ready check gets no answer: status 'connect'
    const client = new IORedis(proxy.port, proxy.host, { enableOfflineQueue: false });
    client.on('error', () => {});
    const prefix = uniquePrefix('setups');
    try {
      while (client.status !== 'connect') await sleep(10);
      const events = ['ready', 'close', 'end'] as const;
      const before = events.map((e) => client.listenerCount(e));
      const store = redisStore({ client, prefix, timeout: 300 });
      const valves = Array.from({ length: 20 }, (_, i) =>
        createValve({
          id: `bounded-${i}`,
          rules: { limit: 10, interval: '1s' },
          store,
          onStoreError: 'throw',
        }),
      );
      for (const v of valves) v.on('store-error', () => {});
      const jobs = valves.map((v) =>
        v.run(() => 'ran').catch((err: { code?: string; cause?: unknown }) => err),
      );
      await sleep(50);
      expect(client.status).toBe('connect');
      // However many calls wait, one listener per event.
      expect(events.map((e) => client.listenerCount(e))).toEqual(before.map((n) => n + 1));
      const outcomes = await Promise.all(jobs);
      for (const out of outcomes) {
        expect(out).toMatchObject({ code: 'STORE_UNAVAILABLE', cause: { code: 'VALVE_REDIS_TIMEOUT' } });
      }
      proxy.blackhole(false);
      while ((client.status as string) !== 'ready') await sleep(10);
      await sleep(200);
      // None of the 20 acquires was sent once ready: valve had given up on them.
      expect(await client.keys(`${prefix}:*`)).toEqual([]);
      // Removed once the client is ready (ioredis drops its own connect-time ones too).
      for (const [i, e] of events.entries()) expect(client.listenerCount(e)).toBeLessThanOrEqual(before[i]!);
      await Promise.all(valves.map((v) => v.close()));
    } finally {
      proxy.blackhole(false);
      client.disconnect();
    }
  });

  it('once the client has been ready, a call made while it reconnects fails at once (no wait)', async () => {
    const client = new IORedis(proxy.port, proxy.host, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    client.on('error', () => {});
    try {
      const store = redisStore({ client, prefix: uniquePrefix('setups'), timeout: 60_000 });
      expect(await firstJob(store, 'throw', 'reconnect-a')).toEqual({ out: 'ok', errors: [] });
      proxy.refuse(true);
      proxy.dropAll();
      while (client.status === 'ready') await sleep(10);
      const valve = createValve({
        id: 'reconnect-b',
        rules: { limit: 10, interval: '1s' },
        store,
        onStoreError: 'throw',
      });
      valve.on('store-error', () => {});
      const err = await valve.run(() => 'ran').catch((e: { code?: string; cause?: Error }) => e);
      // The client's own refusal, not valve's 60 s deadline.
      expect(err).toMatchObject({ code: 'STORE_UNAVAILABLE' });
      expect(String((err as { cause?: Error }).cause?.message)).toMatch(/enableOfflineQueue/);
      await valve.close();
    } finally {
      proxy.refuse(false);
      client.disconnect();
    }
  });
});

describe("docs/redis.md's set-ups: usable as soon as they return", () => {
  const setups: [string, () => Promise<{ store: Store; close(): Promise<unknown> }>][] = [
    ['ioredis', () => ioredisSetup(sharedRedis().url)],
    ['ioredis-cluster', () => ioredisClusterSetup(sharedCluster().nodes)],
    ['iovalkey', () => iovalkeySetup(sharedRedis('valkey').url)],
    ['iovalkey-cluster', () => iovalkeyClusterSetup(sharedCluster('valkey').nodes)],
  ];
  it.each(setups)("%s: the first job under 'throw' runs, with no store error", async (name, make) => {
    const { store, close } = await make();
    try {
      expect(await firstJob(store, 'throw', `setup-${name}-${uniquePrefix('x').slice(-8)}`)).toEqual({
        out: 'ok',
        errors: [],
      });
    } finally {
      await close();
    }
  });
});
