/*
 * Calls a cluster refuses without running them (TRYAGAIN, CLUSTERDOWN, MOVED, ASK): which ones
 * valve sends again, and for which clients (docs/redis.md, "Cluster"). A client wrapping a private
 * server refuses chosen script calls as a cluster would during a slot migration.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { ACQUIRE, PAUSE } from '../../src/stores/redis/scripts.generated.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';

const perSecond = normalizeRule({ limit: 10, interval: '1s', burst: 2 }, 'rules[0]');
let server: RedisServer;
let real: Redis;
beforeAll(async () => {
  server = await startRedis();
  real = new Redis({ host: server.host, port: server.port });
}, 60_000);
afterAll(async () => {
  real?.disconnect();
  await server?.stop();
});

/** An ioredis-like client (a Cluster when `cluster`) whose first call of `script` fails with `error`. */
function refusing(cluster: boolean, script: string, error: string) {
  let refuse = true;
  const client = {
    ...(cluster ? { isCluster: true, options: { retryDelayOnFailover: 0 } } : {}),
    evalsha(sha: string, numKeys: number, ...args: unknown[]) {
      if (sha === script && refuse) {
        refuse = false;
        return Promise.reject(new Error(error));
      }
      return real.evalsha(sha, numKeys, ...(args.flat() as string[]));
    },
    eval(src: string, numKeys: number, ...args: unknown[]) {
      return real.eval(src, numKeys, ...(args.flat() as string[]));
    },
  };
  return client as never;
}

describe('a call refused without running (cluster errors)', () => {
  it('an admission is sent again on a cluster client, and granted', async () => {
    const store = redisStore({
      client: refusing(true, ACQUIRE.sha, 'TRYAGAIN Multiple keys request during rehashing of slot'),
      prefix: 'rs1',
      pubsub: 'classic',
    });
    const r = await store.acquire({ id: 'a', rules: [perSecond], costs: [1], count: 1 });
    expect(r.granted).toBe(1);
  });

  it('a pause is not: it fails, and a resume sent after it is not undone by it', async () => {
    const store = redisStore({
      client: refusing(true, PAUSE.sha, 'TRYAGAIN Multiple keys request during rehashing of slot'),
      prefix: 'rs2',
      pubsub: 'classic',
    });
    const order: string[] = [];
    const paused = Promise.resolve(store.pause('x', 60_000)).then(
      () => order.push('pause'),
      () => order.push('pause failed'),
    );
    const resumed = Promise.resolve(store.resume('x')).then(() => order.push('resume'));
    await Promise.all([paused, resumed]);
    // Whatever comes later must not bring the pause back.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(order).toContain('pause failed');
    expect(await real.exists('rs2:{x}:pause')).toBe(0);
  });

  it("a standalone client's MOVED is final: it fails at once, not at the timeout", async () => {
    const store = redisStore({
      client: refusing(false, ACQUIRE.sha, 'MOVED 1234 127.0.0.1:7001'),
      prefix: 'rs3',
      timeout: 2000,
    });
    const started = performance.now();
    const error = await Promise.resolve(
      store.acquire({ id: 'a', rules: [perSecond], costs: [1], count: 1 }),
    ).then(
      () => null,
      (err: Error) => err,
    );
    expect(error?.message).toMatch(/^MOVED/);
    expect(performance.now() - started).toBeLessThan(1000);
  });
});
