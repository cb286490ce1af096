import net from 'node:net';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { respCommand } from '../helpers/resp.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { startProxy, type TcpProxy } from '../helpers/tcp-proxy.js';

describe('tcp fault proxy', () => {
  let proxy: TcpProxy;
  let clients: Redis[] = [];
  const client = () => {
    const c = new Redis({ host: proxy.host, port: proxy.port, maxRetriesPerRequest: 1, lazyConnect: true });
    c.on('error', () => {});
    clients.push(c);
    return c;
  };
  const ping = () => respCommand({ host: proxy.host, port: proxy.port }, ['PING'], 2_000);

  beforeEach(async () => {
    proxy = await startProxy({ target: sharedRedis() });
  });
  afterEach(async () => {
    for (const c of clients) c.disconnect();
    clients = [];
    await proxy.close();
  });

  it('forwards traffic both ways', async () => {
    const c = client();
    await c.connect();
    const key = `${uniquePrefix('proxy')}:k`;
    await c.set(key, 'x'.repeat(200_000), 'PX', 10_000);
    expect((await c.get(key))?.length).toBe(200_000);
    expect(proxy.connections()).toBe(1);
  });

  it('adds latency in each direction and removes it again', async () => {
    const c = client();
    await c.connect();
    proxy.setLatency(150);
    let t = performance.now();
    expect(await c.ping()).toBe('PONG');
    expect(performance.now() - t).toBeGreaterThanOrEqual(290);
    proxy.setLatency(0);
    t = performance.now();
    await c.ping();
    expect(performance.now() - t).toBeLessThan(150);
  });

  it('blackhole holds bytes without closing, then delivers them', async () => {
    const c = client();
    await c.connect();
    proxy.blackhole(true);
    await expect(respCommand({ host: proxy.host, port: proxy.port }, ['PING'], 300)).rejects.toThrow(
      /timed out/,
    );
    const t = performance.now();
    const pending = c.ping();
    setTimeout(() => proxy.blackhole(false), 300);
    expect(await pending).toBe('PONG');
    expect(performance.now() - t).toBeGreaterThanOrEqual(290);
    expect(c.status).toBe('ready');
  });

  it('dropAll resets current connections; new ones work', async () => {
    const socket = net.connect({ host: proxy.host, port: proxy.port });
    await new Promise((res) => socket.once('connect', res));
    await new Promise((res) => setTimeout(res, 20));
    expect(proxy.connections()).toBe(1);
    const closed = new Promise<string | undefined>((res) => {
      let code: string | undefined;
      socket.on('error', (e: NodeJS.ErrnoException) => {
        code = e.code;
      });
      socket.on('close', () => res(code));
    });
    proxy.dropAll();
    expect(await closed).toBe('ECONNRESET');
    expect(proxy.connections()).toBe(0);
    expect(await ping()).toBe('PONG');
  });

  it('refuse resets new connections until switched off', async () => {
    proxy.refuse(true);
    await expect(ping()).rejects.toThrow();
    proxy.refuse(false);
    expect(await ping()).toBe('PONG');
  });

  it('close ends connections and stops listening', async () => {
    const c = client();
    await c.connect();
    await proxy.close();
    expect(proxy.connections()).toBe(0);
    const socket = net.connect({ host: '127.0.0.1', port: proxy.port });
    const err = await new Promise<NodeJS.ErrnoException>((res) => socket.once('error', res));
    expect(err.code).toBe('ECONNREFUSED');
    proxy = await startProxy({ target: sharedRedis() }); // for afterEach
  });
});

describe('cluster proxies', () => {
  it('route a cluster client through a proxy per node (natMap)', async () => {
    const { Cluster } = await import('ioredis');
    const { sharedCluster } = await import('../helpers/shared-servers.js');
    const { startClusterProxies } = await import('../helpers/tcp-proxy.js');
    const group = await startClusterProxies(sharedCluster().nodes);
    const cluster = new Cluster(group.seeds, { natMap: group.natMap, lazyConnect: true });
    cluster.on('error', () => {});
    try {
      await cluster.connect();
      const prefix = uniquePrefix('cproxy');
      for (let i = 0; i < 20; i++) await cluster.set(`${prefix}:${i}`, 'v', 'PX', 10_000);
      // Every node's proxy carried client traffic.
      expect(group.proxies.every((p) => p.connections() > 0)).toBe(true);
      group.setLatency(60);
      const t = performance.now();
      expect(await cluster.get(`${prefix}:0`)).toBe('v');
      expect(performance.now() - t).toBeGreaterThanOrEqual(110);
    } finally {
      cluster.disconnect();
      await group.close();
    }
  });
});
