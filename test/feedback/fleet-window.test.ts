/**
 * wrapFetch's fleet window on the memory store, on a fake clock: the cases where the record and
 * a response's own reading meet (docs/provider-feedback.md, "Several processes: the fleet window"
 * and "Probing a coarse Retry-After"), and observe() beside them.
 */
import { describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import type { FetchRetryEvent, PauseEvent } from '../../src/events.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { track } from '../unit/harness.js';

const NOW = 1_700_000_000_000;

function setUp(id: string, maxPause?: string) {
  const clock = new FakeClock(NOW);
  const valve = createValve({
    id,
    clock,
    store: memoryStore({ clock }),
    ...(maxPause === undefined ? {} : { feedback: { maxPause } }),
  });
  const pauses: PauseEvent[] = [];
  valve.on('pause', (e) => pauses.push(e));
  return { clock, valve, pauses };
}

describe('the fleet window never holds a request longer than a pause may last', () => {
  for (const [name, reset, maxPause, bound] of [
    ['a 1 h reset with maxPause 10 s', '3600', '10s', 10_000],
    ['a reset of 99,999,999 s with the default maxPause (1 h)', '99999999', undefined, 3_600_000],
  ] as const) {
    it(`${name}: the next request goes when the pause ends`, async () => {
      const { clock, valve } = setUp('max', maxPause);
      const sent: number[] = [];
      const f = valve.wrapFetch(async (_url: string) => {
        sent.push(clock.now() - NOW);
        const headers =
          sent.length === 1
            ? { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': reset }
            : { 'x-ratelimit-remaining': '99', 'x-ratelimit-reset': '60' };
        return new Response('{}', { status: 200, headers });
      });
      await Promise.all([f('https://api.example/1'), clock.tickAsync(10)]);
      const second = f('https://api.example/2');
      await clock.tickAsync(bound + 2000);
      expect(sent).toHaveLength(2);
      // The second request went within a second of the pause's end, not at the provider's reset.
      expect(sent[1]).toBeGreaterThanOrEqual(bound);
      expect(sent[1]).toBeLessThanOrEqual(bound + 1010);
      expect((await second).status).toBe(200);
      await valve.close();
    });
  }
});

describe('probing a coarse Retry-After', () => {
  it('a provider still refusing after the first bound starts a new coarse wait, never a retry at once', async () => {
    const clock = new FakeClock(NOW);
    const valve = createValve({
      id: 'coarse',
      clock,
      store: memoryStore({ clock }),
      rules: [{ limit: 1000, interval: '1s', burst: 1000 }],
    });
    const retries: FetchRetryEvent[] = [];
    valve.on('retry', (e) => retries.push(e));
    const sent: { at: number; status: number }[] = [];
    // The quota is busy (another client) until t = 3 s; every 429 says Retry-After: 1.
    const f = valve.wrapFetch(
      async (_url: string) => {
        const at = clock.now() - NOW;
        const status = at < 3000 ? 429 : 200;
        sent.push({ at, status });
        return new Response('{}', { status, headers: status === 429 ? { 'retry-after': '1' } : {} });
      },
      { retries: 10 },
    );
    const all = Array.from({ length: 5 }, (_, i) => f(`https://api.example/${i}`));
    await clock.runAllAsync(20_000);
    const answers = await Promise.all(all);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(retries.filter((r) => r.waitMs === 0)).toEqual([]);
    // One probe at a time: no two requests were sent at one instant while the provider refused.
    const limited = sent.filter((s) => s.status === 429);
    expect(new Set(limited.map((s) => s.at)).size).toBe(limited.length);
    // Each second of refusals: the 429 that starts a coarse wait, at most 4 probes before its
    // bound, then one at the bound (which starts the next wait); 15 over the 3 s here, against
    // 75 at one instant before the fix.
    expect(limited.length).toBeLessThanOrEqual(15);
    await valve.close();
  });
});

describe('the record tells windows of different limits apart', () => {
  const policy = '"burst";q=100;w=60, "daily";q=1000;w=86400';
  it('a daily policy spent after an answer of the burst policy pauses for the daily reset (capped)', async () => {
    const { clock, valve, pauses } = setUp('policies');
    const answers = [
      {
        status: 200,
        headers: { 'ratelimit-policy': policy, ratelimit: '"burst";r=3;t=5, "daily";r=500;t=80000' },
      },
      {
        status: 429,
        headers: { 'ratelimit-policy': policy, ratelimit: '"burst";r=2;t=4, "daily";r=0;t=79999' },
      },
    ];
    let n = 0;
    const f = valve.wrapFetch(async (_url: string) => new Response('{}', answers[Math.min(n++, 1)]), {
      retries: 0,
    });
    await Promise.all([f('a'), clock.tickAsync(1)]);
    await clock.tickAsync(999);
    await Promise.all([f('b'), clock.tickAsync(1)]);
    // As observe() reads the same answers: the daily reset, capped at maxPause (1 h).
    const longest = Math.max(...pauses.map((p) => p.until - clock.now()));
    expect(longest).toBeGreaterThan(3_599_000);
    await valve.close();
  });
});

describe('resume() ends the wait of a request held by the pause', () => {
  it('a request granted before a 1 h pause and held for its ticket goes at once after resume()', async () => {
    const { clock, valve } = setUp('resume');
    const sent: { at: number; url: string }[] = [];
    const f = valve.wrapFetch(
      async (url: string) => {
        sent.push({ at: clock.now() - NOW, url });
        if (url === 'a') {
          await new Promise<void>((r) => clock.setTimeout(() => r(), 50));
          return new Response('{}', { status: 429, headers: { 'retry-after': '3600' } });
        }
        return new Response('{}', { status: 200 });
      },
      { retries: 0 },
    );
    const a = f('a'); // the id's first request: a probe
    const b = f('b'); // granted at once, waits for the probe's answer
    await clock.tickAsync(60); // the probe's 429: a 1 h pause, which b now waits out
    expect((await a).status).toBe(429);
    expect(sent.map((s) => s.url)).toEqual(['a']);
    await valve.resume();
    await clock.tickAsync(10);
    expect(sent.map((s) => s.url)).toEqual(['a', 'b']);
    expect((await b).status).toBe(200);
    await valve.close();
  });
});

describe('observe() alone reads one response', () => {
  it('pauses until the reset it states, not one tightened by earlier responses', () => {
    const { clock, valve } = setUp('alone');
    valve.observe({ status: 200, headers: { 'ratelimit-remaining': '5', 'ratelimit-reset': '1' } });
    clock.advance(900);
    const r = valve.observe({ status: 200, headers: { 'ratelimit-remaining': '0', 'ratelimit-reset': '1' } });
    expect(r?.waitMs).toBe(1000);
  });

  it("one limit's bound does not shorten another's (GitHub's search, then core, on x-ratelimit-*)", () => {
    const { clock, valve } = setUp('limits');
    const reset = (ms: number) => String(Math.ceil((NOW + ms) / 1000));
    valve.observe({
      status: 200,
      headers: { 'x-ratelimit-remaining': '29', 'x-ratelimit-reset': reset(2000) },
    });
    clock.advance(1000);
    const r = valve.observe({
      status: 200,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': reset(3_600_000) },
    });
    expect(r?.waitMs).toBeGreaterThan(3_598_000);
  });
});

it("a 503 with Azure's x-ms-retry-after-ms is retried like one with retry-after-ms", async () => {
  const statuses: number[] = [];
  for (const header of ['retry-after-ms', 'x-ms-retry-after-ms']) {
    const clock = new FakeClock(NOW);
    const valve = createValve({ id: header, clock, store: memoryStore({ clock }) });
    let n = 0;
    const f = valve.wrapFetch(
      async (_url: string) =>
        new Response('{}', { status: n++ === 0 ? 503 : 200, headers: { [header]: '1500' } }),
    );
    const answer = f('https://api.example/');
    await clock.runAllAsync(10_000);
    statuses.push((await answer).status, n);
    await valve.close();
  }
  expect(statuses).toEqual([200, 2, 200, 2]);
});

describe("maxWait bounds a granted request's wait for its fleet ticket", () => {
  /**
   * A valve with maxWait 300 ms on a memory store whose windowSend calls are logged (valve clock);
   * a bare 429's backoff of 10 ms lets its retry start within that maxWait.
   */
  function bounded(id: string) {
    const clock = new FakeClock(NOW);
    const store = memoryStore({ clock });
    const asked: number[] = [];
    const send = store.windowSend!.bind(store);
    store.windowSend = (key, probeTtl) => {
      asked.push(clock.now() - NOW);
      return send(key, probeTtl);
    };
    const valve = createValve({ id, clock, store, maxWait: 300, feedback: { backoffInitial: 10 } });
    const retries: FetchRetryEvent[] = [];
    valve.on('retry', (e) => retries.push(e));
    return { clock, valve, asked, retries };
  }

  it('a call held through a 60 s pause written after its grant rejects MAX_WAIT at its deadline, never sent', async () => {
    const { clock, valve, asked } = bounded('bounded-pause');
    const sent: string[] = [];
    const f = valve.wrapFetch(
      async (url: string) => {
        sent.push(url);
        await new Promise<void>((r) => clock.setTimeout(() => r(), 10));
        // The window is spent, its reset 60 s away.
        return new Response('{}', {
          status: 200,
          headers: { 'ratelimit-remaining': url === 'a' ? '0' : '9', 'ratelimit-reset': '60' },
        });
      },
      { retries: 0 },
    );
    const a = track(f('a')); // the id's first request: a probe
    const b = track(f('b')); // granted at once, waits for the probe's answer, then for the pause
    await clock.tickAsync(10_000);
    expect(a.ok).toBe(true);
    expect(b.done).toBe(true);
    expect(isValveError(b.error, 'MAX_WAIT')).toBe(true);
    expect(String((b.error as Error).message)).toMatch(/maxWait/);
    expect(sent).toEqual(['a']);
    // b's job started (the valve's grant is spent) and failed.
    expect(valve.stats()).toMatchObject({ started: 2, succeeded: 1, failed: 1, rejected: 0 });
    // The store was not asked for b's ticket once its deadline (300 ms after it was queued) passed.
    expect(asked.filter((t) => t >= 300)).toEqual([]);
    // The pause (60 s) still holds: the grant b spent is not given back, and it is not sent later.
    await clock.tickAsync(60_000);
    expect(sent).toEqual(['a']);
    await valve.close();
  });

  it('a retry refused a ticket while the last unit is in flight returns its 429 at its deadline; the refusal counts nothing', async () => {
    const { clock, valve, asked, retries } = bounded('bounded-retry');
    const sent: { at: number; url: string }[] = [];
    const window = (remaining: number) => ({
      'ratelimit-remaining': String(remaining),
      'ratelimit-reset': '60',
    });
    const f = valve.wrapFetch(
      async (url: string) => {
        sent.push({ at: clock.now() - NOW, url });
        if (url === 'slow') {
          // Takes the last unit and answers 10 s later.
          await new Promise<void>((r) => clock.setTimeout(() => r(), 10_000));
          return new Response('{}', { status: 200, headers: window(1) });
        }
        if (url === 'limited') return new Response('{}', { status: 429, headers: window(1) });
        return new Response('{}', { status: 200, headers: window(2) });
      },
      { retries: 1 },
    );
    expect((await Promise.all([f('first'), clock.tickAsync(1)]))[0].status).toBe(200); // 2 left
    const slow = track(f('slow')); // 1 left
    // None left; its 429 (a 10 ms backoff) says 1 left while `slow` is out: the count is not
    // spent, the fleet writes no pause, and the retry's ticket is refused until `slow` answers.
    const limited = track(f('limited'));
    await clock.tickAsync(2000);
    expect(retries.map((r) => r.url)).toEqual(['limited']);
    // The retry was granted and refused a ticket until its maxWait (300 ms after it was
    // queued): the call returns the 429 it had, and the retry was never sent.
    expect(limited.done).toBe(true);
    expect((limited.value as Response).status).toBe(429);
    expect(sent.map((s) => s.url)).toEqual(['first', 'slow', 'limited']);
    expect(asked.filter((t) => t >= 301)).toEqual([]);
    // `slow`'s answer leaves one unit: nothing of the abandoned retry is counted in flight, so
    // the next request goes at once.
    await clock.tickAsync(8100);
    expect((slow.value as Response).status).toBe(200);
    const next = track(f('next'));
    await clock.tickAsync(5);
    expect(next.ok).toBe(true);
    expect(sent.map((s) => s.url)).toEqual(['first', 'slow', 'limited', 'next']);
    await valve.close();
  });

  it("a ticket the store hands over after the request's deadline is given back, never sent (MAX_WAIT)", async () => {
    const clock = new FakeClock(NOW);
    const store = memoryStore({ clock });
    const send = store.windowSend!.bind(store);
    const report = store.windowReport!.bind(store);
    const reported: number[] = [];
    let slow = true;
    // The store answers the first ticket call 500 ms late (a slow Redis), after the 300 ms maxWait.
    store.windowSend = (key, probeTtl) =>
      slow
        ? new Promise((resolve) => clock.setTimeout(() => resolve(send(key, probeTtl)), 500))
        : send(key, probeTtl);
    store.windowReport = (key, seq, remaining, resetMs) => {
      reported.push(seq);
      return report(key, seq, remaining, resetMs);
    };
    const valve = createValve({ id: 'late-ticket', clock, store, maxWait: 300 });
    const sent: string[] = [];
    const f = valve.wrapFetch(
      async (url: string) => {
        sent.push(url);
        return new Response('{}', {
          status: 200,
          headers: { 'ratelimit-remaining': '9', 'ratelimit-reset': '60' },
        });
      },
      { retries: 0 },
    );
    const late = track(f('late'));
    await clock.tickAsync(600);
    expect(late.done).toBe(true);
    expect(isValveError(late.error, 'MAX_WAIT')).toBe(true);
    expect(sent).toEqual([]);
    // Its ticket (the id's first: a probe) was reported unanswered, so nothing is left in flight
    // and the next request goes at once instead of waiting out the probe.
    expect(reported).toHaveLength(1);
    slow = false;
    const next = track(f('next'));
    await clock.tickAsync(5);
    expect(next.ok).toBe(true);
    expect(sent).toEqual(['next']);
    await valve.close();
  });
});
