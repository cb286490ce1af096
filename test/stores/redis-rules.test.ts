/**
 * Rule sets and rule changes on real Redis: the record key (its value, its TTL, state valve
 * never writes refused naming the key), a valve's setRules() carrying spent budget over.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createValve, createValveGroup } from '../../src/index.js';
import { normalizeRule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

type IORedis = import('ioredis').Redis;

const hourly = normalizeRule({ limit: 3, interval: '1h', algorithm: 'fixed-window' }, 'rules');
const fiveHourly = normalizeRule({ limit: 5, interval: '1h', algorithm: 'fixed-window' }, 'rules');

describe('the rule-set record on Redis', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });
  const redis = () => c.client as IORedis;

  it('is <prefix>:{<id>}:rules, "<until µs>:<digests>", expiring with the longest interval', async () => {
    const prefix = uniquePrefix('record');
    const store = redisStore({ client: c.client, prefix });
    const rules = [hourly, normalizeRule({ limit: 10, interval: '1s' }, 'rules')];
    const record = rules
      .map((r) => r.digest)
      .sort()
      .join(',');
    await store.acquire({ id: 'a', rules, costs: [1], count: 1, record });
    const value = await redis().get(`${prefix}:{a}:rules`);
    expect(value).toMatch(new RegExp(`^\\d+:${record.replace(/\./g, '\\.')}$`));
    const ttl = await redis().pttl(`${prefix}:{a}:rules`);
    expect(ttl).toBeGreaterThan(3_600_000 - 5_000);
    expect(ttl).toBeLessThanOrEqual(3_600_000);
  });

  it('a request may keep the record longer (recordTtl); a valve group keeps it idleTimeout, at most a minute', async () => {
    const prefix = uniquePrefix('record');
    const store = redisStore({ client: c.client, prefix });
    const second = normalizeRule({ limit: 10, interval: '1s' }, 'rules');
    const pttl = (id: string) => redis().pttl(`${prefix}:{${id}}:rules`);
    await store.acquire({
      id: 'l',
      rules: [second],
      costs: [1],
      count: 1,
      record: second.digest,
      recordTtl: 60_000,
    });
    expect(await pttl('l')).toBeGreaterThan(55_000);
    expect(await pttl('l')).toBeLessThanOrEqual(60_000);
    // The longest interval when it is longer.
    await store.acquire({
      id: 'h',
      rules: [hourly],
      costs: [1],
      count: 1,
      record: hourly.digest,
      recordTtl: 60_000,
    });
    expect(await pttl('h')).toBeGreaterThan(3_600_000 - 5_000);
    // A group: idleTimeout (default 5 minutes) up to a minute; a shorter idleTimeout, the interval.
    const long = createValveGroup({ rules: { limit: 10, interval: '1s' }, store });
    const short = createValveGroup({ rules: { limit: 10, interval: '1s' }, store, idleTimeout: 300 });
    const middle = createValveGroup({ rules: { limit: 10, interval: '1s' }, store, idleTimeout: '20s' });
    await Promise.all([long.run('g1', () => {}), short.run('g2', () => {}), middle.run('g3', () => {})]);
    expect(await pttl('g1')).toBeGreaterThan(55_000);
    expect(await pttl('g1')).toBeLessThanOrEqual(60_000);
    expect(await pttl('g2')).toBeGreaterThan(0);
    expect(await pttl('g2')).toBeLessThanOrEqual(1_000);
    expect(await pttl('g3')).toBeGreaterThan(15_000);
    expect(await pttl('g3')).toBeLessThanOrEqual(20_000);
    await Promise.all([long.close(), short.close(), middle.close()]);
  });

  it('a record valve never writes is refused with an error naming the key, before anything is spent', async () => {
    const prefix = uniquePrefix('record');
    const store = redisStore({ client: c.client, prefix });
    const key = `${prefix}:{b}:rules`;
    for (const bad of ['nonsense', '12:x1.2', '99999999999999999999:g1.1.1']) {
      await redis().set(key, bad);
      await expect(
        store.acquire({ id: 'b', rules: [hourly], costs: [1], count: 1, record: hourly.digest }),
      ).rejects.toThrow(`VALVE_CORRUPT_STATE ${key} holds`);
    }
    await redis().del(key);
    await redis().lpush(key, 'x');
    await expect(
      store.acquire({ id: 'b', rules: [hourly], costs: [1], count: 1, record: hourly.digest }),
    ).rejects.toThrow(`VALVE_CORRUPT_STATE ${key} holds`);
    await redis().del(key);
    expect((await store.acquire({ id: 'b', rules: [hourly], costs: [3], count: 1 })).granted).toBe(1);
  });

  it("setRules() on a valve over Redis carries spent budget over, and a second process's valve reports the mismatch", async () => {
    const prefix = uniquePrefix('setrules');
    const store = redisStore({ client: c.client, prefix });
    const valve = createValve({
      id: 'c',
      rules: { limit: 3, interval: '1h', algorithm: 'fixed-window' },
      store,
    });
    await Promise.all([valve.run(() => {}), valve.run(() => {})]);
    await valve.setRules({ limit: 5, interval: '1h', algorithm: 'fixed-window' });
    // The old rule (1 left) still holds during the change: one more start, then none.
    const started: number[] = [];
    for (let i = 0; i < 4; i++) void valve.run(() => started.push(i)).catch(() => {});
    await new Promise((r) => setTimeout(r, 300));
    expect(started).toEqual([0]);
    // The new rule counts the 3 spent: 2 left under it in this window.
    const direct = await store.acquire({ id: 'c', rules: [fiveHourly], costs: [1, 1, 1], count: 3 });
    expect(direct.granted).toBe(2);
    const other = createValve({
      id: 'c',
      rules: { limit: 3, interval: '1h', algorithm: 'fixed-window' },
      store,
    });
    const seen: unknown[] = [];
    other.on('rule-mismatch', (e) => seen.push(e));
    await other.run(() => {}, { maxWait: 50 }).catch(() => {});
    expect(seen).toEqual([
      {
        id: 'c',
        rules: [{ limit: 3, interval: 3_600_000, algorithm: 'fixed-window' }],
        recorded: [{ limit: 5, interval: 3_600_000, algorithm: 'fixed-window' }],
      },
    ]);
    await valve.close();
    await other.close();
  });
});
