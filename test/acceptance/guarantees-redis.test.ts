/**
 * Guarantees sentences about Redis that had no test able to fail (docs/spec-coverage.md):
 * subscriber wake-ups at the valve level, and what a loss of valve's keys does.
 */
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { createValve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let clients: IORedis[] = [];
function connect(): IORedis {
  const { host, port } = sharedRedis();
  const client = new IORedis({ host, port, maxRetriesPerRequest: 1 });
  // Without a listener ioredis prints "Unhandled error event" for each connection error, e.g.
  // while a failed test's subscriber connection is torn down.
  client.on('error', () => {});
  clients.push(client);
  return client;
}
afterAll(async () => {
  await Promise.all(clients.map((c) => c.quit().catch(() => {})));
  clients = [];
});

/** A store on its own command connection and its own subscriber connection, like another process. */
function processStore(prefix: string) {
  return redisStore({ client: connect(), subscriber: connect(), prefix });
}

describe('"With a Redis subscriber, pause, resume, and slot release wake waiting processes immediately"', () => {
  it('slot release: a waiter for the only global slot starts right after the holder settles, not at its 1 s recheck', async () => {
    const prefix = uniquePrefix('wake-release');
    const concurrency = { limit: 1, scope: 'global' as const, leaseTtl: 10_000 };
    const a = createValve({ id: 'w', concurrency, store: processStore(prefix) });
    const bStore = processStore(prefix);
    let bAcquires = 0;
    const counted: Store = {
      acquire: (r) => {
        bAcquires++;
        return bStore.acquire(r);
      },
      pause: (id, ms) => bStore.pause(id, ms),
      resume: (id) => bStore.resume(id),
      renew: (id, tokens, ttl) => bStore.renew(id, tokens, ttl),
      release: (id, tokens) => bStore.release(id, tokens),
      subscribe: (id, onWake, onStatus) => bStore.subscribe!(id, onWake, onStatus),
      listening: (id) => bStore.listening!(id),
      get notifies() {
        return bStore.notifies;
      },
    };
    const b = createValve({ id: 'w', concurrency, store: counted });
    let releasedAt = 0;
    // The holder keeps the slot until b is listening: were it released while b still polled
    // (a busy machine can take longer to confirm a subscription), b would take the slot, go
    // idle and stop following wake-ups before this test saw it listening.
    let release = () => {};
    let holding = () => {};
    const held = new Promise<void>((resolve) => (holding = resolve));
    const holder = a.run(async () => {
      holding();
      await new Promise<void>((resolve) => (release = resolve));
      releasedAt = performance.now();
    });
    try {
      await held;
      // b subscribes at its acquisition (a valve follows wake-ups while it has work) and polls
      // until the server confirmed the subscription; then it trusts the wake-ups.
      const waiter = b.run(() => performance.now());
      await vi.waitFor(() => expect(bStore.listening!('w')).toBe(true), { timeout: 10_000, interval: 5 });
      await sleep(100); // b is now blocked on concurrency and sleeping on its (1 s) recheck
      const before = bAcquires;
      release();
      await holder;
      const startedAt = await waiter;
      // Without the wake-up it would sleep until its 1 s recheck.
      expect(startedAt - releasedAt).toBeLessThan(500);
      // Woken, not polling: the acquisition after the wake-up (and at most one recheck).
      expect(bAcquires - before).toBeLessThanOrEqual(2);
    } finally {
      release();
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("pause and resume: another process hears the pause at once ('remote'), and its held job starts on resume", async () => {
    const prefix = uniquePrefix('wake-pause');
    const a = createValve({ id: 'p', store: processStore(prefix) });
    const bStore = processStore(prefix);
    const b = createValve({ id: 'p', store: bStore });
    // b follows the wake-ups while it has work: a job of its runs meanwhile.
    let finish = () => {};
    const busy = b.run(() => new Promise<void>((resolve) => (finish = resolve)));
    await vi.waitFor(() => expect(bStore.listening!('p')).toBe(true), { timeout: 10_000, interval: 5 });
    const heard: { until: number; source: string }[] = [];
    b.on('pause', (e) => heard.push(e));
    await a.pause(60_000);
    // The wake-up is a cue, not trusted: the job queued now asks the store, whose answer holds it.
    let started = 0;
    const held = b.run(() => {
      started = performance.now();
    });
    await vi.waitFor(() => expect(heard).toEqual([{ until: expect.any(Number), source: 'remote' }]), {
      timeout: 500,
    });
    expect(b.stats().pausedUntil).toBeGreaterThan(Date.now() + 50_000);
    await sleep(100);
    expect(started).toBe(0);
    const resumedAt = performance.now();
    await a.resume();
    await held;
    // Without the wake-up it would wait for the cached 60 s pause to end.
    expect(started - resumedAt).toBeLessThan(500);
    finish();
    await busy;
    await Promise.all([a.close(), b.close()]);
  });
});

describe('"resume() deletes it": a pause still on the wire when resume() is called does not stick', () => {
  it('without a subscriber, a job queued after pause(); resume() starts at once', async () => {
    const prefix = uniquePrefix('resume-race');
    const valve = createValve({ id: 'rr', store: redisStore({ client: connect(), prefix }) });
    const paused = valve.pause(60_000); // not awaited: the reply arrives after resume() was called
    await valve.resume();
    await paused;
    expect(valve.stats().pausedUntil).toBeNull();
    await expect(valve.run(() => 'ran', { maxWait: 1000 })).resolves.toBe('ran');
    await valve.close();
  });
});

describe('"If Redis loses valve\'s keys ... the rate budget starts fresh and the shared pause ends"', () => {
  it('a deleted rule key grants at once again; a deleted pause key ends the pause; nothing raises an error', async () => {
    const prefix = uniquePrefix('loss');
    const client = connect();
    const store = redisStore({ client, prefix });
    const rules = createValve({ id: 'l', rules: { limit: 1, interval: '1h' }, store });
    const starts: number[] = [];
    await rules.run(() => starts.push(Date.now()));
    const blocked = rules.run(() => starts.push(Date.now()), { maxWait: 300 });
    const err = await blocked.catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'MAX_WAIT' });
    // The key loss: valve cannot tell; the budget starts fresh.
    const ruleKeys = await client.keys(`${prefix}:{l}:r:*`);
    expect(ruleKeys).toHaveLength(1);
    await client.del(...ruleKeys);
    // (This valve keeps sleeping on the store's 1 h hint; another process asks the store now.)
    const fresh = createValve({
      id: 'l',
      rules: { limit: 1, interval: '1h' },
      store: redisStore({ client: connect(), prefix }),
    });
    await expect(fresh.run(() => 'fresh', { maxWait: 500 })).resolves.toBe('fresh');
    await Promise.all([rules.close(), fresh.close()]);

    const paused = createValve({ id: 'l2', store });
    await paused.pause(60_000);
    expect(await client.exists(`${prefix}:{l2}:pause`)).toBe(1);
    await client.del(`${prefix}:{l2}:pause`);
    // Another process (no cached pause) is granted at once: the shared pause ended with its key.
    const other = createValve({ id: 'l2', store: redisStore({ client: connect(), prefix }) });
    await expect(other.run(() => 'granted', { maxWait: 500 })).resolves.toBe('granted');
    expect(other.stats().storeErrors).toBe(0);
    await Promise.all([paused.close(), other.close()]);
  });
});
