/**
 * The Redis store's writes and what it reports about them, on servers of this file's own
 * (an ACL user, CLIENT PAUSE): a refused wake-up publish does not fail a call whose writes
 * were done; an acquire answered after its deadline gives its leases back; a prefix must be
 * well-formed Unicode.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisStore } from '../../src/stores/redis/index.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** docs/redis.md's ACL rule, but with a channel pattern that does not cover the prefix. */
const NO_CHANNELS = [
  'resetkeys',
  '~valve:{*',
  'resetchannels',
  '&other:*',
  '-@all',
  ...['+evalsha', '+eval', '+time', '+get', '+set', '+del', '+exists', '+zadd', '+zrem'],
  ...['+zremrangebyscore', '+zcard', '+zrange', '+zscore', '+pexpire', '+publish', '+spublish'],
  ...['+ping', '+info', '+hello', '+auth', '+client|setname'],
];

describe('a publish the server refuses (channels not covered by the ACL)', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis({ aclUser: { name: 'v', password: 'pw', rules: NO_CHANNELS } });
  });
  afterAll(async () => server?.stop());

  it('pause, resume and release succeed and do their writes; only the wake-up is missing', async () => {
    const client = new Redis({ host: server.host, port: server.port, username: 'v', password: 'pw' });
    const admin = new Redis(server.url);
    try {
      const store = redisStore({ client });
      const until = await store.pause('a', 60_000);
      expect(until).toBeGreaterThan(Date.now());
      expect(await admin.get('valve:{a}:pause')).not.toBeNull();
      await store.resume('a');
      expect(await admin.get('valve:{a}:pause')).toBeNull();
      const r = await store.acquire({
        id: 'b',
        rules: [],
        costs: [1],
        count: 1,
        lease: { limit: 1, ttl: 60_000 },
      });
      expect(r.granted).toBe(1);
      await store.release(
        'b',
        r.leases!.map((l) => l.token),
      );
      expect(await admin.zcard('valve:{b}:leases')).toBe(0);
    } finally {
      client.disconnect();
      admin.disconnect();
    }
  });
});

describe('an acquire answered after its deadline', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => server?.stop());

  for (const ids of [['a'], ['m1', 'm2', 'm3']]) {
    it(`its leases are released once the answer arrives (${ids.length === 1 ? 'acquire.lua' : 'acquire-many.lua'})`, async () => {
      const client = new Redis(server.url);
      const admin = new Redis(server.url);
      const prefix = `late${ids.length}`;
      try {
        const store = redisStore({ client, prefix, timeout: 100 });
        const patient = redisStore({ client, prefix });
        // Scripts loaded (acquire.lua and acquire-many.lua).
        await Promise.all(
          [1, 2].map((i) => patient.acquire({ id: `warm${i}`, rules: [], costs: [1], count: 1 })),
        );
        await admin.client('PAUSE', 400, 'WRITE');
        // Requests made in one turn go out together (acquire-many.lua) on a standalone server.
        const errors = await Promise.all(
          ids.map((id) =>
            Promise.resolve(
              store.acquire({ id, rules: [], costs: [1, 1], count: 2, lease: { limit: 2, ttl: 60_000 } }),
            ).then(
              () => null,
              (e: { code?: string }) => e.code,
            ),
          ),
        );
        expect(errors).toEqual(ids.map(() => 'VALVE_REDIS_TIMEOUT'));
        // The server runs the calls at ~400 ms and answers; the release follows.
        await sleep(600);
        const end = Date.now() + 3000;
        let held = -1;
        while (Date.now() < end) {
          await sleep(50);
          held = 0;
          for (const id of ids) held += await admin.zcard(`${prefix}:{${id}}:leases`);
          if (held === 0) break;
        }
        expect(held).toBe(0);
        const next = await patient.acquire({
          id: ids[0]!,
          rules: [],
          costs: [1, 1],
          count: 2,
          lease: { limit: 2, ttl: 60_000 },
        });
        expect(next.granted).toBe(2);
      } finally {
        client.disconnect();
        admin.disconnect();
      }
    });
  }
});

describe('redisStore() prefix', () => {
  it('a lone surrogate is refused, naming the prefix (UTF-8 would merge two prefixes)', () => {
    const client = new Redis({ lazyConnect: true });
    try {
      for (const prefix of ['p\ud800', 'p\udfff', '\udc00x']) {
        expect(() => redisStore({ client, prefix })).toThrow(TypeError);
        expect(() => redisStore({ client, prefix })).toThrow(/`prefix`.*lone surrogate/);
      }
      // A well-formed astral character (a surrogate pair) is fine.
      expect(() => redisStore({ client, prefix: 'p\ud83d\ude00' })).not.toThrow();
    } finally {
      client.disconnect();
    }
  });

  it("its 200 characters are counted as an id's: code points, an emoji is one", () => {
    const client = new Redis({ lazyConnect: true });
    try {
      const emoji = '\u{1f600}';
      expect(() => redisStore({ client, prefix: emoji.repeat(200) })).not.toThrow();
      expect(() => redisStore({ client, prefix: emoji.repeat(201) })).toThrow(
        /^Expected `prefix` to be 1 to 200 characters long, got 201 characters$/,
      );
      expect(() => redisStore({ client, prefix: 'p'.repeat(201) })).toThrow(/got 201 characters$/);
      expect(() => redisStore({ client, prefix: '' })).toThrow(/1 to 200 characters long, got 0/);
    } finally {
      client.disconnect();
    }
  });
});
