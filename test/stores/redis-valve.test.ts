/**
 * createValve over redisStore, in one test process: lost script caches never fail a job,
 * pipelined admission keeps order and bounds, and global concurrency holds across two valves
 * on two connections.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createValve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { checkRules } from '../helpers/bounds.js';
import { CLIENT_FAMILIES, connectClient } from '../helpers/redis-clients.js';
import { respCommand } from '../helpers/resp.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Wraps a store to log the store clock of every grant. */
function logging(inner: Store, grants: { t: number; cost: number }[]): Store {
  return {
    acquire: async (request) => {
      const r = await inner.acquire(request);
      for (let i = 0; i < r.granted; i++) grants.push({ t: r.now, cost: request.costs[i]! });
      return r;
    },
    pause: (id, ms) => inner.pause(id, ms),
    resume: (id) => inner.resume(id),
    renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
    release: (id, tokens) => inner.release(id, tokens),
  };
}

describe('valves over redisStore', () => {
  // A server of its own for SCRIPT FLUSH: flushing the shared server's script cache could disturb other tests.
  let own: RedisServer;
  beforeAll(async () => {
    own = await startRedis();
  });
  afterAll(async () => {
    await own?.stop();
  });

  for (const family of CLIENT_FAMILIES) {
    it(`SCRIPT FLUSH during a run never fails a job (${family})`, async () => {
      const server = own;
      const c = await connectClient(family, server);
      try {
        const rules = [{ limit: 1000, interval: '1s', burst: 10 }];
        const grants: { t: number; cost: number }[] = [];
        const valve = createValve({
          id: 'flush',
          rules,
          store: logging(redisStore({ client: c.client, prefix: uniquePrefix('vflush') }), grants),
          onStoreError: 'throw',
        });
        let stop = false;
        let flushes = 0;
        const flusher = (async () => {
          while (!stop) {
            await respCommand(server, ['SCRIPT', 'FLUSH']);
            flushes++;
            await sleep(5);
          }
        })();
        const results = await Promise.allSettled(Array.from({ length: 400 }, (_, i) => valve.run(() => i)));
        stop = true;
        await flusher;
        expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
        expect(valve.stats().storeErrors).toBe(0);
        expect(flushes).toBeGreaterThan(10);
        expect(checkRules(grants, rules)).toEqual([]);
        await valve.close();
      } finally {
        await c.close();
      }
    });
  }

  for (const family of ['ioredis', 'redis'] as const) {
    it(`a server restart mid-run never fails a job under onStoreError 'wait' (${family})`, async () => {
      const server = await startRedis();
      const c = await connectClient(family, server);
      try {
        const valve = createValve({
          id: 'restart',
          rules: [{ limit: 200, interval: '1s' }],
          store: redisStore({ client: c.client, prefix: uniquePrefix('vrestart'), timeout: 500 }),
        });
        const jobs = Array.from({ length: 200 }, (_, i) => valve.run(() => i));
        await sleep(300);
        await server.restart();
        const results = await Promise.allSettled(jobs);
        expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
        expect(valve.stats().started).toBe(200);
        await valve.close();
      } finally {
        await c.close();
        await server.stop();
      }
    }, 30_000);
  }

  for (const family of CLIENT_FAMILIES) {
    it(`pipelined admission keeps queue order and the bounds as the rule starts to bind (${family})`, async () => {
      const c = await connectClient(family, sharedRedis());
      try {
        // The burst lets the first ~600 jobs through without binding (two calls in flight), then
        // the rule binds mid-pipeline: a call is cut short while the next one travels.
        const rules = [{ limit: 4000, interval: '1s', burst: 600 }];
        const grants: { t: number; cost: number }[] = [];
        const inner = logging(redisStore({ client: c.client, prefix: uniquePrefix('vpipe') }), grants);
        let inFlight = 0;
        let maxInFlight = 0;
        const store: Store = {
          ...inner,
          acquire: async (request) => {
            inFlight++;
            maxInFlight = Math.max(maxInFlight, inFlight);
            try {
              return await inner.acquire(request);
            } finally {
              inFlight--;
            }
          },
        };
        const valve = createValve({ id: 'pipe', rules, store });
        const order: number[] = [];
        // Two priorities, arriving in waves while calls are in flight: within each priority,
        // jobs start in call order, whichever call's grant starts them.
        const low: number[] = [];
        const high: number[] = [];
        const all: Promise<unknown>[] = [];
        for (let wave = 0; wave < 10; wave++) {
          for (let i = 0; i < 150; i++) {
            const k = wave * 1000 + i;
            all.push(
              valve.run(() => {
                order.push(k);
                low.push(k);
              }),
            );
          }
          for (let i = 0; i < 20; i++) {
            const k = wave * 1000 + 500 + i;
            all.push(
              valve.run(
                () => {
                  order.push(k);
                  high.push(k);
                },
                { priority: 1 },
              ),
            );
          }
          await sleep(10);
        }
        await Promise.all(all);
        expect(order.length).toBe(1700);
        expect(low).toEqual([...low].sort((a, b) => a - b));
        expect(high).toEqual([...high].sort((a, b) => a - b));
        expect(maxInFlight).toBe(2);
        expect(checkRules(grants, rules)).toEqual([]);
        await valve.close();
      } finally {
        await c.close();
      }
    });
  }

  it('global concurrency: two valves on two connections never run more than the limit', async () => {
    const server = sharedRedis();
    const a = await connectClient('ioredis', server);
    const b = await connectClient('redis', server);
    try {
      const prefix = uniquePrefix('vconc');
      let running = 0;
      let peak = 0;
      const job = async () => {
        running++;
        peak = Math.max(peak, running);
        await sleep(5 + Math.random() * 10);
        running--;
      };
      const make = (c: typeof a) =>
        createValve({
          id: 'conc',
          store: redisStore({ client: c.client, subscriber: c.subscriber, prefix }),
          concurrency: { limit: 3, scope: 'global', leaseTtl: 5000 },
        });
      const v1 = make(a);
      const v2 = make(b);
      await Promise.all([
        ...Array.from({ length: 60 }, () => v1.run(job)),
        ...Array.from({ length: 60 }, () => v2.run(job)),
      ]);
      expect(peak).toBe(3);
      await v1.close();
      await v2.close();
    } finally {
      await a.close();
      await b.close();
    }
  });
});
