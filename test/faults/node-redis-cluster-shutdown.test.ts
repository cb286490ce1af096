/**
 * docs/redis.md's node-redis cluster set-up (examples/redis-clients/node-redis-cluster.ts, run
 * as it is, with node-redis 5 and with node-redis 6 in place of 'redis') shuts down while every
 * node is down: a job holding a global lease settles after the cluster died, so the valve's
 * close() sends its release to no node; then the set-up's own close() must settle. With
 * node-redis' offline queue on (its default), that release waits in the queue and the client's
 * close() never settles (the process then ends with the shutdown unfinished).
 */
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import type { Store } from '../../src/index.js';
import { type RedisCluster, startCluster } from '../helpers/servers.js';

type Setup = (
  nodes: { host: string; port: number }[],
) => Promise<{ store: Store; close(): Promise<unknown> }>;

let cluster: RedisCluster | undefined;
const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

beforeAll(() => {
  vi.spyOn(console, 'warn').mockImplementation(() => {}); // the set-up logs each failed reconnect
});
afterAll(async () => {
  vi.restoreAllMocks();
  await cluster?.stop();
});

it.each(['redis', 'redis6'])(
  'node-redis cluster set-up with %s: its shutdown settles while every node is down',
  async (lib) => {
    vi.resetModules();
    if (lib === 'redis6') vi.doMock('redis', () => import('redis6'));
    else vi.doUnmock('redis');
    const { setup } = (await import('../../examples/redis-clients/node-redis-cluster.js')) as {
      setup: Setup;
    };
    const { createValve } = await import('../../src/index.js');
    const [used, v6] = await Promise.all([import('redis'), import('redis6')]);
    expect((used.createCluster as unknown) === v6.createCluster).toBe(lib === 'redis6');
    cluster = await startCluster({ masters: 3 });
    const { store, close } = await setup(cluster.nodes);
    const valve = createValve({
      id: `shutdown-${lib}`,
      rules: { limit: 100, interval: '1s' },
      concurrency: { limit: 2, scope: 'global' },
      store,
      onStoreError: 'throw',
    });
    valve.on('store-error', () => {});
    expect(await valve.run(() => 'ok')).toBe('ok');
    let finish!: () => void;
    const started = new Promise<void>((ready) => {
      void valve.run(
        () =>
          new Promise<void>((done) => {
            finish = done;
            ready();
          }),
      );
    });
    await started;
    for (const server of cluster.servers) server.kill('SIGKILL');
    await Promise.all(cluster.servers.map((s) => s.exited()));
    await sleep(200); // the clients have seen their sockets close
    finish(); // the job settles: its lease's release goes to a cluster that is down
    await valve.close();
    const t0 = performance.now();
    const outcome = await Promise.race([
      close().then(
        () => 'settled',
        () => 'settled',
      ),
      sleep(10_000).then(() => 'pending after 10 s'),
    ]);
    expect(outcome).toBe('settled');
    expect(performance.now() - t0).toBeLessThan(2000);
    await cluster.stop();
    cluster = undefined;
  },
  60_000,
);
