/**
 * redisStore beyond the Store contract: options, key layout and TTLs, NOSCRIPT recovery
 * (SCRIPT FLUSH, restart), valve's own deadline, cluster slots, resubscription. Real servers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { RedisStoreTimeoutError, redisStore } from '../../src/stores/redis/index.js';
import type { Store, WakeEvent } from '../../src/stores/store.js';
import { CLIENT_FAMILIES, type Connected, connectClient, connectCluster } from '../helpers/redis-clients.js';
import { respCommand } from '../helpers/resp.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out waiting for a condition');
    await sleep(10);
  }
}

const perSecond = normalizeRule({ limit: 10, interval: '1s', burst: 2 }, 'rules[0]');
const window = normalizeRule({ limit: 5, interval: '2s', algorithm: 'fixed-window' }, 'rules[1]');

describe('redisStore options', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });

  it('rejects what is not a client, with a message naming the option', () => {
    expect(() => redisStore({ client: {} })).toThrow(/`client`.*ioredis.*node-redis/);
    expect(() => redisStore({ client: null as unknown as object })).toThrow(TypeError);
    expect(() => redisStore(undefined as unknown as { client: object })).toThrow(TypeError);
  });

  it('rejects bad prefixes (a brace would change the hash tag), timeouts and unknown options', () => {
    expect(() => redisStore({ client: c.client, prefix: 'a{b' })).toThrow(/`prefix`/);
    expect(() => redisStore({ client: c.client, prefix: '' })).toThrow(/`prefix`/);
    expect(() => redisStore({ client: c.client, timeout: 0 })).toThrow(/`timeout`/);
    expect(() => redisStore({ client: c.client, timeout: Number.NaN })).toThrow(/`timeout`/);
    // Node runs a timer above 2^31 - 1 ms after 1 ms: every call would time out at once.
    expect(() => redisStore({ client: c.client, timeout: 2 ** 31 })).toThrow(RangeError);
    expect(() => redisStore({ client: c.client, timeout: 2 ** 31 })).toThrow(/`timeout`.*2147483647/);
    expect(() => redisStore({ client: c.client, timeout: 2 ** 31 - 1 })).not.toThrow();
    // null is not "the default".
    expect(() => redisStore({ client: c.client, prefix: null as unknown as string })).toThrow(
      /`prefix` to be a string, got null/,
    );
    // ACL glob characters would widen the documented `~<prefix>:{*` pattern.
    for (const glob of ['a*', 'a?b', 'a[b]', 'a\\b', 'x]']) {
      expect(() => redisStore({ client: c.client, prefix: glob })).toThrow(/`prefix`.*glob/);
    }
    expect(() => redisStore({ client: c.client, pubsub: 'x' as 'classic' })).toThrow(/`pubsub`/);
    expect(() => redisStore({ client: c.client, pubsub: null as never })).toThrow(/`pubsub`.*got null/);
    expect(() => redisStore({ client: c.client, unsafeTestClock: null as never })).toThrow(
      /`unsafeTestClock` to be a Clock with now\(\), got null/,
    );
    expect(() => redisStore({ client: c.client, ttl: 1 } as unknown as { client: object })).toThrow(
      /Unknown option `ttl`/,
    );
    expect(() => redisStore({ client: c.client, subscriber: {} })).toThrow(/`subscriber`/);
    expect(() => redisStore({ client: c.client, subscriber: c.client })).toThrow(/second connection/);
  });

  it('rejects ids with braces and bad arguments (as rejections, never throws synchronously)', async () => {
    const store = redisStore({ client: c.client, prefix: uniquePrefix('opt') });
    await expect(store.acquire({ id: 'a{b}', rules: [], costs: [1], count: 1 })).rejects.toThrow(
      /`request.id`/,
    );
    // Lone surrogates: UTF-8 would map all three to one key, 'x\ufffd'.
    await expect(store.acquire({ id: 'x\ud800', rules: [], costs: [1], count: 1 })).rejects.toThrow(
      /well-formed/,
    );
    await expect(store.pause('x\udfff', 10)).rejects.toThrow(TypeError);
    await expect(store.acquire({ id: 'a', rules: [perSecond], costs: [0.5], count: 1 })).rejects.toThrow(
      /positive integer/,
    );
    await expect(store.acquire({ id: 'a', rules: [perSecond], costs: [3], count: 1 })).rejects.toThrow(
      RangeError,
    );
    await expect(store.pause('a', -1)).rejects.toThrow(RangeError);
    await expect(store.renew('a', ['x'], 0)).rejects.toThrow(RangeError);
  });

  it('has no subscribe() without a subscriber, and notifies is false', () => {
    const store = redisStore({ client: c.client, prefix: uniquePrefix('opt') });
    expect(store.subscribe).toBeUndefined();
    expect(store.notifies).toBe(false);
  });
});

describe('key layout and TTLs', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });
  const redis = () => c.client as import('ioredis').Redis;

  it('writes only <prefix>:{<id>}:... keys, each with a TTL no longer than its state lives', async () => {
    const prefix = uniquePrefix('keys');
    const store = redisStore({ client: c.client, prefix });
    const id = 'github:app-42';
    const sentAt = Date.now();
    await store.acquire({
      id,
      rules: [perSecond, window],
      costs: [1, 1],
      count: 2,
      lease: { limit: 3, ttl: 5000 },
    });
    await store.pause(id, 1500);
    const keys = (await redis().keys(`${prefix}:*`)).sort();
    expect(keys).toEqual(
      [
        `${prefix}:{${id}}:fence`,
        `${prefix}:{${id}}:leases`,
        `${prefix}:{${id}}:pause`,
        `${prefix}:{${id}}:r:${perSecond.digest}`,
        `${prefix}:{${id}}:r:${window.digest}`,
      ].sort(),
    );
    // Every TTL read at once: a stalled machine (the GCRA key lives 1.2 s) shifts them all
    // by the same time, checked against what elapsed since the acquire was sent.
    const suffixes = [`r:${perSecond.digest}`, `r:${window.digest}`, 'pause', 'leases', 'fence'];
    const pipe = redis().pipeline();
    for (const suffix of suffixes) pipe.pttl(`${prefix}:{${id}}:${suffix}`);
    const [gcra, fixed, pauseTtl, leasesTtl, fenceTtl] = (await pipe.exec())!.map(([, v]) => v as number);
    const elapsed = Date.now() - sentAt;
    // GCRA: tat = now + 2 × 100 ms; expires one interval (1 s) and a millisecond past tat, so
    // that a rule change can tell an idle id from a busy one (gone, -2, only once 1201 ms have passed).
    expect(gcra).toBeLessThanOrEqual(1201);
    if (elapsed < 1201) expect(gcra).toBeGreaterThan(1201 - elapsed - 1);
    else expect(gcra === -2 || gcra! > 0, `pttl ${gcra}`).toBe(true);
    // Fixed window: until the window ends (≤ 2 s).
    expect(fixed).toBeGreaterThan(0);
    expect(fixed).toBeLessThanOrEqual(2000);
    expect(pauseTtl).toBeGreaterThan(1500 - elapsed);
    expect(pauseTtl).toBeLessThanOrEqual(1500);
    expect(leasesTtl).toBeGreaterThan(5000 - elapsed);
    expect(leasesTtl).toBeLessThanOrEqual(5000);
    expect(fenceTtl).toBeGreaterThan(5000 - elapsed);
    expect(fenceTtl).toBeLessThanOrEqual(5000);
    // What each key holds: documented in docs/redis.md.
    expect(await redis().get(`${prefix}:{${id}}:pause`)).toMatch(/^\d{13}\.\d{3}$/);
    expect(await redis().get(`${prefix}:{${id}}:r:${perSecond.digest}`)).toMatch(/^\d{16}$/);
    expect(await redis().get(`${prefix}:{${id}}:r:${window.digest}`)).toMatch(/^\d+:2$/);
    const leases = await redis().zrange(`${prefix}:{${id}}:leases`, 0, -1, 'WITHSCORES');
    expect(leases).toHaveLength(4);
    expect(leases[1]).toMatch(/^\d{13}(\.\d+)?$/);
  });

  it('a pause records what paused (pause-by, same TTL); an extending pause naming nothing and resume delete it', async () => {
    const prefix = uniquePrefix('by');
    const store = redisStore({ client: c.client, prefix });
    const by = `${prefix}:{z}:pause-by`;
    await store.pause('z', 5000, 'retry-after (retry-after)');
    expect(await redis().get(by)).toBe('retry-after (retry-after)');
    expect(await redis().pttl(by)).toBeGreaterThan(4000);
    expect(await redis().pttl(by)).toBeLessThanOrEqual(5000);
    // A shorter pause changes nothing, its cause included.
    await store.pause('z', 1000, 'manual');
    expect(await redis().get(by)).toBe('retry-after (retry-after)');
    await store.pause('z', 8000, 'manual');
    expect(await redis().get(by)).toBe('manual');
    expect(await redis().pttl(by)).toBeGreaterThan(7000);
    // A longer pause that names nothing leaves no stale cause.
    await store.pause('z', 9000);
    expect(await redis().exists(by)).toBe(0);
    await store.pause('z', 10_000, 'manual');
    await store.resume('z');
    expect(await redis().exists(by, `${prefix}:{z}:pause`)).toBe(0);
    await expect(async () => store.pause('z', 10, 5 as unknown as string)).rejects.toThrow(
      /Expected `by` to be a string, got 5/,
    );
  });

  it('an idle budget vanishes: every key expires', async () => {
    const prefix = uniquePrefix('idle');
    const store = redisStore({ client: c.client, prefix });
    const fast = normalizeRule({ limit: 100, interval: '100ms' }, 'r');
    await store.acquire({ id: 'x', rules: [fast], costs: [1], count: 1, lease: { limit: 1, ttl: 1000 } });
    await store.pause('x', 50);
    expect((await redis().keys(`${prefix}:*`)).length).toBeGreaterThan(0);
    await waitFor(async () => (await redis().keys(`${prefix}:*`)).length === 0, 3000);
  });

  it('a sliding window is one list [sum, t, c, ...]: one entry per granting call, expiring one interval after the newest', async () => {
    const prefix = uniquePrefix('sliding');
    const store = redisStore({ client: c.client, prefix });
    const rule = normalizeRule({ limit: 5, interval: '1s', algorithm: 'sliding-window' }, 'r');
    const key = `${prefix}:{s}:r:${rule.digest}`;
    expect(rule.digest).toBe('s5.1000000');
    const first = await store.acquire({ id: 's', rules: [rule], costs: [1, 2, 1], count: 3 });
    expect(first.granted).toBe(3);
    const t1 = String(Math.round(first.now * 1000));
    expect(await redis().lrange(key, 0, -1)).toEqual(['4', t1, '4']); // a batch is one entry
    expect(await redis().pttl(key)).toBeGreaterThan(800);
    expect(await redis().pttl(key)).toBeLessThanOrEqual(1000);
    await sleep(200);
    const second = await store.acquire({ id: 's', rules: [rule], costs: [1, 1], count: 2 });
    expect(second.granted).toBe(1);
    // Refused until the first entry leaves, exactly one interval after it.
    expect(Math.round(second.retryAfter * 1000)).toBe(Number(t1) + 1_000_000 - Math.round(second.now * 1000));
    const t2 = String(Math.round(second.now * 1000));
    expect(await redis().lrange(key, 0, -1)).toEqual(['5', t1, '4', t2, '1']);
    await sleep(second.retryAfter + 1);
    // The first entry left: it is dropped on the next call, and the key's TTL follows the newest.
    const third = await store.acquire({ id: 's', rules: [rule], costs: [1], count: 1 });
    expect(third.granted).toBe(1);
    const list = await redis().lrange(key, 0, -1);
    expect(list.slice(0, 3)).toEqual(['2', t2, '1']);
    expect(list).toHaveLength(5);
    await waitFor(async () => (await redis().exists(key)) === 0, 3000);
  });

  it('a sliding window refuses a log it did not write, naming the key', async () => {
    const prefix = uniquePrefix('sliding-corrupt');
    const store = redisStore({ client: c.client, prefix });
    const rule = normalizeRule({ limit: 5, interval: '1h', algorithm: 'sliding-window' }, 'r');
    const key = `${prefix}:{s}:r:${rule.digest}`;
    for (const list of [
      ['-10', String(Date.now() * 1000), '1'],
      ['inf', String(Date.now() * 1000), '1'],
      ['1', 'x', '1'],
      ['1', String(Date.now() * 1000), '-1'],
      ['nan', String(Date.now() * 1000), '1'],
    ]) {
      await redis().del(key);
      await redis().rpush(key, ...list);
      await redis().pexpire(key, 60_000);
      await expect(store.acquire({ id: 's', rules: [rule], costs: [1], count: 1 })).rejects.toThrow(
        new RegExp(`^VALVE_CORRUPT_STATE ${key.replace(/[{}]/g, '\\$&')} holds .*, not a sliding-window log`),
      );
    }
    await redis().del(key);
    await redis().set(key, 'not a list', 'PX', 60_000);
    await expect(store.acquire({ id: 's', rules: [rule], costs: [1], count: 1 })).rejects.toThrow(
      new RegExp(`^VALVE_CORRUPT_STATE ${key.replace(/[{}]/g, '\\$&')} holds .*, not a sliding-window log`),
    );
    await redis().del(key);
  });

  it('keys never grow with jobs: one key per rule whatever the number of grants', async () => {
    const prefix = uniquePrefix('grow');
    const store = redisStore({ client: c.client, prefix });
    const big = normalizeRule({ limit: 1_000_000, interval: '1h', burst: 1000 }, 'r');
    for (let i = 0; i < 50; i++) await store.acquire({ id: 'y', rules: [big], costs: [1, 1, 1], count: 3 });
    expect(await redis().keys(`${prefix}:*`)).toHaveLength(1);
  });
});

describe('NOSCRIPT: script cache loss never fails a call', () => {
  // A server of its own: flushing the shared server's script cache could disturb other tests.
  let own: RedisServer;
  beforeAll(async () => {
    own = await startRedis();
  });
  afterAll(async () => {
    await own?.stop();
  });

  for (const family of CLIENT_FAMILIES) {
    it(`SCRIPT FLUSH during a run (${family})`, async () => {
      const server = own;
      const c = await connectClient(family, server);
      try {
        const store = redisStore({ client: c.client, prefix: uniquePrefix('noscript') });
        const rule = normalizeRule({ limit: 1_000_000, interval: '1s', burst: 100 }, 'r');
        let flushes = 0;
        let stop = false;
        const flusher = (async () => {
          while (!stop) {
            await respCommand(server, ['SCRIPT', 'FLUSH']);
            flushes++;
            await sleep(3);
          }
        })();
        let granted = 0;
        for (let i = 0; i < 300; i++) {
          const ops = await Promise.all([
            store.acquire({ id: 'n', rules: [rule], costs: [1], count: 1 }),
            store.acquire({ id: 'n', rules: [rule], costs: [1], count: 1, lease: { limit: 100, ttl: 5000 } }),
            store.pause(`p${i % 3}`, 1),
          ]);
          granted += ops[0].granted;
          const leases = ops[1].leases ?? [];
          await store.renew(
            'n',
            leases.map((l) => l.token),
            5000,
          );
          await store.release(
            'n',
            leases.map((l) => l.token),
          );
          await store.resume(`p${i % 3}`);
        }
        stop = true;
        await flusher;
        expect(flushes).toBeGreaterThan(5);
        expect(granted).toBeGreaterThan(0);
      } finally {
        await c.close();
      }
    });
  }

  for (const family of CLIENT_FAMILIES) {
    it(`an empty script cache is loaded once, not once per call in flight (${family})`, async () => {
      // 10,000 valves of a group starting at once each sent acquire.lua (27 KB) with EVAL after
      // their EVALSHA came back NOSCRIPT: 270 MB, seconds of hashing, every call timed out.
      const c = await connectClient(family, own);
      try {
        const store = redisStore({ client: c.client, prefix: uniquePrefix('stampede') });
        const rule = normalizeRule({ limit: 1_000_000, interval: '1s', burst: 1000 }, 'r');
        await respCommand(own, ['SCRIPT', 'FLUSH']);
        await respCommand(own, ['CONFIG', 'RESETSTAT']);
        const results = await Promise.all(
          Array.from({ length: 300 }, (_, i) =>
            store.acquire({ id: `k${i}`, rules: [rule], costs: [1], count: 1 }),
          ),
        );
        expect(results.every((r) => r.granted === 1)).toBe(true);
        const info = String(await respCommand(own, ['INFO', 'commandstats']));
        const evals = Number(/cmdstat_eval:calls=(\d+)/.exec(info)?.[1] ?? 0);
        const evalshas = Number(/cmdstat_evalsha:calls=(\d+)/.exec(info)?.[1] ?? 0);
        expect(evals).toBe(1);
        // On a standalone server the 300 requests go out as ⌈300 / 64⌉ = 5 acquire-many.lua
        // calls, all in flight at once: each call's EVALSHA, and again for those refused
        // NOSCRIPT before the load (the one EVAL ran one of them).
        expect(evalshas).toBeGreaterThanOrEqual(5);
        expect(evalshas).toBeLessThanOrEqual(9);
      } finally {
        await c.close();
      }
    });
  }

  for (const family of ['ioredis', 'redis'] as const) {
    it(`a server restart (empty script cache) (${family})`, async () => {
      const server = await startRedis();
      const c = await connectClient(family, server);
      try {
        const store = redisStore({ client: c.client, prefix: uniquePrefix('restart'), timeout: 5000 });
        const rule = normalizeRule({ limit: 1000, interval: '1s', burst: 10 }, 'r');
        expect((await store.acquire({ id: 'r', rules: [rule], costs: [1], count: 1 })).granted).toBe(1);
        await server.restart();
        // The first calls may fail while the client reconnects; once it is back, every call works.
        await waitFor(async () => {
          try {
            await store.acquire({ id: 'r', rules: [rule], costs: [1], count: 1 });
            return true;
          } catch {
            return false;
          }
        });
        for (let i = 0; i < 20; i++) {
          const r = await store.acquire({ id: 'r', rules: [rule], costs: [1], count: 1 });
          expect(r.blocked === null || r.blocked === 'rate').toBe(true);
        }
        expect(await respCommand(server, ['SCRIPT', 'EXISTS', '0'.repeat(40)])).toEqual([0]);
      } finally {
        await c.close();
        await server.stop();
      }
    }, 30_000);
  }
});

describe("valve's own deadline per store call", () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  for (const family of ['ioredis', 'iovalkey', 'redis'] as const) {
    it(`a call past \`timeout\` rejects with a clear error (${family}); the server may still run it`, async () => {
      const c = await connectClient(family, server);
      try {
        const store = redisStore({ client: c.client, prefix: uniquePrefix('timeout'), timeout: 150 });
        expect((await store.acquire({ id: 't', rules: [perSecond], costs: [1], count: 1 })).granted).toBe(1);
        // The pause script loaded first: a call that timed out while its script was being
        // loaded again (NOSCRIPT) is never sent after valve gave up on it; this one goes at once.
        await store.pause('warm', 1);
        server.kill('SIGSTOP');
        const started = Date.now();
        let error: unknown;
        try {
          await store.pause('t', 60_000);
        } catch (err) {
          error = err;
        }
        const elapsed = Date.now() - started;
        server.kill('SIGCONT');
        expect(error).toBeInstanceOf(RedisStoreTimeoutError);
        expect((error as Error).message).toMatch(/did not answer within 150 ms.*may still execute/);
        expect(elapsed).toBeGreaterThanOrEqual(140);
        expect(elapsed).toBeLessThan(1000);
        // The timed-out pause was still sent: it may execute after valve gave up on it.
        await waitFor(async () => {
          const r = await store.acquire({ id: 't', rules: [], costs: [1], count: 1 });
          return r.blocked === 'pause';
        });
      } finally {
        server.kill('SIGCONT');
        await c.close();
      }
    });
  }
});

describe("valve's deadline: answers already received are read before a verdict", () => {
  for (const family of CLIENT_FAMILIES) {
    it(`a reply that arrived while the process was busy past the deadline is used, not timed out (${family})`, async () => {
      const c = await connectClient(family, sharedRedis());
      try {
        const store = redisStore({ client: c.client, prefix: uniquePrefix('busy'), timeout: 100 });
        const rule = normalizeRule({ limit: 1_000_000, interval: '1s', burst: 1000 }, 'r');
        // Scripts loaded: acquire.lua (one call alone) and acquire-many.lua (two at once).
        await store.acquire({ id: 'b', rules: [rule], costs: [1], count: 1 });
        await Promise.all([1, 2].map(() => store.acquire({ id: 'b', rules: [rule], costs: [1], count: 1 })));
        const calls = Array.from({ length: 20 }, () =>
          Promise.resolve(store.acquire({ id: 'b', rules: [rule], costs: [1], count: 1 })).then(
            (r) => r.granted,
            (err: unknown) => err,
          ),
        );
        // The store sends its calls on the next tick and node-redis writes them on the
        // immediate after: let them, then the process is busy past every call's deadline; the
        // answers arrive meanwhile and wait in the socket. When it is free again, its timers
        // come before its sockets: a verdict taken then would reject answers it had already
        // received.
        await new Promise((r) => setImmediate(r));
        await new Promise((r) => setImmediate(r));
        const until = Date.now() + 400;
        while (Date.now() < until) {
          // busy
        }
        expect(await Promise.all(calls)).toEqual(Array(20).fill(1));
      } finally {
        await c.close();
      }
    });
  }
});

describe('Redis Cluster: many ids across slots, never CROSSSLOT', () => {
  for (const kind of ['redis', 'valkey'] as const) {
    for (const family of CLIENT_FAMILIES) {
      it(`${kind} cluster via ${family}`, async () => {
        const cluster = sharedCluster(kind);
        const c = await connectCluster(family, cluster.nodes);
        try {
          const prefix = uniquePrefix('slots');
          const store = redisStore({ client: c.client, prefix });
          const ids = Array.from({ length: 120 }, (_, i) => `tenant-${i}:${'x'.repeat(i % 7)}`);
          await Promise.all(
            ids.map(async (id) => {
              const r = await store.acquire({
                id,
                rules: [perSecond, window],
                costs: [1, 1, 1],
                count: 3,
                lease: { limit: 2, ttl: 5000 },
              });
              expect(r.granted).toBe(2);
              await store.pause(id, 10);
              const held = await store.renew(
                id,
                r.leases!.map((l) => l.token),
                5000,
              );
              expect(held).toEqual([true, true]);
              await store.release(
                id,
                r.leases!.map((l) => l.token),
              );
              await store.resume(id);
            }),
          );
          // The ids' keys really are spread over every master.
          const perNode = await Promise.all(
            cluster.nodes.map(async (node) => {
              const keys = (await respCommand(node, ['KEYS', `${prefix}:*`])) as string[];
              return keys.length;
            }),
          );
          for (const n of perNode) expect(n).toBeGreaterThan(0);
        } finally {
          await c.close();
        }
      });
    }
  }
});

describe('subscriber: resubscribes after a reconnect', () => {
  for (const family of CLIENT_FAMILIES) {
    it(`wake-ups resume after the pub/sub connection is killed (${family})`, async () => {
      const server = await startRedis();
      const c = await connectClient(family, server);
      const publisher = await connectClient(family, server);
      try {
        const prefix = uniquePrefix('resub');
        const store: Store = redisStore({ client: c.client, subscriber: c.subscriber, prefix });
        const other = redisStore({ client: publisher.client, prefix });
        const events: WakeEvent[] = [];
        store.subscribe!('s', (e) => events.push(e));
        await waitFor(() => store.notifies === true);
        await other.pause('s', 1000);
        await waitFor(() => events.length === 1);
        await respCommand(server, ['CLIENT', 'KILL', 'TYPE', 'pubsub']);
        // Reconnected and resubscribed: a later notification arrives.
        await waitFor(async () => {
          await other.resume('s');
          await sleep(50);
          return events.some((e) => e.type === 'resume');
        });
        expect(store.notifies).toBe(true);
      } finally {
        await c.close();
        await publisher.close();
        await server.stop();
      }
    });
  }
});

describe('TLS', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis({ tls: true });
  });
  afterAll(async () => {
    await server?.stop();
  });

  for (const family of CLIENT_FAMILIES) {
    it(`acquire, pause and wake-ups over TLS (${family})`, async () => {
      const c = await connectClient(family, { host: server.host, port: server.port, tlsCa: server.tls!.ca });
      try {
        const prefix = uniquePrefix('tls');
        const store = redisStore({ client: c.client, subscriber: c.subscriber, prefix });
        const events: WakeEvent[] = [];
        store.subscribe!('tls', (e) => events.push(e));
        await waitFor(() => store.notifies === true);
        expect(
          (await store.acquire({ id: 'tls', rules: [perSecond], costs: [1, 1, 1], count: 3 })).granted,
        ).toBe(2);
        await store.pause('tls', 1000);
        await waitFor(() => events.length === 1);
      } finally {
        await c.close();
      }
    });
  }
});

describe('subscriber: a subscription refused while disconnected is retried on reconnect', () => {
  it('ioredis with enableOfflineQueue: false', async () => {
    const { Redis: IORedis } = await import('ioredis');
    const server = await startRedis();
    const client = new IORedis({ host: server.host, port: server.port });
    const subscriber = new IORedis({ host: server.host, port: server.port, enableOfflineQueue: false });
    subscriber.on('error', () => {});
    client.on('error', () => {});
    try {
      await waitFor(() => subscriber.status === 'ready');
      const prefix = uniquePrefix('offline');
      const store = redisStore({ client, subscriber, prefix });
      server.kill('SIGKILL');
      await server.exited();
      await waitFor(() => subscriber.status !== 'ready');
      const events: WakeEvent[] = [];
      store.subscribe!('o', (e) => events.push(e));
      await sleep(50);
      expect(store.notifies).toBe(false);
      await server.restart();
      await waitFor(() => store.notifies === true);
      await waitFor(async () => {
        await store.pause('o', 1000);
        await store.resume('o');
        await sleep(20);
        return events.length > 0;
      });
    } finally {
      client.disconnect();
      subscriber.disconnect();
      await server.stop();
    }
  });

  it('node-redis with disableOfflineQueue: true', async () => {
    const { createClient } = await import('redis');
    const server = await startRedis();
    const client = createClient({ url: server.url });
    const subscriber = createClient({ url: server.url, disableOfflineQueue: true });
    subscriber.on('error', () => {});
    client.on('error', () => {});
    await client.connect();
    await subscriber.connect();
    try {
      const prefix = uniquePrefix('offline');
      const store = redisStore({ client, subscriber, prefix });
      server.kill('SIGKILL');
      await server.exited();
      await waitFor(() => !subscriber.isReady);
      const events: WakeEvent[] = [];
      store.subscribe!('o', (e) => events.push(e));
      await sleep(50);
      expect(store.notifies).toBe(false);
      await server.restart();
      await waitFor(() => store.notifies === true);
      await waitFor(async () => {
        await Promise.resolve(store.pause('o', 1000)).catch(() => {});
        await Promise.resolve(store.resume('o')).catch(() => {});
        await sleep(20);
        return events.length > 0;
      });
    } finally {
      client.destroy();
      subscriber.destroy();
      await server.stop();
    }
  });
});

describe('subscriber: a subscription made during the connection handshake', () => {
  // ioredis 5.8.2 and later write a SUBSCRIBE made in status 'connect' at once; the ready check's
  // INFO then fails in subscriber mode, an 'error' is emitted and the connection reconnects
  // (ioredis issue #2037). The store holds such a subscription until 'ready'.
  const ctors = {
    ioredis: async () => (await import('ioredis')).Redis,
    ioredis6: async () => (await import('ioredis6')).Redis,
    iovalkey: async () => (await import('iovalkey')).default,
  };
  for (const [family, load] of Object.entries(ctors)) {
    it(`no error, no reconnect, and wake-ups arrive (${family})`, async () => {
      const Ctor = (await load()) as unknown as new (
        url: string,
      ) => {
        on(e: string, f: (arg?: unknown) => void): void;
        once(e: string, f: () => void): void;
        disconnect(): void;
      };
      const { url } = sharedRedis();
      const client = new Ctor(url);
      const subscriber = new Ctor(url);
      const errors: string[] = [];
      let reconnects = 0;
      subscriber.on('error', (err) => errors.push((err as Error).message));
      subscriber.on('reconnecting', () => reconnects++);
      const prefix = uniquePrefix('handshake');
      try {
        const store = redisStore({ client, subscriber, prefix });
        const other = redisStore({ client, prefix });
        const events: WakeEvent[] = [];
        let subscribed = false;
        subscriber.once('connect', () => {
          store.subscribe!('h', (e) => events.push(e));
          subscribed = true;
        });
        await waitFor(() => store.notifies === true);
        expect(subscribed).toBe(true);
        await other.pause('h', 1000);
        await waitFor(() => events.length === 1);
        expect(events[0]!.type).toBe('pause');
        expect({ errors, reconnects }).toEqual({ errors: [], reconnects: 0 });
      } finally {
        client.disconnect();
        subscriber.disconnect();
      }
    });
  }
});

describe('a cluster client may serve as its own subscriber', () => {
  for (const family of ['ioredis', 'redis'] as const) {
    it(family, async () => {
      const nodes = sharedCluster('redis').nodes;
      const c = await connectCluster(family, nodes);
      try {
        // For ioredis the subscriber Cluster (shardedSubscribers: true) runs the scripts too.
        const both = c.subscriber;
        const store = redisStore({ client: both, subscriber: both, prefix: uniquePrefix('same') });
        const events: WakeEvent[] = [];
        store.subscribe!('same', (e) => events.push(e));
        await waitFor(() => store.notifies === true);
        await store.pause('same', 1000);
        await waitFor(() => events.length === 1);
        const r = await store.acquire({ id: 'same', rules: [perSecond], costs: [1], count: 1 });
        expect(r.blocked).toBe('pause');
        await store.resume('same');
        expect((await store.acquire({ id: 'same', rules: [perSecond], costs: [1], count: 1 })).granted).toBe(
          1,
        );
      } finally {
        await c.close();
      }
    });
  }
});

describe('a subscriber that cannot follow sharded channels', () => {
  it('iovalkey Cluster: no subscribe(), notifies false, one process warning per connection', async () => {
    const c = await connectCluster('iovalkey', sharedCluster('redis').nodes);
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const a = redisStore({ client: c.client, subscriber: c.subscriber, prefix: uniquePrefix('nos') });
      const b = redisStore({ client: c.client, subscriber: c.subscriber, prefix: uniquePrefix('nos') });
      expect(a.subscribe).toBeUndefined();
      expect(b.notifies).toBe(false);
      await sleep(20);
      const ours = warnings.filter(
        (w) => (w as { code?: string }).code === 'VALVE_REDIS_NO_SHARDED_SUBSCRIBER',
      );
      expect(ours).toHaveLength(1);
      expect(ours[0]!.message).toMatch(/pubsub: 'classic'/);
      // Still a working store.
      expect((await a.acquire({ id: 'nos', rules: [perSecond], costs: [1], count: 1 })).granted).toBe(1);
    } finally {
      process.off('warning', onWarning);
      await c.close();
    }
  });
});
