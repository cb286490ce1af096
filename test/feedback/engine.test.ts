/**
 * observe() and wrapFetch() through the real engine (createValve) and the memory store,
 * on a virtual clock: the delays are asserted from the clock, nothing sleeps.
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';

const NOW = 1_700_000_000_000;

type Reply = { status: number; headers?: Record<string, string> };

function scripted(clock: FakeClock, replyFor: (url: string, n: number) => Reply) {
  const calls: { url: string; at: number }[] = [];
  const fn = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    if (init?.signal?.aborted) throw init.signal.reason;
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    calls.push({ url, at: clock.now() - NOW });
    const reply = replyFor(url, calls.length);
    return new Response(`body ${calls.length}`, { status: reply.status, headers: reply.headers });
  };
  return { fn, calls };
}

function setup(extra: Partial<Parameters<typeof createValve>[0]> = {}) {
  const clock = new FakeClock(NOW);
  const store = memoryStore({ clock });
  const make = (o: Partial<Parameters<typeof createValve>[0]> = {}) =>
    createValve({
      id: 'provider',
      rules: [{ limit: 100, interval: '1s', burst: 100 }],
      store,
      clock,
      ...extra,
      ...o,
    });
  return { clock, store, make };
}

describe('observe() through createValve', () => {
  it("returns the reading, emits 'pause' with until and source, and holds jobs until the pause ends", async () => {
    const { clock, make } = setup();
    const valve = make();
    const pauses: unknown[] = [];
    valve.on('pause', (e) => pauses.push(e));
    const reading = valve.observe(new Response(null, { status: 429, headers: { 'Retry-After': '5' } }));
    expect(reading).toMatchObject({ waitMs: 5000, source: 'retry-after' });
    await flushMicrotasks();
    expect(pauses).toEqual([
      {
        until: NOW + 5000,
        source: 'retry-after',
        header: reading!.header,
        model: reading!.model,
        detail: reading,
      },
    ]);
    expect(valve.stats().pausedUntil).toBe(NOW + 5000);
    let startedAt = 0;
    const job = valve.run(() => {
      startedAt = clock.now();
    });
    await clock.runAllAsync();
    await job;
    expect(startedAt).toBe(NOW + 5000);
    await valve.close();
  });

  it('pauses every valve sharing the id and store (shared pause)', async () => {
    const { clock, make } = setup();
    const a = make();
    const b = make();
    a.observe({
      status: 429,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(NOW / 1000 + 3) },
    });
    let startedAt = 0;
    const job = b.run(() => {
      startedAt = clock.now();
    });
    await clock.runAllAsync();
    await job;
    expect(startedAt).toBeGreaterThanOrEqual(NOW + 3000);
    await Promise.all([a.close(), b.close()]);
  });

  it("emits 'feedback-ignored' for nonsense and keeps backoff per valve", async () => {
    const { clock, make } = setup();
    const a = make();
    const b = make();
    const ignored: unknown[] = [];
    a.on('feedback-ignored', (e) => ignored.push(e));
    expect(a.observe({ status: 429, headers: { 'retry-after': 'later' } })).toMatchObject({
      source: 'backoff',
      waitMs: 1000,
    });
    expect(ignored).toMatchObject([{ header: 'retry-after', value: 'later', reason: 'unparseable' }]);
    clock.jump(1000);
    expect(a.observe({ status: 429 })?.waitMs).toBe(2000);
    expect(b.observe({ status: 429 })?.waitMs).toBe(1000);
    await Promise.all([a.close(), b.close()]);
  });

  it('caps waits to the feedback.maxPause option', async () => {
    const { make } = setup();
    const valve = make({ feedback: { maxPause: '10s' } });
    expect(valve.observe({ status: 429, headers: { 'retry-after': '86400' } })).toMatchObject({
      waitMs: 10_000,
      capped: true,
    });
    await valve.close();
  });
});

describe('wrapFetch() through createValve', () => {
  it('retries at the original position: ahead of later arrivals, after the pause (a coarse Retry-After is probed)', async () => {
    const { clock, make } = setup();
    const valve = make({ concurrency: 1 });
    let limited = true;
    const { fn, calls } = scripted(clock, (url) => {
      if (url.endsWith('/0') && limited) {
        limited = false;
        return { status: 429, headers: { 'retry-after': '2' } };
      }
      return { status: 200 };
    });
    const retries: unknown[] = [];
    valve.on('retry', (e) => retries.push(e));
    const f = valve.wrapFetch(fn);
    const results = [0, 1, 2, 3].map((i) => f(`https://api.example/${i}`));
    await clock.runAllAsync();
    const responses = await Promise.all(results);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(calls.map((c) => c.url.slice(-2))).toEqual(['/0', '/0', '/1', '/2', '/3']);
    expect(calls[0]?.at).toBe(0);
    // `Retry-After: 2` is rounded up: the reset lies in (1 s, 2 s]. The retry probes 1/16 of the
    // rounding past the lower bound instead of waiting the bound out.
    expect(calls[1]?.at).toBe(1062.5);
    for (const c of calls.slice(2)) expect(c.at).toBeGreaterThanOrEqual(1062.5);
    expect(retries).toEqual([
      { attempt: 1, status: 429, waitMs: 1062.5, url: 'https://api.example/0', source: 'retry-after' },
    ]);
    await valve.close();
  });

  it('after the first 429, no other request is sent until the pause ends (several callers)', async () => {
    const { clock, make } = setup();
    const valve = make({ rules: [{ limit: 10, interval: '1s' }] });
    let blockedUntil = 0;
    const { fn, calls } = scripted(clock, (_url, n) => {
      if (n === 3) {
        blockedUntil = clock.now() + 1500;
        return { status: 429, headers: { 'retry-after-ms': '1500' } };
      }
      return { status: 200 };
    });
    const f = valve.wrapFetch(fn);
    const all = Array.from({ length: 8 }, (_, i) => f(`https://api.example/${i}`));
    await clock.runAllAsync();
    expect((await Promise.all(all)).every((r) => r.status === 200)).toBe(true);
    const first429 = calls[2]!.at + NOW;
    const during = calls.filter((c) => c.at + NOW > first429 && c.at + NOW < blockedUntil);
    expect(during).toEqual([]);
    // The retried request is the first one after the pause.
    expect(calls[3]?.url).toBe(calls[2]?.url);
    expect(calls[3]?.at).toBe(calls[2]!.at + 1500);
    await valve.close();
  });

  it('header-less 429s back off 1s, 2s, 4s between attempts, then return the last response', async () => {
    const { clock, make } = setup();
    const valve = make();
    const { fn, calls } = scripted(clock, () => ({ status: 429 }));
    const p = valve.wrapFetch(fn)('https://api.stripe.example/v1/charges');
    await clock.runAllAsync();
    const res = await p;
    expect(res.status).toBe(429);
    expect(await res.text()).toBe('body 4');
    expect(calls.map((c) => c.at)).toEqual([0, 1000, 3000, 7000]);
    await valve.close();
  });
});

describe('wrapFetch() signals through createValve', () => {
  it('a caller signal aborting during the pause rejects with its reason; nothing more is sent', async () => {
    const { clock, make } = setup();
    const valve = make();
    const { fn, calls } = scripted(clock, (_url, n) =>
      n === 1 ? { status: 429, headers: { 'retry-after': '10' } } : { status: 200 },
    );
    const controller = new AbortController();
    const p = valve.wrapFetch(fn)('https://api.example/a', { signal: controller.signal });
    const settled = p.then(
      () => 'resolved',
      (e: unknown) => e,
    );
    await clock.tickAsync(3000);
    const reason = new Error('user cancelled');
    controller.abort(reason);
    expect(await settled).toBe(reason);
    await clock.runAllAsync();
    expect(calls).toHaveLength(1);
    await valve.close();
  });

  it('close() drops a queued retry: the call returns the 429 it had, never a CLOSED', async () => {
    const { clock, make } = setup();
    const valve = make();
    const { fn, calls } = scripted(clock, () => ({ status: 429, headers: { 'retry-after': '10' } }));
    const p = valve.wrapFetch(fn)('https://api.example/a');
    const settled = p.then(
      (r) => r,
      (e: unknown) => e,
    );
    await clock.tickAsync(100);
    await valve.close();
    const r = await settled;
    expect(r).toBeInstanceOf(Response);
    expect((r as Response).status).toBe(429);
    expect(await (r as Response).text()).toBe('body 1');
    expect(calls).toHaveLength(1);
  });
});
