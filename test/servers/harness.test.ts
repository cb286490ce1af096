import net from 'node:net';
import { Cluster, Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { RespError } from '../helpers/resp.js';
import { type RedisCluster, type RedisServer, startCluster, startRedis } from '../helpers/servers.js';
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const kinds = ['redis', 'valkey'] as const;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function keysPerNode(nodes: { host: string; port: number }[], pattern: string): Promise<number[]> {
  return Promise.all(
    nodes.map(async (n) => {
      const r = new Redis({ host: n.host, port: n.port, lazyConnect: true });
      try {
        await r.connect();
        return (await r.keys(pattern)).length;
      } finally {
        r.disconnect();
      }
    }),
  );
}

describe.each(kinds)('shared %s servers (global setup)', (kind) => {
  it('standalone answers and is not the machine Redis on 6379', async () => {
    const s = sharedRedis(kind);
    expect(s.port).not.toBe(6379);
    expect(s.version).toMatch(kind === 'valkey' ? /^8\./ : /^\d+\./);
    const client = new Redis({ host: s.host, port: s.port, lazyConnect: true });
    try {
      await client.connect();
      const key = `${uniquePrefix('harness')}:k`;
      await client.set(key, 'v', 'PX', 10_000);
      expect(await client.get(key)).toBe('v');
      expect(await client.config('GET', 'save')).toEqual(['save', '']);
    } finally {
      client.disconnect();
    }
  });

  it('cluster is ok and routes keys to every master', async () => {
    const c = sharedCluster(kind);
    expect(c.nodes).toHaveLength(3);
    const cluster = new Cluster(c.nodes, { lazyConnect: true });
    try {
      await cluster.connect();
      expect(await cluster.cluster('INFO')).toMatch(/cluster_state:ok/);
      const prefix = uniquePrefix('harness');
      const keys = Array.from({ length: 30 }, (_, i) => `${prefix}:${i}`);
      for (const k of keys) await cluster.set(k, k, 'PX', 10_000);
      for (const k of keys) expect(await cluster.get(k)).toBe(k);
      const perNode = await keysPerNode(c.nodes, `${prefix}:*`);
      expect(perNode.reduce((a, b) => a + b, 0)).toBe(keys.length);
      expect(perNode.every((n) => n > 0)).toBe(true);
      // A hash tag keeps a multi-key script on one node.
      const n = await cluster.eval(
        "redis.call('set', KEYS[1], 1, 'PX', 10000); return redis.call('incr', KEYS[2])",
        2,
        `${prefix}:{one}:a`,
        `${prefix}:{one}:b`,
      );
      expect(n).toBe(1);
      await cluster.del(`${prefix}:{one}:b`);
    } finally {
      cluster.disconnect();
    }
  });
});

describe.each(kinds)('startRedis (%s)', (kind) => {
  let server: RedisServer | undefined;
  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });

  it('starts on a free port and stops, leaving no process or dir', async () => {
    server = await startRedis({ kind });
    const { pid, port, dir } = server;
    expect(port).toBeGreaterThanOrEqual(20_000);
    expect(server.url).toBe(`redis://127.0.0.1:${port}`);
    expect(await server.command(['PING'])).toBe('PONG');
    expect(await server.command(['CONFIG', 'GET', 'appendonly'])).toEqual(['appendonly', 'no']);
    await server.stop();
    expect(alive(pid)).toBe(false);
    const { existsSync } = await import('node:fs');
    expect(existsSync(dir)).toBe(false);
    await server.stop(); // twice is fine
  });

  it('restart keeps the port, forgets data and scripts (NOSCRIPT)', async () => {
    server = await startRedis({ kind });
    const { port, pid } = server;
    const sha = await server.command(['SCRIPT', 'LOAD', 'return 1']);
    expect(await server.command(['EVALSHA', String(sha), 0])).toBe(1);
    await server.command(['SET', 'k', 'v']);
    await server.restart();
    expect(server.port).toBe(port);
    expect(server.pid).not.toBe(pid);
    expect(alive(pid)).toBe(false);
    expect(await server.command(['GET', 'k'])).toBe(null);
    const reply = await server.command(['EVALSHA', String(sha), 0]);
    expect(reply).toBeInstanceOf(RespError);
    expect(String((reply as RespError).message)).toMatch(/^NOSCRIPT/);
  });

  it('moves to another port when its port is taken', async () => {
    const blocker = net.createServer();
    await new Promise<void>((res) => blocker.listen({ host: '127.0.0.1', port: 0 }, () => res()));
    const taken = (blocker.address() as net.AddressInfo).port;
    try {
      server = await startRedis({ kind, preferredPort: taken });
      expect(server.port).not.toBe(taken);
      expect(await server.command(['PING'])).toBe('PONG');
    } finally {
      blocker.close();
    }
  });

  it('stop() also ends a frozen (SIGSTOPped) server', async () => {
    server = await startRedis({ kind });
    const { pid } = server;
    server.kill('SIGSTOP');
    await server.stop();
    expect(alive(pid)).toBe(false);
  });

  it('kill(SIGKILL) ends the process; restart brings it back on the same port', async () => {
    server = await startRedis({ kind });
    const { port } = server;
    server.kill('SIGKILL');
    await server.exited();
    await expect(server.command(['PING'])).rejects.toThrow();
    await server.restart();
    expect(server.port).toBe(port);
    expect(await server.command(['PING'])).toBe('PONG');
  });
});

describe('startCluster', () => {
  let cluster: RedisCluster | undefined;
  afterEach(async () => {
    await cluster?.stop();
    cluster = undefined;
  });

  it('starts a 3-master redis cluster of its own and stops it', async () => {
    cluster = await startCluster({ kind: 'redis' });
    const pids = cluster.servers.map((s) => s.pid);
    const slots = (await cluster.servers[0]!.command(['CLUSTER', 'SLOTS'])) as unknown[];
    expect(slots).toHaveLength(3);
    await cluster.stop();
    expect(pids.some(alive)).toBe(false);
  });

  it('a restarted node keeps its slots (nodes.conf) and the cluster is ok again', async () => {
    cluster = await startCluster({ kind: 'valkey' });
    const node = cluster.servers[1]!;
    const before = await node.command(['CLUSTER', 'MYID']);
    await node.restart();
    expect(await node.command(['CLUSTER', 'MYID'])).toBe(before);
    await cluster.waitForOk();
  });
});
