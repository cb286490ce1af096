/**
 * valve/otel over a real Redis (the suite's shared server): store call durations are recorded
 * per operation, one data point per call the store saw, and a connection that is gone shows
 * as failed calls (error.type), store errors and STORE_UNAVAILABLE rejections.
 */
import { Redis as IORedis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { createValve, createValveGroup, redisStore, type Store } from '../../src/index.js';
import { instrument, instrumentStore } from '../../src/otel.js';
import { ACQUIRE_WITH } from '../../src/stores/store.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { collect, type Histogram, meterSetup } from './reader.js';

type Op = 'acquire' | 'pause' | 'resume' | 'renew' | 'release';

/** Counts each operation's calls that succeeded and failed, as the store answered them. */
function counting(inner: Store) {
  const ok: Record<string, number> = {};
  const failed: Record<string, number> = {};
  const wrap =
    <A extends unknown[], R>(op: Op, fn: (...args: A) => R | Promise<R>) =>
    async (...args: A): Promise<R> => {
      try {
        const value = await fn(...args);
        ok[op] = (ok[op] ?? 0) + 1;
        return value;
      } catch (err) {
        failed[op] = (failed[op] ?? 0) + 1;
        throw err;
      }
    };
  const store: Store = {
    acquire: wrap('acquire', inner.acquire.bind(inner)),
    pause: wrap('pause', inner.pause.bind(inner)),
    resume: wrap('resume', inner.resume.bind(inner)),
    renew: wrap('renew', inner.renew.bind(inner)),
    release: wrap('release', inner.release.bind(inner)),
  };
  return { store, ok, failed };
}

const clients: IORedis[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

describe('instrumentStore(redisStore)', () => {
  it('times every call per operation and counts the calls that failed once the connection is gone', async () => {
    const { reader, meter, provider } = meterSetup();
    const { host, port } = sharedRedis();
    const client = new IORedis({ host, port, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    clients.push(client);
    client.on('error', () => {});
    await new Promise<void>((ready) => client.once('ready', () => ready()));
    const counted = counting(redisStore({ client, prefix: uniquePrefix('otel') }));
    const valve = createValve({
      id: 'github:app-42',
      rules: { limit: 50, interval: '1s' },
      store: instrumentStore(counted.store, { meter, includeId: true }),
      concurrency: { limit: 2, scope: 'global', leaseTtl: 3000 },
      onStoreError: 'throw',
    });
    const storeErrors: unknown[] = [];
    valve.on('store-error', (err) => storeErrors.push(err));
    instrument(valve, { meter });

    await Promise.all(Array.from({ length: 10 }, (_, i) => valve.run(() => i)));
    await valve.pause(50);
    await valve.resume();
    // Let the last releases answer before the connection goes.
    await new Promise((r) => setTimeout(r, 50));

    client.disconnect();
    const failing = [valve.run(() => 'a'), valve.run(() => 'b')];
    for (const job of failing) await expect(job).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });

    const m = await collect(reader);
    const id = { 'valve.id': 'github:app-42' };
    const calls = (op: Op, error?: string) =>
      m.value<Histogram>('valve.store.operation.duration', {
        'valve.store.operation.name': op,
        ...id,
        ...(error ? { 'error.type': error } : {}),
      });
    for (const op of ['acquire', 'pause', 'resume', 'release'] as const) {
      expect(counted.ok[op], op).toBeGreaterThan(0);
      expect(calls(op), op).toMatchObject({ count: counted.ok[op] });
      expect(calls(op)!.sum, op).toBeGreaterThan(0); // real round trips take time
    }
    expect(counted.failed.acquire).toBeGreaterThan(0);
    expect(calls('acquire', 'Error')).toMatchObject({ count: counted.failed.acquire });
    expect(
      m.value('valve.store.errors', { 'valve.store.operation.name': 'acquire', 'error.type': 'Error' }),
    ).toBe(storeErrors.length);
    expect(m.value('valve.job.started')).toBe(10);
    expect(m.value('valve.job.rejected', { 'error.type': 'STORE_UNAVAILABLE' })).toBe(2);
    await valve.close();
    await provider.shutdown();
  });

  it("keeps the Redis store's callback form of acquire: jobs run through it and every call is timed", async () => {
    const { reader, meter, provider } = meterSetup();
    const { host, port } = sharedRedis();
    const client = new IORedis({ host, port });
    clients.push(client);
    client.on('error', () => {});
    const inner = redisStore({ client, prefix: uniquePrefix('otel-cb') });
    const store = instrumentStore(inner, { meter });
    const callbackForm = (store.acquire as { [ACQUIRE_WITH]?: unknown })[ACQUIRE_WITH];
    expect(typeof callbackForm).toBe('function');
    // The promise form of the wrapper is not what the valve calls.
    let promised = 0;
    const plain = store.acquire;
    const acquire = (r: Parameters<Store['acquire']>[0]) => {
      promised++;
      return plain(r);
    };
    Object.defineProperty(acquire, ACQUIRE_WITH, { value: callbackForm });
    const valve = createValve({
      id: 'cb',
      rules: { limit: 100, interval: '1s', burst: 100 },
      store: { ...store, acquire },
    });
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => valve.run(() => i)));
    expect(results).toHaveLength(20);
    expect(promised).toBe(0);
    const m = await collect(reader);
    const timed = m.value<Histogram>('valve.store.operation.duration', {
      'valve.store.operation.name': 'acquire',
    });
    expect(timed!.count).toBeGreaterThan(0);
    expect(timed!.sum).toBeGreaterThan(0);
    await valve.close();
    await provider.shutdown();
  });
});

describe('instrument(group) on Redis: a key dropped while paused', () => {
  it("stays paused in valve.paused, and its next valve counts the same pause once (no 'remote')", async () => {
    const { reader, meter, provider } = meterSetup();
    const { host, port } = sharedRedis();
    const client = new IORedis({ host, port });
    const subscriber = new IORedis({ host, port });
    clients.push(client, subscriber);
    const group = createValveGroup({
      store: redisStore({ client, subscriber, prefix: uniquePrefix('otel-evict') }),
      idleTimeout: 100,
    });
    instrument(group, { meter });
    const sources: string[] = [];
    group.on('pause', (e) => sources.push(e.source));
    await group.run('k', () => 1);
    await group.valve('k').pause(1500);
    const pausedAt = Date.now();
    await new Promise((r) => setTimeout(r, 400));
    expect(group.size).toBe(0);
    const manual = { 'valve.pause.source': 'manual' };
    expect((await collect(reader)).value('valve.paused', manual)).toBe(1);
    await group.run('k', () => 2); // waits for the pause's end
    expect(Date.now() - pausedAt).toBeGreaterThanOrEqual(1400);
    expect(sources).toEqual(['manual']);
    const m = await collect(reader);
    expect(m.points('valve.pauses').map((p) => [p.attributes, p.value])).toEqual([[manual, 1]]);
    expect(m.value('valve.paused', manual)).toBe(0);
    await group.close();
    await provider.shutdown();
  });
});
