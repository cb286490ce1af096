/**
 * One documented client set-up in a process of its own, for test/faults/client-setups.test.ts:
 * `node --import tsx client-setups-worker.ts <set-up> <json target>`. It connects as the docs
 * show, runs a job, and keeps a job running (the valve subscribed) while the test restarts the
 * server; then runs jobs until one goes through again, closes its valve, and on "close" shuts
 * the connections down as the set-up shows, and must then exit by itself (no process.exit).
 * It talks over stdout lines (`ready`, `resumed <ms>`, `valve-closed`, `closed`) and reads
 * commands (`restarted`, `close`) from stdin.
 */
import { createInterface } from 'node:readline';
import {
  ioredisClient,
  ioredisCluster,
  nodeRedisClient,
  nodeRedisCluster,
} from '../../examples/client-settings.js';
import { setup as ioredis } from '../../examples/redis-clients/ioredis.js';
import { setup as ioredisClusterSetup } from '../../examples/redis-clients/ioredis-cluster.js';
import { setup as iovalkey } from '../../examples/redis-clients/iovalkey.js';
import { setup as iovalkeyClusterSetup } from '../../examples/redis-clients/iovalkey-cluster.js';
import { setup as nodeRedis } from '../../examples/redis-clients/node-redis.js';
import { setup as nodeRedisClusterSetup } from '../../examples/redis-clients/node-redis-cluster.js';
import { createValve, redisStore, type Store } from '../../src/index.js';

interface Target {
  url: string;
  host: string;
  port: number;
  nodes: { host: string; port: number }[];
}

const [name, json] = process.argv.slice(2) as [string, string];
const target = JSON.parse(json) as Target;
const quiet = { warn: () => {} };
const rootNodes = () => target.nodes.map((n) => ({ url: `redis://${n.host}:${n.port}` }));

/** Each set-up: its store and its shutdown (the docs' own for docs/redis.md's set-ups). */
const setups: Record<string, () => Promise<{ store: Store; close(): Promise<unknown> }>> = {
  'redis.md ioredis': () => ioredis(target.url),
  'redis.md iovalkey': () => iovalkey(target.url),
  'redis.md node-redis': () => nodeRedis(target.url),
  'redis.md ioredis-cluster': () => ioredisClusterSetup(target.nodes),
  'redis.md iovalkey-cluster': () => iovalkeyClusterSetup(target.nodes),
  'redis.md node-redis-cluster': () => nodeRedisClusterSetup(target.nodes),
  'timeouts ioredis': async () => {
    const { client, subscriber } = await ioredisClient(target.host, target.port, quiet);
    return {
      store: redisStore({ client, subscriber }),
      close: async () => [client, subscriber].map((c) => c.disconnect()),
    };
  },
  'timeouts ioredis-cluster': async () => {
    const { client, subscriber } = await ioredisCluster(target.nodes, quiet);
    return {
      store: redisStore({ client, subscriber }),
      close: async () => [client, subscriber].map((c) => c.disconnect()),
    };
  },
  'timeouts node-redis': async () => {
    const { client, subscriber } = await nodeRedisClient(target.url, quiet);
    return {
      store: redisStore({ client, subscriber }),
      close: () => Promise.all([client.destroy(), subscriber.destroy()]),
    };
  },
  'timeouts node-redis-cluster': async () => {
    const client = await nodeRedisCluster(rootNodes(), quiet);
    return { store: redisStore({ client }), close: async () => client.destroy() };
  },
};

const lines = createInterface({ input: process.stdin });
const commands: string[] = [];
const waiters: ((line: string) => void)[] = [];
lines.on('line', (line) => {
  const waiter = waiters.shift();
  if (waiter) waiter(line);
  else commands.push(line);
});
const next = () =>
  new Promise<string>((resolve) => {
    const line = commands.shift();
    if (line !== undefined) resolve(line);
    else waiters.push(resolve);
  });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const { store, close } = await setups[name]!();
const valve = createValve({
  id: `setups-${name.replace(/[^a-z-]/g, '-')}`,
  rules: { limit: 100, interval: '1s' },
  store,
  onStoreError: 'wait',
  maxWait: '20s',
});
valve.on('store-error', () => {});
await valve.run(() => 1);
let release!: () => void;
let held!: Promise<void>;
await new Promise<void>((started) => {
  held = valve.run(
    () =>
      new Promise<void>((resolve) => {
        release = resolve;
        started();
      }),
  );
});
console.log('ready');

if ((await next()) !== 'restarted') throw new Error('expected "restarted"');
release();
await held;
const t0 = performance.now();
for (;;) {
  const ok = await valve.run(() => true).catch(() => false);
  if (ok) break;
  await sleep(50);
}
console.log(`resumed ${Math.round(performance.now() - t0)}`);
await valve.close();
console.log('valve-closed');

if ((await next()) !== 'close') throw new Error('expected "close"');
await close();
lines.close();
console.log('closed');
