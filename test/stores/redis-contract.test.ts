/**
 * The Store conformance suite on real servers: Redis and Valkey, standalone and cluster, through
 * every supported client (ioredis 5, ioredis 6, iovalkey, node-redis 5, node-redis 6), on the
 * server's clock (TIME). Plus the suite on a controlled clock (the scripts' test-only clock
 * mode), which runs the exact-time tests too.
 */
import { afterAll, beforeAll, describe } from 'vitest';
import { redisStore } from '../../src/stores/redis/index.js';
import { storeContract } from '../contract/store-contract.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { CLIENT_FAMILIES, type Connected, connectClient, connectCluster } from '../helpers/redis-clients.js';
import type { ServerKind } from '../helpers/servers.js';
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

function suite(kind: ServerKind, family: (typeof CLIENT_FAMILIES)[number], cluster: boolean): void {
  describe(`${kind} ${cluster ? 'cluster' : 'standalone'} via ${family}`, () => {
    let c: Connected;
    beforeAll(async () => {
      c = cluster
        ? await connectCluster(family, sharedCluster(kind).nodes)
        : await connectClient(family, sharedRedis(kind));
    });
    afterAll(async () => {
      await c?.close();
    });
    // One prefix for the file's cases (each uses fresh ids): two stores from makeStore() share
    // their state, as two processes on one server do.
    const prefix = uniquePrefix('contract');
    // iovalkey's Cluster cannot do sharded pub/sub: that store has no wake-ups (see docs/redis.md).
    storeContract(
      `redis:${kind}:${cluster ? 'cluster' : 'single'}:${family}`,
      () => ({
        store: redisStore({ client: c.client, subscriber: c.subscriber, prefix }),
      }),
      { wakeUps: !(cluster && family === 'iovalkey'), window: true, shared: true },
    );
  });
}

for (const kind of ['redis', 'valkey'] as const) {
  for (const family of CLIENT_FAMILIES) {
    suite(kind, family, false);
    suite(kind, family, true);
  }

  describe(`${kind} on a controlled clock (unsafeTestClock)`, () => {
    for (const cluster of [false, true]) {
      describe(cluster ? 'cluster via ioredis' : 'standalone via ioredis', () => {
        let c: Connected;
        beforeAll(async () => {
          c = cluster
            ? await connectCluster('ioredis', sharedCluster(kind).nodes)
            : await connectClient('ioredis', sharedRedis(kind));
        });
        afterAll(async () => {
          await c?.close();
        });
        storeContract(
          `redis:${kind}:${cluster ? 'cluster' : 'single'}:virtual`,
          () => {
            const clock = new FakeClock();
            return {
              store: redisStore({
                client: c.client,
                subscriber: c.subscriber,
                prefix: uniquePrefix('contract-virtual'),
                unsafeTestClock: clock,
              }),
              advance: (ms: number) => clock.advance(ms),
            };
          },
          { controlledClock: true, turns: true, window: true },
        );
      });
    }
  });

  describe(`${kind} cluster via iovalkey with pubsub: 'classic' (wake-ups without sharded pub/sub)`, () => {
    let c: Connected;
    beforeAll(async () => {
      c = await connectCluster('iovalkey', sharedCluster(kind).nodes);
    });
    afterAll(async () => {
      await c?.close();
    });
    storeContract(`redis:${kind}:cluster:iovalkey-classic`, () => ({
      store: redisStore({
        client: c.client,
        subscriber: c.subscriber,
        pubsub: 'classic',
        prefix: uniquePrefix('contract-classic'),
      }),
    }));
  });
}
