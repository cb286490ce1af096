/**
 * A valve group's key over Redis, evicted after setRules(): what the key's next valve takes over.
 * - setRules() whose converting call reached the server but was never answered (the store's
 *   timeout), then rules set back to the defaults: the server holds the key's rule-set record
 *   of the set-back rules; the key's next valve must take it for the key's own (its conversion
 *   finds it), not report a 'rule-mismatch'.
 * - a rule added to the defaults on an idle key: the key's next valve converts it (it counts
 *   what was spent before the change), not treated as a change that does nothing.
 */
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { startProxy } from '../helpers/tcp-proxy.js';
import { track } from '../helpers/track.js';

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

describe('valve group over Redis: a change set back after its call went unanswered, key evicted', () => {
  it("the key's next valve reports no 'rule-mismatch' for the set-back record the server holds", async () => {
    const server = sharedRedis();
    const proxy = await startProxy({ target: { host: server.host, port: server.port } });
    cleanups.push(() => proxy.close());
    const client = new Redis({ host: proxy.host, port: proxy.port, maxRetriesPerRequest: null });
    client.on('error', () => {});
    cleanups.push(() => client.disconnect());
    const admin = new Redis(server.url);
    cleanups.push(() => admin.disconnect());
    const prefix = uniquePrefix('setback');
    const store = redisStore({ client, prefix, timeout: 200 });
    // Interval 1 min: the server keeps a record at least that long (no expiry during the test).
    const defaults = { limit: 100, interval: '1m' } as const;
    const g = createValveGroup({ rules: defaults, store, idleTimeout: 300, onStoreError: 'throw' });
    cleanups.push(() => g.close({ drain: false }));
    const mismatches: unknown[] = [];
    g.on('rule-mismatch', (e) => mismatches.push(e));

    await g.run('k', () => 0);
    await g.valve('k').setRules({ limit: 50, interval: '1m' });
    // The converting call is held on the way (applied once released), its answer never awaited.
    proxy.blackhole(true);
    await expect(g.run('k', () => 0)).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    await g.valve('k').setRules(defaults);
    for (let i = 0; i < 400 && g.size > 0; i++) await sleep(25);
    expect(g.size).toBe(0);
    proxy.blackhole(false);
    // The held call ran: the server holds the record of the rules set back.
    for (let i = 0; i < 400 && (await admin.get(`${prefix}:{k}:rules`))?.includes(':g50.') !== true; i++) {
      await sleep(25);
    }
    expect(await admin.get(`${prefix}:{k}:rules`)).toMatch(/^\d+:g50\.60000000\.1$/);

    await g.run('k', () => 0);
    expect(mismatches).toEqual([]);
    // Another process's rules on the key are still reported (a raise: no wait past the old rule).
    await admin.set(`${prefix}:{k}:rules`, `${(Date.now() + 60_000) * 1000}:g7.60000000.1`, 'PX', 60_000);
    await g.valve('k').setRules({ limit: 200, interval: '1m' });
    await g.run('k', () => 0);
    expect(mismatches).toHaveLength(1);
  }, 60_000);

  it('a rule added to the defaults on an idle key: the next valve counts the spend before the change', async () => {
    const client = new Redis(sharedRedis().url);
    client.on('error', () => {});
    cleanups.push(() => client.disconnect());
    const store = redisStore({ client, prefix: uniquePrefix('added') });
    const hourly = { limit: 100, interval: '1h', algorithm: 'fixed-window' } as const;
    const g = createValveGroup({ rules: hourly, store, idleTimeout: 200 });
    cleanups.push(() => g.close({ drain: false }));
    await Promise.all(Array.from({ length: 10 }, () => g.run('k', () => 0)));
    // 10 per hour added: 10 were spent this hour, so nothing more until it ends.
    await g.valve('k').setRules([hourly, { limit: 10, interval: '1h', algorithm: 'fixed-window' }]);
    for (let i = 0; i < 400 && g.size > 0; i++) await sleep(25);
    expect(g.size).toBe(0);
    const next = track(g.run('k', () => 1));
    await sleep(500);
    expect(next.done).toBe(false);
  }, 60_000);
});
