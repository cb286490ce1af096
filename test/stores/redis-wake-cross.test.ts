/**
 * Pub/sub channels are server-wide: a classic channel ignores SELECT, and ioredis' keyPrefix
 * does not prefix it. So deployments on one server told apart by database or by keyPrefix, with
 * the same valve prefix and id, hear each other's wake-ups. A 'pause' wake-up is only a cue to
 * ask the store (never trusted), so another database's pauses never hold this one's jobs, while
 * a pause or a resume in the same database still reaches the other processes at once.
 */
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterEach, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { createValve, type Valve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { countingAcquires } from '../helpers/spy-store.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) {
    try {
      await fn();
    } catch {
      // best effort
    }
  }
});

function ioredis(url: string, options: { keyPrefix?: string } = {}): Redis {
  const c = new Redis(url, options);
  c.on('error', () => {});
  cleanups.push(() => c.disconnect());
  return c;
}

async function nodeRedis(url: string) {
  const c = createClient({ url });
  c.on('error', () => {});
  await c.connect();
  cleanups.push(() => c.destroy());
  return c;
}

/** A raw subscriber on the id's wake channel: resolves each time a 'pause:' message arrives. */
async function watchChannel(url: string, prefix: string, id: string) {
  const sub = ioredis(url);
  const channel = `${prefix}:{${id}}:wake`;
  let waiters: (() => void)[] = [];
  let count = 0;
  sub.on('message', (ch: string, message: string) => {
    if (ch !== channel || !message.startsWith('pause:')) return;
    count++;
    const w = waiters;
    waiters = [];
    for (const fn of w) fn();
  });
  await sub.subscribe(channel);
  return {
    /** Resolves once `n` pause messages arrived in all (30 s at most). */
    pauses: (n: number) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no pause message ${n} on ${channel}`)), 30_000);
        const check = () => {
          if (count >= n) {
            clearTimeout(timer);
            resolve();
          } else waiters.push(check);
        };
        check();
      }),
  };
}

/** Runs jobs back to back on `valve` until stopped; counts them. */
function worker(valve: Valve) {
  let done = 0;
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      await valve.run(() => {
        done++;
      });
    }
  })();
  return {
    done: () => done,
    stop: async () => {
      stop = true;
      await loop;
    },
  };
}

/** Waits until `valve`'s store confirms its subscription (it has work meanwhile). */
async function untilListening(store: Store, id: string): Promise<void> {
  for (let i = 0; i < 300 && store.listening?.(id) !== true; i++) await sleep(20);
  expect(store.listening?.(id)).toBe(true);
}

/**
 * prod listens on database/prefix A; `pauseElsewhere(i)` writes the i-th pause (each longer) for
 * the same valve prefix and id where prod does not look. prod keeps running, never caches the
 * pause and emits no 'pause' event.
 */
async function crossTalk(
  url: string,
  prefix: string,
  id: string,
  prodStore: Store,
  pauseElsewhere: (i: number) => Promise<unknown>,
): Promise<void> {
  const prod = createValve({ id, rules: { limit: 10, interval: '1s' }, store: prodStore });
  cleanups.push(() => prod.close());
  const paused: unknown[] = [];
  prod.on('pause', (e) => paused.push(e));
  const watch = await watchChannel(url, prefix, id);
  const w = worker(prod);
  cleanups.push(() => w.stop());
  await untilListening(prodStore, id);
  const before = w.done();
  const rounds = 4;
  for (let i = 0; i < rounds; i++) {
    await pauseElsewhere(i);
    await watch.pauses(i + 1);
    // prod heard the message too (same server): give it time to act on it.
    await sleep(300);
    expect(prod.stats().pausedUntil).toBeNull();
    await sleep(400);
  }
  const during = w.done() - before;
  await w.stop();
  expect(paused).toEqual([]);
  // 10 jobs a second for about 3 s: prod kept running (before the fix it ran none).
  expect(during).toBeGreaterThanOrEqual(10);
}

describe('wake-ups from another database or keyPrefix of the same server', () => {
  it('ioredis: pauses written in db 1, extended again and again, never hold db 0', async () => {
    const { url } = sharedRedis();
    const prefix = uniquePrefix('wx');
    const id = 'shared-id';
    const prodStore = redisStore({ client: ioredis(`${url}/0`), subscriber: ioredis(`${url}/0`), prefix });
    const staging = createValve({
      id,
      rules: { limit: 10, interval: '1s' },
      store: redisStore({ client: ioredis(`${url}/1`), prefix }),
    });
    cleanups.push(async () => {
      await staging.resume();
      await staging.close();
    });
    await crossTalk(url, prefix, id, prodStore, (i) => staging.pause(60_000 + i * 1000));
  }, 60_000);

  it('costs a valve waiting on a long rate wait one store call per message, and holds nothing', async () => {
    const { url } = sharedRedis();
    const prefix = uniquePrefix('wx');
    const id = 'shared-id';
    const prodStore = redisStore({ client: ioredis(`${url}/0`), subscriber: ioredis(`${url}/0`), prefix });
    const { store, acquires } = countingAcquires(prodStore);
    // One job a minute: after the first, the next waits about 60 s on rate, asking nothing.
    const prod = createValve({ id, rules: { limit: 1, interval: '60s' }, store });
    cleanups.push(() => prod.close());
    const paused: unknown[] = [];
    prod.on('pause', (e) => paused.push(e));
    const staging = createValve({
      id,
      rules: { limit: 1, interval: '60s' },
      store: redisStore({ client: ioredis(`${url}/1`), prefix }),
    });
    cleanups.push(async () => {
      await staging.resume();
      await staging.close();
    });
    const watch = await watchChannel(url, prefix, id);
    await prod.run(() => 0);
    void prod.run(() => 0).catch(() => {});
    await untilListening(prodStore, id);
    const before = acquires();
    for (let i = 0; i < 3; i++) {
      await staging.pause(60_000 + i * 1000);
      await watch.pauses(i + 1);
      await sleep(300);
      // The message made it ask the store (a resubscription's recheck may add one more).
      expect(acquires() - before).toBeGreaterThanOrEqual(i + 1);
      expect(prod.stats().pausedUntil).toBeNull();
    }
    expect(acquires() - before).toBeLessThanOrEqual(3 + 1);
    expect(paused).toEqual([]);
  }, 60_000);

  it('node-redis: pauses written in db 1 never hold db 0', async () => {
    const { url } = sharedRedis();
    const prefix = uniquePrefix('wx');
    const id = 'shared-id';
    const prodStore = redisStore({
      client: await nodeRedis(`${url}/0`),
      subscriber: await nodeRedis(`${url}/0`),
      prefix,
    });
    const staging = createValve({
      id,
      rules: { limit: 10, interval: '1s' },
      store: redisStore({ client: await nodeRedis(`${url}/1`), prefix }),
    });
    cleanups.push(async () => {
      await staging.resume();
      await staging.close();
    });
    await crossTalk(url, prefix, id, prodStore, (i) => staging.pause(60_000 + i * 1000));
  }, 60_000);

  it("ioredis keyPrefix: pauses under another keyPrefix never hold this one's jobs", async () => {
    const { url } = sharedRedis();
    const prefix = uniquePrefix('wx');
    const id = 'shared-id';
    const prodStore = redisStore({
      client: ioredis(url, { keyPrefix: 'prod:' }),
      subscriber: ioredis(url, { keyPrefix: 'prod:' }),
      prefix,
    });
    const staging = createValve({
      id,
      rules: { limit: 10, interval: '1s' },
      store: redisStore({ client: ioredis(url, { keyPrefix: 'staging:' }), prefix }),
    });
    cleanups.push(async () => {
      await staging.resume();
      await staging.close();
    });
    await crossTalk(url, prefix, id, prodStore, (i) => staging.pause(60_000 + i * 1000));
  }, 60_000);

  it('valve pause --redis <url>/1 does not hold the processes using db 0', async () => {
    const { url } = sharedRedis();
    const prefix = uniquePrefix('wx');
    const id = 'shared-id';
    const io = { stdout: { write: () => {} }, stderr: { write: () => {} }, env: {} };
    const cli = (...args: string[]) => main([...args, '--redis', `${url}/1`, '--prefix', prefix], io);
    cleanups.push(() => cli('resume', id));
    const prodStore = redisStore({ client: ioredis(`${url}/0`), subscriber: ioredis(`${url}/0`), prefix });
    await crossTalk(url, prefix, id, prodStore, async (i) => {
      expect(await cli('pause', id, `${10 + i}m`)).toBe(0);
    });
  }, 60_000);
});

describe('wake-ups within one database still act at once', () => {
  it("another process's pause reaches a valve waiting on a long rate wait at once, through the store's answer", async () => {
    const { url } = sharedRedis();
    const prefix = uniquePrefix('wx');
    const id = 'same-db';
    const aStore = redisStore({ client: ioredis(url), subscriber: ioredis(url), prefix });
    // One job a minute: after the first, the next waits about 60 s on rate before asking again.
    const a = createValve({ id, rules: { limit: 1, interval: '60s' }, store: aStore });
    cleanups.push(() => a.close({ drain: false }));
    const b = createValve({
      id,
      rules: { limit: 1, interval: '60s' },
      store: redisStore({ client: ioredis(url), prefix }),
    });
    cleanups.push(async () => {
      await b.resume();
      await b.close();
    });
    await a.run(() => 0);
    const waiting = a.run(() => 0).catch(() => {});
    await untilListening(aStore, id);
    const heard = new Promise<{ until: number; source: string }>((resolve) => a.once('pause', resolve));
    const t0 = Date.now();
    await b.pause(600_000);
    const event = await Promise.race([heard, sleep(10_000).then(() => null)]);
    // Learnt long before the rate wait ends (it asked the store on the wake-up).
    expect(event).not.toBeNull();
    expect(event!.source).toBe('remote');
    expect(event!.until).toBeGreaterThanOrEqual(t0 + 590_000);
    expect(a.stats().pausedUntil).not.toBeNull();
    void waiting;
  }, 60_000);

  it("another process's pause stops new grants at once, and its resume starts waiting jobs at once", async () => {
    const { url } = sharedRedis();
    const prefix = uniquePrefix('wx');
    const id = 'same-db-run';
    const aStore = redisStore({ client: ioredis(url), subscriber: ioredis(url), prefix });
    const a = createValve({ id, rules: { limit: 20, interval: '1s' }, store: aStore });
    cleanups.push(() => a.close({ drain: false }));
    const b = createValve({
      id,
      rules: { limit: 20, interval: '1s' },
      store: redisStore({ client: ioredis(url), prefix }),
    });
    cleanups.push(async () => {
      await b.resume();
      await b.close();
    });
    const watch = await watchChannel(url, prefix, id);
    const w = worker(a);
    cleanups.push(() => w.stop());
    await untilListening(aStore, id);
    await b.pause(600_000);
    await watch.pauses(1);
    await sleep(300);
    expect(a.stats().pausedUntil).not.toBeNull();
    const held = w.done();
    await sleep(1000);
    expect(w.done()).toBe(held);
    await b.resume();
    // Far sooner than the 10-minute pause or the 30 s recheck: the resume woke it.
    for (let i = 0; i < 250 && w.done() === held; i++) await sleep(20);
    expect(w.done()).toBeGreaterThan(held);
    expect(a.stats().pausedUntil).toBeNull();
  }, 60_000);
});
