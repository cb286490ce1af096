/**
 * A rule change that cuts a GCRA rule, on an id idle for a while: the conversion counts what the
 * old state proves was spent, and no more. A GCRA state is kept one interval past its tat
 * (src/rules/gcra.ts, gcraExpiry(); the scripts' gcra_keep()), so a missing state proves its last
 * tat lies at least one interval back, and a stored tat in the past bounds the old spend as it
 * is (it used to count as now: an idle id, or one that never spent, then waited about a whole
 * interval under the new rule). Both stores answer alike (memory, and the Lua script on its test
 * clock); on Redis's real clock the key's TTL is checked, and a cut after it expired.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

type IORedis = import('ioredis').Redis;

// 10 per hour, burst 10 (T = 360 s) cut to 5 per hour, burst 5 (T = 720 s, tolerance 3600 s).
const O = [normalizeRule({ limit: 10, interval: '1h', burst: 10 }, 'old')];
const N = [normalizeRule({ limit: 5, interval: '1h', burst: 5 }, 'new')];
const HOUR = 3_600_000;
const T0 = 1_700_000_000_000;

const ones = (n: number) => Array.from({ length: n }, () => 1);
const brief = (r: AcquireResult) => ({ granted: r.granted, blocked: r.blocked, retryAfter: r.retryAfter });

describe('a GCRA cut on an idle id: both stores (fake clocks)', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });

  /** Runs `scenario` on the memory store and on Redis (test clock); both answers must be equal. */
  const both = async (scenario: (store: Store, clock: FakeClock) => Promise<unknown>) => {
    const mc = new FakeClock(T0);
    const lc = new FakeClock(T0);
    const mem = await scenario(memoryStore({ clock: mc }), mc);
    const lua = await scenario(
      redisStore({ client: c.client, prefix: uniquePrefix('idle-cut'), unsafeTestClock: lc }),
      lc,
    );
    expect(lua).toEqual(mem);
    return mem;
  };
  const spend = (store: Store, n: number) => store.acquire({ id: 'i', rules: O, costs: ones(n), count: n });
  const convert = async (store: Store, n: number) =>
    brief(await store.acquire({ id: 'i', rules: N, costs: ones(n), count: n, previous: O, convert: true }));

  it('an id that never spent admits the new burst at once', async () => {
    // (Before: 9 units counted, the first job waited an hour.)
    expect(await both((store) => convert(store, 6))).toEqual({
      granted: 5,
      blocked: 'rate',
      retryAfter: 720_000,
    });
  });

  it('an id spent, then idle one interval past its tat, admits the new burst at once', async () => {
    const answer = await both(async (store, clock) => {
      expect((await spend(store, 10)).granted).toBe(10); // tat = t0 + 1 h
      clock.advance(2 * HOUR); // the state is dropped (memory) / older than an interval (Redis)
      return convert(store, 6);
    });
    expect(answer).toEqual({ granted: 5, blocked: 'rate', retryAfter: 720_000 });
  });

  it('an id spent, then idle past its tat, counts what the stored tat proves', async () => {
    const answer = await both(async (store, clock) => {
      expect((await spend(store, 10)).granted).toBe(10); // tat = t0 + 1 h
      clock.advance(1.5 * HOUR);
      // start = now − 1 h + 1 µs = t0 + 30 min + 1 µs: floor((30 min − 1 µs) / 360 s) = 4 units
      // counted, tat' = now + 4 × 720 s; one more of 720 s fits the 3600 s tolerance.
      return convert(store, 2);
    });
    // (Before: the past tat counted as now, 9 units, nothing admitted for an hour.)
    expect(answer).toEqual({ granted: 1, blocked: 'rate', retryAfter: 720_000 });
  });

  it('a cut right after k grants counts them (and what the state cannot rule out): never a fresh budget', async () => {
    const answer = await both(async (store, clock) => {
      expect((await spend(store, 3)).granted).toBe(3); // tat = t0 + 1080 s
      clock.advance(1000);
      // floor((1080 s + 3599 s − 1 µs) / 360 s) = 12 ≥ L + B = 10: tat' = now + 7200 s, the cap.
      return convert(store, 1);
    });
    expect(answer).toEqual({ granted: 0, blocked: 'rate', retryAfter: 4_320_000 });
  });

  it('setRules() on a valve that never spent starts the next job at once', async () => {
    const clock = new FakeClock(T0);
    const valve = createValve({ id: 'f', clock, rules: { limit: 10, interval: '1h', burst: 10 } });
    await valve.setRules({ limit: 5, interval: '1h', burst: 5 });
    const t0 = clock.now();
    let at = -1;
    const job = valve.run(() => {
      at = clock.now() - t0;
    });
    await clock.tickAsync(100);
    expect(at).toBe(0);
    await job;
    await valve.close();
  });
});

describe('a GCRA cut on Redis, real clock', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis());
  });
  afterAll(async () => {
    await c?.close();
  });
  const redis = () => c.client as IORedis;
  // 10 per 200 ms, burst 10 (T = 20 ms) cut to 5 per 200 ms, burst 5.
  const old = [normalizeRule({ limit: 10, interval: 200, burst: 10 }, 'old')];
  const cut = [normalizeRule({ limit: 5, interval: 200, burst: 5 }, 'new')];

  it('a GCRA key lives one interval (and a millisecond) past its tat; a cut after it expired admits the new burst at once', async () => {
    const prefix = uniquePrefix('idle-real');
    const store = redisStore({ client: c.client, prefix });
    const key = `${prefix}:{r}:r:${old[0]!.digest}`;
    const sent = Date.now();
    expect((await store.acquire({ id: 'r', rules: old, costs: ones(10), count: 10 })).granted).toBe(10);
    // tat = now + 200 ms: the key lives 200 + 200 + 1 ms (it used to expire at tat).
    const pttl = await redis().pttl(key);
    const elapsed = Date.now() - sent;
    expect(pttl).toBeLessThanOrEqual(401);
    expect(pttl).toBeGreaterThan(401 - elapsed - 1);
    const deadline = Date.now() + 3000;
    while ((await redis().exists(key)) === 1 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(await redis().exists(key)).toBe(0);
    // Missing: its last tat lies an interval back, so nothing of the old spend is in the new
    // rule's window (before: counted as spent until now, 9 units, nothing admitted).
    const r = await store.acquire({
      id: 'r',
      rules: cut,
      costs: ones(6),
      count: 6,
      previous: old,
      convert: true,
    });
    expect(r.granted).toBe(5);
    expect(r.blocked).toBe('rate');
  });

  it("each GCRA key's TTL takes its own rule's interval (read from the digest ending the key), alone or batched", async () => {
    const prefix = uniquePrefix('idle-keep');
    const store = redisStore({ client: c.client, prefix });
    const fast = normalizeRule({ limit: 10, interval: 200, burst: 10 }, 'a'); // T = 20 ms
    const slow = normalizeRule({ limit: 1, interval: 1000 }, 'b'); // T = 1 s
    const ids = ['p:r:g1.2.3', 'q', 'r'];
    const sent = Date.now();
    // One alone (acquire.lua), then two at once (acquire-many.lua on a standalone server).
    await store.acquire({ id: ids[0]!, rules: [fast, slow], costs: [1], count: 1 });
    await Promise.all(
      ids.slice(1).map((id) => store.acquire({ id, rules: [fast, slow], costs: [1], count: 1 })),
    );
    const pipe = redis().pipeline();
    for (const id of ids)
      pipe.pttl(`${prefix}:{${id}}:r:${fast.digest}`).pttl(`${prefix}:{${id}}:r:${slow.digest}`);
    const ttls = (await pipe.exec())!.map(([, v]) => v as number);
    const elapsed = Date.now() - sent;
    for (let i = 0; i < ids.length; i++) {
      // tat = now + 20 ms: 20 + 200 + 1 ms; tat = now + 1 s: 1000 + 1000 + 1 ms.
      expect(ttls[2 * i]).toBeLessThanOrEqual(221);
      expect(ttls[2 * i]).toBeGreaterThan(221 - elapsed - 1);
      expect(ttls[2 * i + 1]).toBeLessThanOrEqual(2001);
      expect(ttls[2 * i + 1]).toBeGreaterThan(2001 - elapsed - 1);
    }
  });

  it('an id that never spent: the cut admits the new burst at once', async () => {
    const store = redisStore({ client: c.client, prefix: uniquePrefix('idle-never') });
    const r = await store.acquire({
      id: 'n',
      rules: cut,
      costs: ones(6),
      count: 6,
      previous: old,
      convert: true,
    });
    expect(r.granted).toBe(5);
    expect(r.blocked).toBe('rate');
  });
});
