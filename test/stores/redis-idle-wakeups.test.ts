/**
 * Valves over redisStore with a subscriber: an idle valve holds no channel (and is collected
 * when dropped), and a valve whose subscription was never confirmed does not trust wake-ups
 * (a resume written elsewhere is noticed within the poll bound, not at the cached pause's end).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createValve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { CHANNEL_LINGER } from '../../src/stores/redis/subscriber.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const script = fileURLToPath(new URL('../helpers/idle-valves-script.ts', import.meta.url));

function runScript(args: string[]): Promise<{ perValve: number; count: number; channels: number }> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', script, ...args],
      { timeout: 90_000 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${err.message}\n${stderr}`));
        else resolve(JSON.parse(stdout.trim().split('\n').at(-1)!));
      },
    );
  });
}

async function channels(admin: Redis, prefix: string): Promise<string[]> {
  return (await admin.pubsub('CHANNELS', `${prefix}:*`)) as string[];
}

describe('an idle valve over Redis holds no subscription', () => {
  it('subscribes while it has work and unsubscribes its channel when idle, without close()', async () => {
    const { url } = sharedRedis();
    const client = new Redis(url);
    const subscriber = new Redis(url);
    const admin = new Redis(url);
    try {
      const prefix = uniquePrefix('idle');
      const store = redisStore({ client, subscriber, prefix });
      const valve = createValve({
        id: 'idle',
        store,
        concurrency: { limit: 2, scope: 'global', leaseTtl: 5000 },
      });
      let finish = () => {};
      const running = valve.run(() => new Promise<void>((resolve) => (finish = resolve)));
      // Confirmed by a probe (a busy machine may take a while), while the job still runs.
      for (let i = 0; i < 500 && !store.listening!('idle'); i++) await sleep(20);
      expect(await channels(admin, prefix)).toEqual([`${prefix}:{idle}:wake`]);
      finish();
      await running;
      // Idle: the valve let go of the channel; it lingers a moment in case work comes back.
      expect(store.listening!('idle')).toBe(true);
      expect(await valve.run(() => 'soon again')).toBe('soon again');
      expect(await channels(admin, prefix)).toEqual([`${prefix}:{idle}:wake`]);
      await sleep(CHANNEL_LINGER + 200);
      expect(await channels(admin, prefix)).toEqual([]);
      expect(store.listening!('idle')).toBe(false);
      expect(await valve.run(() => 'again')).toBe('again');
      await sleep(CHANNEL_LINGER + 200);
      expect(await channels(admin, prefix)).toEqual([]);
    } finally {
      client.disconnect();
      subscriber.disconnect();
      admin.disconnect();
    }
  });

  it('20k throwaway valves on one store with a subscriber retain < 100 B each after GC, and no channel', async () => {
    const { url } = sharedRedis();
    const result = await runScript([url, '20000']);
    expect(result.count).toBe(20_000);
    expect(result.channels).toBe(0);
    expect(result.perValve).toBeLessThan(100);
  }, 120_000);
});

/**
 * A valve (id 'p') over a store with `subscriber`, waiting to run a job while another valve of
 * the same id, on its own client, holds a 60 s pause. `resume()` lifts the pause and resolves
 * with how long after it the job started (ms). `done()` closes both valves and every client.
 */
async function pausedJob(name: string, subscriber: (url: string) => Redis) {
  const { url } = sharedRedis();
  const client = new Redis(url);
  const otherClient = new Redis(url);
  const sub = subscriber(url);
  const prefix = uniquePrefix(name);
  const store = redisStore({ client, subscriber: sub, prefix });
  const other = createValve({ id: 'p', store: redisStore({ client: otherClient, prefix }) });
  const valve = createValve({ id: 'p', store });
  const disconnect = () => {
    client.disconnect();
    otherClient.disconnect();
    sub.disconnect();
  };
  try {
    await other.pause(60_000);
  } catch (err) {
    disconnect();
    throw err;
  }
  let startedAt = 0;
  const job = valve.run(() => {
    startedAt = Date.now();
  });
  return {
    store,
    valve,
    async resume(): Promise<number> {
      const resumedAt = Date.now();
      await other.resume();
      await job;
      return startedAt - resumedAt;
    },
    async listening(): Promise<boolean> {
      // Up to 10 s: a probe comes back within milliseconds, unless the machine is busy.
      for (let i = 0; i < 500 && !store.listening!('p'); i++) await sleep(20);
      return store.listening!('p');
    },
    async done(): Promise<void> {
      try {
        await valve.close();
        await other.close();
      } finally {
        disconnect();
      }
    },
  };
}

describe('wake-ups over Redis count only once confirmed', () => {
  it('a subscriber whose SUBSCRIBE is dropped: a resume from another valve is noticed within the poll bound', async () => {
    // As ioredis 5.11 does for a SUBSCRIBE sent in the wrong moment: the call "succeeds", the
    // server never hears it.
    const dropping = (url: string) =>
      new Proxy(new Redis(url), {
        get(target, key, receiver) {
          if (key === 'subscribe') return async () => 1;
          const value = Reflect.get(target, key, receiver);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
    const t = await pausedJob('dropsub', dropping);
    try {
      await sleep(300);
      expect(t.valve.stats().pausedUntil).not.toBeNull();
      expect(t.store.listening!('p')).toBe(false);
      // Unconfirmed wake-ups: the cached pause is rechecked at least once a second.
      expect(await t.resume()).toBeLessThan(1500);
    } finally {
      await t.done();
    }
  });

  it('a subscriber connection that drops: the valve stops trusting wake-ups and notices a resume within the poll bound', async () => {
    let subscriber: Redis | undefined;
    const t = await pausedJob('killsub', (url) => {
      subscriber = new Redis(url);
      return subscriber;
    });
    try {
      expect(await t.listening()).toBe(true);
      await sleep(1200); // trusting the wake-ups, the valve now sleeps out its cached pause
      subscriber!.disconnect(); // the connection is gone: no wake-up will come
      await sleep(50);
      expect(t.store.listening!('p')).toBe(false);
      expect(await t.resume()).toBeLessThan(1500);
    } finally {
      await t.done();
    }
  });

  it('a confirmed subscriber: the resume wakes the valve at once', async () => {
    const t = await pausedJob('confsub', (url) => new Redis(url));
    try {
      expect(await t.listening()).toBe(true);
      await sleep(50);
      expect(await t.resume()).toBeLessThan(500);
    } finally {
      await t.done();
    }
  });
});
