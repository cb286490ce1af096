/**
 * Conformance cases that wait real time, run by every store (with or without a controlled
 * clock): the next job after its retryAfter, expiring leases, a pause ending by itself.
 */
import { expect } from './expect.js';
import { type CaseContext, type CaseRegistry, hourly3, hourlyWindow, ones, rule } from './suite.js';

/**
 * Waits out a store's hint (`ms`), then calls `again`. Timers may fire a little ahead of the
 * store's clock (by a ms or two): an answer that still asks for at most 5 ms (`left`: the wait
 * it asks for, undefined once it grants) gets that wait and 2 ms more, up to three times.
 */
export async function afterHint<T>(
  s: CaseContext,
  ms: number,
  again: () => Promise<T>,
  left: (answer: T) => number | undefined,
): Promise<T> {
  await s.pass(ms);
  let answer = await again();
  for (let tries = 0; tries < 3; tries++) {
    const rest = left(answer);
    if (rest === undefined || rest > 5) return answer;
    await s.pass(rest + 2);
    answer = await again();
  }
  return answer;
}

export function realTimeCases(c: CaseRegistry): void {
  const { newId } = c;
  c.describe('real time (any store)', () => {
    c.it('the next job fits after waiting retryAfter', async (s) => {
      const id = newId();
      const r = rule({ limit: 1, interval: 40 });
      const first = await s.acquire({ id, rules: [r], costs: [1, 1] });
      expect(first.granted).toBe(1);
      expect(first.retryAfter).toBeGreaterThan(0);
      expect(first.retryAfter).toBeLessThanOrEqual(40);
      await s.pass(first.retryAfter + 1);
      expect((await s.acquire({ id, rules: [r], costs: [1] })).granted).toBe(1);
    });

    c.it('fixed and sliding windows of 100 ms grant again after waiting retryAfter', async (s) => {
      const fixed = rule({ limit: 1, interval: 100, algorithm: 'fixed-window' });
      const sliding = rule({ limit: 1, interval: 100, algorithm: 'sliding-window' });
      const ids = { fixed: newId(), sliding: newId() };
      const f = await s.acquire({ id: ids.fixed, rules: [fixed], costs: [1, 1] });
      const sl = await s.acquire({ id: ids.sliding, rules: [sliding], costs: [1, 1] });
      for (const r of [f, sl]) {
        expect(r.granted, 'jobs granted of 2 under a window of 1 per 100 ms').toBe(1);
        expect(r.retryAfter).toBeGreaterThan(0);
        expect(r.retryAfter).toBeLessThanOrEqual(100);
      }
      const fixedAgain = await afterHint(
        s,
        f.retryAfter,
        () => s.acquire({ id: ids.fixed, rules: [fixed], costs: [1] }),
        (r) => (r.granted === 1 ? undefined : r.retryAfter),
      );
      expect(
        fixedAgain.granted,
        `a job under a fixed window of 1 per 100 ms, its retryAfter (${f.retryAfter} ms) waited out: the window must end and its count start again`,
      ).toBe(1);
      // The two waits overlap: the sliding window's hint counts from its own call.
      const slidingAgain = await afterHint(
        s,
        Math.max(0, sl.retryAfter - (fixedAgain.now - sl.now)),
        () => s.acquire({ id: ids.sliding, rules: [sliding], costs: [1] }),
        (r) => (r.granted === 1 ? undefined : r.retryAfter),
      );
      expect(
        slidingAgain.granted,
        `a job under a sliding window of 1 per 100 ms, its retryAfter (${sl.retryAfter} ms) waited out: the old grant must leave the window`,
      ).toBe(1);
    });

    c.it(
      'spent budget stays spent over a short wait (the state outlives one emission interval)',
      async (s) => {
        // A store that lets a rule's state expire early (e.g. a TTL of one emission interval
        // instead of the theoretical arrival time, or less than the window) forgets what was
        // spent. The bounds below use the store's own clock (AcquireResult.now), so a machine
        // busy with other work loosens them and never fails a correct store.
        const tenPerSecond = rule({ limit: 10, interval: '1s', burst: 10 }); // 100 ms per unit
        const sliding = rule({ limit: 3, interval: '1h', algorithm: 'sliding-window' });
        const ids = { gcra: newId(), hourly: newId(), sliding: newId(), fixed: newId() };
        const burst = await s.acquire({ id: ids.gcra, rules: [tenPerSecond], costs: ones(10) });
        expect(burst.granted).toBe(10);
        const spent = await s.acquire({ id: ids.hourly, rules: [hourly3], costs: ones(3) });
        expect(spent.granted).toBe(3);
        expect((await s.acquire({ id: ids.sliding, rules: [sliding], costs: ones(3) })).granted).toBe(3);
        const fixed = await s.acquire({ id: ids.fixed, rules: [hourlyWindow], costs: ones(3) });
        expect(fixed.granted).toBe(3);
        await s.pass(300);
        const after = await s.acquire({ id: ids.gcra, rules: [tenPerSecond], costs: ones(10) });
        const elapsed = after.now - burst.now;
        // One unit back per 100 ms since the burst: 3 after 300 ms (+1 for rounding).
        expect(
          after.granted,
          `units granted ${elapsed} ms (store clock) after a burst of 10 at 10 per second`,
        ).toBeLessThanOrEqual(Math.floor(elapsed / 100) + 1);
        const hourly = await s.acquire({ id: ids.hourly, rules: [hourly3], costs: ones(3) });
        expect(
          hourly.granted,
          `units granted ${hourly.now - spent.now} ms after spending 3600 per hour, burst 3`,
        ).toBeLessThanOrEqual(Math.floor((hourly.now - spent.now + 10) / 1000));
        expect(
          (await s.acquire({ id: ids.sliding, rules: [sliding], costs: [1] })).granted,
          'units granted 300 ms after spending a sliding window of 3 per hour',
        ).toBe(0);
        const window = await s.acquire({ id: ids.fixed, rules: [hourlyWindow], costs: [1] });
        if (Math.floor(window.now / 3_600_000) === Math.floor(fixed.now / 3_600_000)) {
          expect(window.granted, 'units granted 300 ms after spending a fixed window of 3 per hour').toBe(0);
        }
      },
    );

    c.it('a pause ends by itself, not before its end', async (s) => {
      const id = newId();
      // Long enough that a machine busy with other work does not end it before the first check.
      const until = await s.store.pause(id, 500);
      const first = await s.acquire({ id, rules: [], costs: [1] });
      expect(first.blocked).toBe('pause');
      // Up to 5 ms before its end, then asking again and again: no grant before pausedUntil.
      await s.pass(Math.max(0, until - first.now - 5));
      for (let asked = 0; ; asked++) {
        const r = await s.acquire({ id, rules: [], costs: [1] });
        if (r.granted === 1) {
          expect(
            r.now >= until,
            `granted at ${r.now} (store clock), before the pause's end ${until}: a pause must block until pausedUntil`,
          ).toBe(true);
          break;
        }
        expect(r.blocked, 'a refused call near the end of a pause').toBe('pause');
        expect(asked, 'calls until the pause ended (bounded)').toBeLessThan(100_000);
        if (s.advance) await s.pass(r.retryAfter);
        else if (r.now > until + 100) throw new Error(`still paused 100 ms after its end (${until})`);
      }
    });
  });
}
