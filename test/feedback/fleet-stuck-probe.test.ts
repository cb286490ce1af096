/**
 * A fleet window probe recorded as ending far ahead (a Redis server whose clock stepped back an
 * hour, a foreign write, a windowSend() caller asking a long probeTtl) holds no caller past its
 * own probe time plus 5 s (window-record.ts's STUCK_PROBE_SLACK_US), on redisStore (window.lua)
 * and memoryStore (window-record.ts) alike;
 * and a request waiting for a probe's answer polls the store every 5 ms only for PROBE_TTL_MS,
 * then backs off (docs/provider-feedback.md, "Several processes: the fleet window").
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROBE_TTL_MS } from '../../src/feedback/fleet.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store, WindowTicket } from '../../src/stores/store.js';
import { newWindowRecord, windowReport, windowSend } from '../../src/stores/window-record.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const NOW = 1_700_000_000_000;
const HOUR_MS = 3_600_000;
/** How far past the asking caller's own probe time a recorded probe may end (STUCK_PROBE_SLACK_US). */
const SLACK_MS = 5000;
const SLACK_US = SLACK_MS * 1000;

/** `inner`, counting its windowSend() calls; `override` may answer a ticket in its place. */
function counting(
  inner: Store,
  override?: () => WindowTicket | undefined,
): { store: Store; sends: () => number } {
  let sends = 0;
  const store: Store = {
    acquire: (r) => inner.acquire(r),
    pause: (...args) => inner.pause(...args),
    resume: (id) => inner.resume(id),
    renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
    release: (id, tokens) => inner.release(id, tokens),
    windowSend: (id, probeTtl) => {
      sends++;
      return override?.() ?? inner.windowSend!(id, probeTtl);
    },
    windowReport: (id, seq, remaining, resetMs) => inner.windowReport!(id, seq, remaining, resetMs),
  };
  return { store, sends: () => sends };
}

const ok = () =>
  new Response('ok', { status: 200, headers: { 'x-ratelimit-remaining': '50', 'x-ratelimit-reset': '30' } });

describe('the window record: a probe ending far ahead has ended', () => {
  it('a ticket after a probe written an hour ahead goes at once; one within the bound still waits', () => {
    const now = NOW * 1000;
    const rec = newWindowRecord();
    expect(windowSend(rec, now, 2_000_000)).toMatchObject({ seq: 1, probe: true });
    expect(windowReport(rec, now, 1, 50, 30_000_000)).toBe(0);
    rec.probe = now + HOUR_MS * 1000;
    rec.pseq = 999;
    expect(windowSend(rec, now, 2_000_000)).toEqual({ seq: 2, waitUs: 0, probe: false });
    expect(rec.probe).toBe(0);
    // Within the caller's own probe time plus the slack: a probe in flight, which holds it.
    rec.probe = now + 2_000_000 + SLACK_US;
    expect(windowSend(rec, now, 2_000_000)).toEqual({ seq: 0, waitUs: 2_000_000 + SLACK_US, probe: true });
  });
});

describe('memoryStore: a probe asked an hour long', () => {
  it('holds callers that ask as long; one asking 2 s goes at once', () => {
    const clock = new FakeClock(NOW);
    const store = memoryStore({ clock });
    expect(store.windowSend!('w', HOUR_MS)).toMatchObject({ seq: 1, probe: true });
    expect(store.windowSend!('w', HOUR_MS)).toMatchObject({ seq: 0, probe: true });
    expect(store.windowSend!('w', 2000)).toMatchObject({ seq: 2 });
  });

  it('the next wrapFetch request is sent at once, with a bounded number of store calls', async () => {
    const clock = new FakeClock(NOW);
    const inner = memoryStore({ clock });
    const { store, sends } = counting(inner);
    const valve = createValve({ id: 'w', clock, store, rules: { limit: 100, interval: '1s' } });
    const sent: number[] = [];
    const f = valve.wrapFetch(async (_url: string) => {
      sent.push(clock.now() - NOW);
      return ok();
    });
    // Another caller of the store's API takes the id's first ticket, a probe, for an hour.
    expect(inner.windowSend!('w', HOUR_MS)).toMatchObject({ seq: 1, probe: true });
    const answer = f('https://api.example/1');
    await clock.tickAsync(SLACK_MS + 1000);
    expect(sent).toHaveLength(1); // fails before the fix: still waiting for the hour-long probe
    expect(sent[0]).toBeLessThanOrEqual(SLACK_MS + 10);
    expect((await answer).status).toBe(200);
    // 5 ms polls for 2 s, then 5, 10 … 640 ms apart and once a second: ~410 calls, not ~1000.
    expect(sends()).toBeLessThan(450);
    await valve.close();
  });
});

describe('wrapFetch and a store whose probe holds an hour (a store without the bound)', () => {
  it('polls every 5 ms for PROBE_TTL_MS only, then backs off to once a second', async () => {
    const clock = new FakeClock(NOW);
    let holding = true;
    const { store, sends } = counting(memoryStore({ clock }), () =>
      holding ? { seq: 0, wait: HOUR_MS, probe: true } : undefined,
    );
    const valve = createValve({ id: 'w', clock, store, rules: { limit: 100, interval: '1s' } });
    const f = valve.wrapFetch(async (_url: string) => ok());
    const answer = f('https://api.example/1');
    await clock.tickAsync(60_000);
    // 5 ms apart for the whole minute would be 12,000 calls; 400 + 8 + ~57 with the back-off.
    expect(sends()).toBeGreaterThan(PROBE_TTL_MS / 5 - 20);
    expect(sends()).toBeLessThan(500);
    holding = false;
    await clock.tickAsync(1100);
    expect((await answer).status).toBe(200);
    await valve.close();
  });
});

describe('redisStore: a probe ending far ahead', () => {
  let c: Connected;
  const r = () =>
    c.client as unknown as {
      get(k: string): Promise<string | null>;
      set(k: string, v: string, px: 'PX', ms: number): Promise<unknown>;
      time(): Promise<[string, string]>;
    };
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis('redis'));
  });
  afterAll(async () => {
    await c?.close();
  });

  it('window.lua: a probe asked an hour long holds callers that ask as long, not one asking 2 s; one written an hour ahead has ended', async () => {
    const clock = new FakeClock(NOW);
    const prefix = uniquePrefix('stuck-probe');
    const store = redisStore({ client: c.client, prefix, unsafeTestClock: clock });
    expect(await store.windowSend!('w', HOUR_MS)).toMatchObject({ seq: 1, probe: true });
    expect(await store.windowSend!('w', HOUR_MS)).toMatchObject({ seq: 0, probe: true });
    expect(await store.windowSend!('w', 2000)).toMatchObject({ seq: 2 });
    expect(await store.windowReport!('w', 2, 50, 30_000)).toBe(0);
    const key = `${prefix}:{w}:window`;
    const parts = (await r().get(key))!.split(',');
    parts[6] = String((clock.now() + HOUR_MS) * 1000);
    parts[7] = '999';
    await r().set(key, parts.join(','), 'PX', 600_000);
    expect(await store.windowSend!('w', 2000)).toEqual({ seq: 3, wait: 0, probe: false });
  });

  it('wrapFetch: after a probe moved an hour ahead, the next request is sent at once, in a few store calls', async () => {
    const prefix = uniquePrefix('stuck-probe');
    const { store, sends } = counting(redisStore({ client: c.client, prefix }));
    const valve = createValve({ id: 'w', store, rules: { limit: 100, interval: '1s' } });
    let sent = 0;
    const f = valve.wrapFetch(async (_url: string, _init?: RequestInit) => {
      sent++;
      return ok();
    });
    await f('http://x/1');
    const key = `${prefix}:{w}:window`;
    const [sec, usec] = await r().time();
    const parts = (await r().get(key))!.split(',');
    parts[6] = String(Number(sec) * 1e6 + Number(usec) + HOUR_MS * 1000); // a probe "in flight" for an hour
    parts[7] = '999';
    await r().set(key, parts.join(','), 'PX', 600_000);
    const before = sends();
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error('still waiting after 8 s')), 8000);
    const outcome = await f('http://x/2', { signal: ac.signal }).then(
      (x) => `sent ${x.status}`,
      (e: Error) => e.message,
    );
    clearTimeout(timer);
    await valve.close();
    expect(outcome).toBe('sent 200'); // before the fix: 'still waiting after 8 s'
    expect(sent).toBe(2);
    expect(sends() - before).toBe(1);
  }, 20_000);
});
