/**
 * The whole Store contract as a least-privilege ACL user: exactly the rule docs/redis.md gives
 * (the commands valve and the clients use, keys `~<prefix>:{*`, channels `&<prefix>:{*`), through
 * every client family. A command outside the rule would fail with NOPERM, and be in ACL LOG.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Redis as IORedis } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisStore } from '../../src/stores/redis/index.js';
import { storeContract } from '../contract/store-contract.js';
import { CLIENT_FAMILIES, type Connected, connectClient } from '../helpers/redis-clients.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { sharedCluster } from '../helpers/shared-servers.js';
import { expectStoreWorks } from '../helpers/store-smoke.js';

/** The ACL rule of docs/redis.md, for prefix `valve-acl`. Keep the two in sync. */
const ACL_RULE = [
  'resetkeys',
  '~valve-acl:{*',
  'resetchannels',
  '&valve-acl:{*',
  '-@all',
  '+evalsha',
  '+eval',
  '+time',
  '+get',
  '+set',
  '+del',
  '+exists',
  '+zadd',
  '+zrem',
  '+zremrangebyscore',
  '+zcard',
  '+zrange',
  '+zscore',
  '+lrange',
  '+lindex',
  '+lset',
  '+ltrim',
  '+rpush',
  '+pexpire',
  '+publish',
  '+spublish',
  '+subscribe',
  '+unsubscribe',
  '+ssubscribe',
  '+sunsubscribe',
  '+ping',
  '+hello',
  '+auth',
  '+info',
  '+client|setname',
  '+cluster|slots',
  '+cluster|shards',
  '+cluster|info',
];

/** Reads ACL LOG (the default user is off). */
const ADMIN = { name: 'admin', password: 'admin-secret' };

it('docs/redis.md gives exactly this rule (for the default prefix)', () => {
  const docs = readFileSync(new URL('../../docs/redis.md', import.meta.url), 'utf8');
  const line = /^ACL SETUSER valve on >change-me (.+)$/m.exec(docs)?.[1];
  expect(line?.split(' ')).toEqual(ACL_RULE.map((r) => r.replace('valve-acl', 'valve')));
});

for (const kind of ['redis', 'valkey'] as const) {
  describe(`least-privilege ACL user (${kind})`, () => {
    let server: RedisServer;
    beforeAll(async () => {
      server = await startRedis({
        kind,
        aclUser: [
          {
            name: 'valve',
            password: 'valve-secret',
            // Redis 7.0 does not know CLIENT SETINFO (7.2+, Valkey): docs/redis.md says to add it there.
            rules: kind === 'valkey' ? [...ACL_RULE, '+client|setinfo'] : ACL_RULE,
          },
          ADMIN,
        ],
        defaultUserOff: true,
      });
    });
    afterAll(async () => {
      await server?.stop();
    });

    for (const family of CLIENT_FAMILIES) {
      describe(family, () => {
        let c: Connected;
        beforeAll(async () => {
          c = await connectClient(family, {
            host: server.host,
            port: server.port,
            username: 'valve',
            password: 'valve-secret',
          });
        });
        afterAll(async () => {
          await c?.close();
        });
        storeContract(`redis:acl:${kind}:${family}`, () => ({
          store: redisStore({ client: c.client, subscriber: c.subscriber, prefix: 'valve-acl' }),
        }));
      });
    }

    it('the server refused nothing (ACL LOG is empty)', async () => {
      expect(await server.command(['ACL', 'LOG'], ADMIN)).toEqual([]);
    });
  });
}

describe("least-privilege ACL user on a cluster (the suite's shared cluster, a user of its own)", () => {
  const user = `valve-acl-${randomBytes(4).toString('hex')}`;
  const password = 'valve-secret';
  beforeAll(async () => {
    for (const node of sharedCluster().nodes) {
      const admin = new IORedis({ host: node.host, port: node.port, lazyConnect: true });
      await admin.connect();
      await admin.call('ACL', 'SETUSER', user, 'on', `>${password}`, ...ACL_RULE);
      admin.disconnect();
    }
  });
  afterAll(async () => {
    for (const node of sharedCluster().nodes) {
      const admin = new IORedis({ host: node.host, port: node.port, lazyConnect: true });
      await admin.connect();
      await admin.call('ACL', 'DELUSER', user);
      admin.disconnect();
    }
  });

  it('an ioredis Cluster connects (its ready check sends CLUSTER INFO), runs jobs and confirms wake-ups', async () => {
    const seeds = sharedCluster().nodes.map((n) => ({ host: n.host, port: n.port }));
    const redisOptions = { username: user, password, maxRetriesPerRequest: 2 };
    const client = new IORedis.Cluster(seeds, { redisOptions });
    const subscriber = new IORedis.Cluster(seeds, { redisOptions, shardedSubscribers: true });
    try {
      const store = redisStore({ client, subscriber, prefix: 'valve-acl' });
      await expectStoreWorks(store, `acl-${randomBytes(4).toString('hex')}`);
    } finally {
      client.disconnect();
      subscriber.disconnect();
    }
  });

  it('a node-redis cluster runs jobs and confirms wake-ups', async () => {
    const rootNodes = sharedCluster().nodes.map((n) => ({ url: `redis://${n.host}:${n.port}` }));
    const make = () => createCluster({ rootNodes, defaults: { username: user, password } });
    const client = make();
    const subscriber = make();
    await Promise.all([client.connect(), subscriber.connect()]);
    try {
      const store = redisStore({ client, subscriber, prefix: 'valve-acl' });
      await expectStoreWorks(store, `acl-${randomBytes(4).toString('hex')}`);
    } finally {
      await Promise.all([client.quit(), subscriber.quit()]);
    }
  });

  it('no node refused this user anything (ACL LOG holds none of its entries)', async () => {
    for (const node of sharedCluster().nodes) {
      const admin = new IORedis({ host: node.host, port: node.port, lazyConnect: true });
      await admin.connect();
      const log = (await admin.call('ACL', 'LOG', '128')) as unknown[][];
      admin.disconnect();
      const mine = log.filter((entry) => entry[entry.indexOf('username') + 1] === user);
      expect(mine).toEqual([]);
    }
  });
});
