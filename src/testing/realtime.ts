/**
 * Conformance cases that wait real time, run by every store (with or without a controlled
 * clock): the next job after its retryAfter, expiring leases, a pause ending by itself.
 */
import { expect } from './expect.js';
import { type CaseRegistry, hourly3, hourlyWindow, ones, rule } from './suite.js';

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

    c.it('a pause ends by itself', async (s) => {
      const id = newId();
      // Long enough that a machine busy with other work does not end it before the first check.
      await s.store.pause(id, 500);
      expect((await s.acquire({ id, rules: [], costs: [1] })).blocked).toBe('pause');
      await s.pass(510);
      expect((await s.acquire({ id, rules: [], costs: [1] })).granted).toBe(1);
    });
  });
}
