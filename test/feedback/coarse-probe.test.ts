/**
 * wrapFetch after a 429 whose only wait is a whole-second `Retry-After` (an upper bound of the
 * provider's reset, not a fact): the fleet probes the provider, one request at a time for every
 * valve sharing the id and store, instead of waiting the bound out. Through the real engine
 * (createValve) and the memory store on a virtual clock: the delays are asserted from the clock.
 */
import { describe, expect, it } from 'vitest';
import type { PauseEvent } from '../../src/events.js';
import { probeDelay } from '../../src/feedback/fleet.js';
import type { FeedbackReading } from '../../src/feedback/types.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';

const NOW = 1_700_000_000_000;

/**
 * A provider blocked until `freeAt` ms after NOW: before, a 429 with `Retry-After` rounded up to
 * whole seconds and nothing else (as a GCRA or sliding-log server); after, 200. Records each
 * call's time and how many were in flight when it was sent.
 */
function blockedUntil(clock: FakeClock, freeAt: number, extra: Record<string, string> = {}) {
  const calls: { at: number; status: number }[] = [];
  const fn = async (_input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    if (init?.signal?.aborted) throw init.signal.reason;
    const at = clock.now() - NOW;
    const status = at < freeAt ? 429 : 200;
    calls.push({ at, status });
    const headers: Record<string, string> =
      status === 429 ? { 'retry-after': String(Math.ceil((freeAt - at) / 1000)), ...extra } : {};
    return new Response('{}', { status, headers });
  };
  return { fn, calls };
}

function setup() {
  const clock = new FakeClock(NOW);
  const store = memoryStore({ clock });
  const make = () =>
    createValve({ id: 'gcra-provider', rules: [{ limit: 1000, interval: '1s', burst: 1000 }], store, clock });
  return { clock, make };
}

describe('wrapFetch: a coarse Retry-After is probed, not waited out', () => {
  it('probes 62.5, 125, 250 ms apart (doubling), one request at a time, then lets every caller go', async () => {
    const { clock, make } = setup();
    const valve = make();
    const pauses: PauseEvent[] = [];
    valve.on('pause', (e) => pauses.push(e));
    // The provider frees 200 ms after the first 429; each 429 says `Retry-After: 1`.
    const { fn, calls } = blockedUntil(clock, 200);
    const f = valve.wrapFetch(fn, { retries: 10 });
    const all = Array.from({ length: 5 }, (_, i) => f(`https://api.example/${i}`));
    await clock.runAllAsync();
    expect((await Promise.all(all)).map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    const times = calls.map((c) => c.at);
    // The id's first request goes alone (the fleet knows nothing of the provider yet); its 429
    // is probed 62.5 ms later, that probe's 429 125 ms later, and the next one 250 ms later.
    expect(times.slice(0, 4)).toEqual([0, 62.5, 187.5, 437.5]);
    expect(calls.slice(0, 4).map((c) => c.status)).toEqual([429, 429, 429, 200]);
    // The four others wait for the probe's answer (this valve's own probe wakes them at once),
    // not for the whole second.
    expect(times.slice(4)).toEqual([437.5, 437.5, 437.5, 437.5]);
    expect(calls).toHaveLength(8);
    // Every pause names the header and the model that produced it, and ends at a probe.
    expect(pauses.every((p) => p.source === 'retry-after' && p.header === 'retry-after')).toBe(true);
    expect(pauses.every((p) => p.model === 'wait')).toBe(true);
    expect([...new Set(pauses.map((p) => p.until - NOW))]).toEqual([62.5, 187.5, 437.5]);
    await valve.close();
  });

  it('one probe at a time for every valve sharing the id and store (two processes)', async () => {
    const { clock, make } = setup();
    const a = make();
    const b = make();
    const { fn, calls } = blockedUntil(clock, 300);
    const fa = a.wrapFetch(fn, { retries: 10 });
    const fb = b.wrapFetch(fn, { retries: 10 });
    const all = [0, 1, 2, 3, 4, 5].map((i) => (i % 2 === 0 ? fa : fb)(`https://api.example/${i}`));
    await clock.runAllAsync();
    expect((await Promise.all(all)).every((r) => r.status === 200)).toBe(true);
    const first = calls.findIndex((c) => c.status === 200);
    // Until the first success, the two valves sent one request at a time: the id's first, then
    // the probes 62.5, 125 and 250 ms after each 429.
    expect(calls.slice(0, first + 1).map((c) => c.at)).toEqual([0, 62.5, 187.5, 437.5]);
    expect(calls.filter((c) => c.status === 429)).toHaveLength(3);
    // The other valve's requests ask again every 5 ms while the probe is out: they follow it
    // within 5 ms.
    expect(calls.slice(first + 1).every((c) => c.at >= 437.5 && c.at <= 442.5 && c.status === 200)).toBe(
      true,
    );
    expect(calls).toHaveLength(9);
    await a.close();
    await b.close();
  });

  it('a success resets the doubling: the next coarse 429 is probed 62.5 ms later again', async () => {
    const { clock, make } = setup();
    const valve = make();
    let freeAt = 100;
    const calls: number[] = [];
    const fn = async (_input: string | URL | Request, _init?: RequestInit): Promise<Response> => {
      const at = clock.now() - NOW;
      calls.push(at);
      if (at < freeAt) return new Response('{}', { status: 429, headers: { 'retry-after': '1' } });
      return new Response('{}', { status: 200 });
    };
    const f = valve.wrapFetch(fn, { retries: 10 });
    const first = f('https://api.example/a');
    await clock.runAllAsync();
    expect((await first).status).toBe(200);
    expect(calls).toEqual([0, 62.5, 187.5]);
    freeAt = 1000;
    await clock.tickAsync(500 - 187.5);
    const second = f('https://api.example/b');
    await clock.runAllAsync();
    expect((await second).status).toBe(200);
    expect(calls.slice(3)).toEqual([500, 562.5, 687.5, 937.5, 1437.5]);
    await valve.close();
  });

  it('no probe goes past the bound the first 429 stated (a 2 s ban: probes, then the bound)', async () => {
    const { clock, make } = setup();
    const valve = make();
    // Blocked for 2 s, as a secondary limit: `Retry-After: 2`, then 1 for the probes.
    const { fn, calls } = blockedUntil(clock, 2000);
    const p = valve.wrapFetch(fn, { retries: 10 })('https://api.example/x');
    await clock.runAllAsync();
    expect((await p).status).toBe(200);
    // The reset lies in (1 s, 2 s]: probes at 1062.5, then 125, 250, 500 ms after each 429, and
    // the next one (1000 ms after the last 429) is cut to the first 429's bound, 2000.
    expect(calls.map((c) => c.at)).toEqual([0, 1062.5, 1187.5, 1437.5, 1937.5, 2000]);
    expect(calls.map((c) => c.status)).toEqual([429, 429, 429, 429, 429, 200]);
    await valve.close();
  });

  it('a longer Retry-After (3 s: the rounding is at most a third of it) is waited out', async () => {
    const { clock, make } = setup();
    const valve = make();
    const { fn, calls } = blockedUntil(clock, 2500);
    const p = valve.wrapFetch(fn, { retries: 10 })('https://api.example/x');
    await clock.runAllAsync();
    expect((await p).status).toBe(200);
    expect(calls.map((c) => [c.at, c.status])).toEqual([
      [0, 429],
      [3000, 200],
    ]);
    await valve.close();
  });

  it('a Retry-After sent beside rate-limit headers is the wait the provider means: waited out, not probed', async () => {
    const { clock, make } = setup();
    const valve = make();
    // Anthropic's 429s carry its bucket headers and a whole-second retry-after ("earlier retries
    // will fail").
    const { fn, calls } = blockedUntil(clock, 200, {
      'anthropic-ratelimit-requests-limit': '50',
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': new Date(clock.now() + 1000).toISOString(),
    });
    const p = valve.wrapFetch(fn, { retries: 10 })('https://api.example/x');
    await clock.runAllAsync();
    expect((await p).status).toBe(200);
    expect(calls.map((c) => [c.at, c.status])).toEqual([
      [0, 429],
      [1000, 200],
    ]);
    await valve.close();
  });

  it('observe() alone (no ticket, no probe) still pauses until the bound', async () => {
    const { clock, make } = setup();
    const valve = make();
    const reading = valve.observe({ status: 429, headers: { 'retry-after': '1' } });
    expect(reading).toMatchObject({ waitMs: 1000, coarse: true, model: 'wait' });
    let started = -1;
    const job = valve.run(() => {
      started = clock.now() - NOW;
    });
    await clock.runAllAsync();
    await job;
    expect(started).toBe(1000);
    await valve.close();
  });
});

describe('probeDelay', () => {
  const reading = (earliest: number, until: number): FeedbackReading => ({
    waitMs: until,
    until,
    source: 'retry-after',
    header: 'retry-after',
    raw: String(until / 1000),
    status: 429,
    model: 'wait',
    earliest,
    coarse: true,
  });

  it('the lower bound plus 1/16 of the rounding, doubled per probe answered 429, never past the bound', () => {
    const r = reading(0, 1000);
    expect([0, 1, 2, 3, 4, 5, 40].map((n) => probeDelay(r, n, 0))).toEqual([
      62.5, 125, 250, 500, 1000, 1000, 1000,
    ]);
    // Retry-After: 3 at t = 0: the reset lies in (2 s, 3 s].
    expect(probeDelay(reading(2000, 3000), 0, 0)).toBe(2062.5);
    // Read later than it was sent: measured from now.
    expect(probeDelay(reading(2000, 3000), 0, 500)).toBe(1562.5);
    // Never past the bound an earlier 429 of the same wait stated.
    expect(probeDelay(r, 4, 0, 300)).toBe(300);
    expect(probeDelay(r, 0, 0, 30)).toBe(30);
  });
});
