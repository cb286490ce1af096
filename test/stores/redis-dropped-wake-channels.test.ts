/**
 * Valves that go idle and are dropped while the subscriber connection is down hold no channel
 * once it is back. ioredis and iovalkey keep their own list of channels and subscribe it again on
 * reconnection, while an UNSUBSCRIBE made meanwhile is rejected (the documented subscriber
 * inherits `maxRetriesPerRequest: 0`); node-redis queues it (and is the control there), but it
 * too subscribes again a channel whose UNSUBSCRIBE the connection cut before the answer. The client settings are the
 * ones of docs/timeouts-and-reconnection.md; the outage is a SIGKILL and restart of the server,
 * or a TCP proxy that resets and refuses the subscriber's connections.
 */
import IORedis from 'ioredis';
import Valkey from 'iovalkey';
import * as nodeRedis from 'redis';
import { afterAll, describe, expect, it } from 'vitest';
import { createValve, createValveGroup, redisStore } from '../../src/index.js';
import { CHANNEL_LINGER } from '../../src/stores/redis/subscriber.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { startProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { resumeToStart } from '../helpers/wake-check.js';

type Family = 'ioredis' | 'iovalkey' | 'redis';
type Client = { on(e: string, f: () => void): unknown; connect(): Promise<unknown> };

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const servers: RedisServer[] = [];
const proxies: TcpProxy[] = [];
afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await Promise.all(servers.map((s) => s.stop()));
});

/** A command client and a subscriber with the documented settings; the subscriber through `subPort`. */
async function connect(family: Family, host: string, port: number, subPort = port) {
  let client: Client;
  let subscriber: Client;
  if (family === 'redis') {
    const options = {
      url: `redis://${host}:${port}`,
      disableOfflineQueue: true,
      socket: { connectTimeout: 5000, reconnectStrategy: (r: number) => Math.min(r * 100, 2000) },
    };
    const c = nodeRedis.createClient(options);
    client = c as unknown as Client;
    subscriber = c.duplicate({
      disableOfflineQueue: false,
      url: `redis://${host}:${subPort}`,
    }) as unknown as Client;
  } else {
    const Ctor = (family === 'ioredis' ? IORedis : Valkey) as unknown as new (
      o: object,
    ) => Client & {
      duplicate(o: object): Client;
    };
    const c = new Ctor({
      host,
      port,
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      retryStrategy: (times: number) => Math.min(times * 100, 2000),
      connectTimeout: 5000,
    });
    client = c;
    subscriber = c.duplicate({ enableOfflineQueue: true, port: subPort });
  }
  for (const c of [client, subscriber]) {
    c.on('error', () => {});
    await c.connect();
  }
  const close = () => {
    for (const c of [client, subscriber] as { disconnect?(): void; destroy?(): void }[]) {
      if (family === 'redis') c.destroy?.();
      else c.disconnect?.();
    }
  };
  return { client, subscriber, close };
}

async function channels(server: RedisServer): Promise<string[]> {
  return ((await server.command(['PUBSUB', 'CHANNELS', 'g:*'])) as string[]).map(String).sort();
}

async function until(check: () => Promise<boolean> | boolean, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end && !(await check()); ) await sleep(50);
}

/**
 * Valves a, b, c run jobs while subscribed; `down()` starts the outage; they go idle and are
 * evicted; c gets a job again while still down; `up()` ends the outage. Then only c's channel
 * is subscribed, and the subscriber still delivers wake-ups (c is confirmed by a probe, and a
 * resume from another process wakes a waiting valve at once).
 */
async function scenario(
  family: Family,
  server: RedisServer,
  subPort: number,
  down: () => Promise<void>,
  up: () => Promise<void>,
) {
  const { client, subscriber, close } = await connect(family, server.host, server.port, subPort);
  const store = redisStore({ client, subscriber, prefix: 'g', timeout: 300 });
  const group = createValveGroup({ rules: [{ limit: 100, interval: 1000 }], store, idleTimeout: 500 });
  const other = await connect(family, server.host, server.port);
  const remote = createValve({ id: 'w', store: redisStore({ client: other.client, prefix: 'g' }) });
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => unhandled.push(err);
  process.on('unhandledRejection', onUnhandled);
  const hold: (() => void)[] = [];
  try {
    const held = () => new Promise<void>((r) => hold.push(r));
    const runs = ['a', 'b', 'c'].map((k) => group.run(k, held));
    await until(() => hold.length === 3 && ['a', 'b', 'c'].every((k) => store.listening!(k)));
    expect(await channels(server)).toEqual(['g:{a}:wake', 'g:{b}:wake', 'g:{c}:wake']);
    await down();
    for (const release of hold.splice(0)) release();
    await Promise.all(runs);
    await until(() => group.size === 0, 5000); // idle and evicted while down
    expect(group.size).toBe(0);
    await sleep(CHANNEL_LINGER + 500); // and their channels dropped
    const gate = new Promise<void>((r) => hold.push(r)); // released whether or not the job started yet
    const again = group.run('c', () => gate); // c has work again before the subscriber is back
    await sleep(100);
    await up();
    await until(async () => store.listening!('c') && (await channels(server)).length === 1);
    expect(await channels(server)).toEqual(['g:{c}:wake']);
    expect(store.listening!('c')).toBe(true);
    // A live valve's wake-ups work: a resume made elsewhere starts its waiting job at once.
    expect(
      await resumeToStart(
        remote,
        (job) => group.run('w', job),
        () => store.listening!('w'),
      ),
    ).toBeLessThan(500);
    for (const release of hold.splice(0)) release();
    await again;
    await sleep(2500);
    expect(await channels(server)).toEqual([]);
    expect(unhandled).toEqual([]);
  } finally {
    for (const release of hold.splice(0)) release();
    process.off('unhandledRejection', onUnhandled);
    await group.close();
    await remote.close();
    other.close();
    close();
  }
}

/**
 * A valve goes idle and its channel's UNSUBSCRIBE is sent on a live connection, but the server
 * stops (SIGSTOP) before answering and is then killed and restarted: the UNSUBSCRIBE is rejected
 * with the connection, and the client (node-redis too) still counts the channel as subscribed and
 * subscribes it again on reconnection. Once the subscriber is back, no channel is left.
 */
async function unsubscribeCut(family: Family, server: RedisServer) {
  const { client, subscriber, close } = await connect(family, server.host, server.port);
  const store = redisStore({ client, subscriber, prefix: 'g', timeout: 300 });
  const valve = createValve({ id: 'u', store, rules: [{ limit: 100, interval: 1000 }] });
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => unhandled.push(err);
  process.on('unhandledRejection', onUnhandled);
  try {
    let release = () => {};
    const run = valve.run(() => new Promise<void>((r) => (release = r)));
    await until(() => store.listening!('u'));
    expect(await channels(server)).toEqual(['g:{u}:wake']);
    server.kill('SIGSTOP');
    release();
    await run; // idle: the channel lingers, then its UNSUBSCRIBE goes out, unanswered
    await sleep(CHANNEL_LINGER + 500);
    server.kill('SIGKILL');
    await server.exited();
    await server.restart();
    // The subscriber reconnects (and the client resubscribes what it still counts) within a few
    // seconds; the channel must be gone by then and stay gone.
    await until(
      async () =>
        (subscriber as { isReady?: boolean; status?: string }).isReady === true ||
        (subscriber as { status?: string }).status === 'ready',
    );
    await sleep(2000);
    expect(await channels(server)).toEqual([]);
    expect(unhandled).toEqual([]);
  } finally {
    process.off('unhandledRejection', onUnhandled);
    await valve.close();
    close();
  }
}

describe.each(['ioredis', 'iovalkey', 'redis'] as const)(
  'channels of valves dropped during an outage (%s)',
  (family) => {
    it('Redis SIGKILLed and restarted: no channel of a dropped valve stays subscribed', async () => {
      const server = await startRedis();
      servers.push(server);
      await scenario(
        family,
        server,
        server.port,
        async () => {
          server.kill('SIGKILL');
          await server.exited();
        },
        () => server.restart(),
      );
    }, 40_000);

    it('an UNSUBSCRIBE cut by the connection (server stopped, killed, restarted): the channel is not subscribed again', async () => {
      const server = await startRedis();
      servers.push(server);
      await unsubscribeCut(family, server);
    }, 40_000);

    it('the subscriber cut off by a proxy that refuses it: no channel of a dropped valve stays subscribed', async () => {
      const server = await startRedis();
      servers.push(server);
      const proxy = await startProxy({ target: server });
      proxies.push(proxy);
      await scenario(
        family,
        server,
        proxy.port,
        async () => {
          proxy.refuse(true);
          proxy.dropAll();
        },
        async () => proxy.refuse(false),
      );
    }, 40_000);
  },
);
