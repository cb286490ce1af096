/** Conformance cases: the shared pause (extend-only, its end, what it blocks, resume). */
import { expect } from './expect.js';
import { type CaseRegistry, expectMs, hourly3, ones } from './suite.js';

export function pauseCases(c: CaseRegistry): void {
  const { newId } = c;
  c.describe('pause', () => {
    c.it('blocks every grant and reports pausedUntil and retryAfter', async (s) => {
      const id = newId();
      const until = await s.store.pause(id, 60_000);
      const r = await s.acquire({ id, rules: [hourly3], costs: ones(3) });
      expect(r.granted).toBe(0);
      expect(r.blocked).toBe('pause');
      expectMs(r.pausedUntil!, until);
      expectMs(r.retryAfter, until - r.now);
      expect(r.retryAfter).toBeGreaterThan(59_000);
      expect(r.retryAfter).toBeLessThanOrEqual(60_000);
    });

    c.it('returns its end, now + ms', async (s) => {
      const id = newId();
      const until = await s.store.pause(id, 5000);
      const r = await s.acquire({ id, rules: [], costs: [1] });
      if (s.advance) expectMs(until, r.now + 5000);
      else {
        expect(until - r.now).toBeLessThanOrEqual(5000);
        expect(until - r.now).toBeGreaterThan(4000);
      }
    });

    c.it('only extends: a shorter pause keeps the longer end', async (s) => {
      const id = newId();
      const long = await s.store.pause(id, 60_000);
      const short = await s.store.pause(id, 1000);
      expectMs(short, long);
      const longer = await s.store.pause(id, 120_000);
      expect(longer).toBeGreaterThan(long);
      expectMs((await s.acquire({ id, rules: [], costs: [1] })).pausedUntil!, longer);
    });

    c.it('only extends: after a shorter pause ends, the longer one still blocks', async (s) => {
      // A store that returns the longer end but stores (or expires the key at) the shorter
      // one, e.g. a Redis key set with GT whose PEXPIRE is the latest call's ms.
      const id = newId();
      const long = await s.store.pause(id, 60_000);
      await s.store.pause(id, 50);
      await s.pass(80);
      const r = await s.acquire({ id, rules: [], costs: [1] });
      expect(
        r.blocked,
        'blocked 80 ms after pause(id, 60 s) then pause(id, 50): the shorter pause must not end the longer one',
      ).toBe('pause');
      expect(r.granted).toBe(0);
      expectMs(r.pausedUntil!, long);
    });

    c.it('a paused acquisition spends nothing', async (s) => {
      const id = newId();
      await s.store.pause(id, 60_000);
      for (let i = 0; i < 3; i++) await s.acquire({ id, rules: [hourly3], costs: ones(3) });
      await s.store.resume(id);
      expect((await s.acquire({ id, rules: [hourly3], costs: ones(3) })).granted).toBe(3);
    });

    c.it('blocks lease grants too', async (s) => {
      const id = newId();
      await s.store.pause(id, 60_000);
      const r = await s.acquire({ id, rules: [], costs: [1], lease: { limit: 2, ttl: 10_000 } });
      expect(r.granted).toBe(0);
      expect(r.blocked).toBe('pause');
      expect(r.leases ?? []).toEqual([]);
    });

    c.it('resume() deletes it', async (s) => {
      const id = newId();
      await s.store.pause(id, 60_000);
      await s.store.resume(id);
      const r = await s.acquire({ id, rules: [], costs: [1] });
      expect(r).toMatchObject({ granted: 1, blocked: null, pausedUntil: null });
      // A later pause starts afresh from now.
      const until = await s.store.pause(id, 1000);
      expect(until - r.now).toBeLessThanOrEqual(1000 + (s.advance ? 0 : 1000));
      await s.store.resume(id); // resume twice is fine
      await s.store.resume(id);
    });

    c.itClock('ends exactly at pausedUntil (controlled clock)', async (s) => {
      const id = newId();
      await s.store.pause(id, 1000);
      await s.advance(999.999);
      const r = await s.acquire({ id, rules: [], costs: [1] });
      expect(r.blocked).toBe('pause');
      expectMs(r.retryAfter, 0.001);
      await s.advance(0.001);
      expect((await s.acquire({ id, rules: [], costs: [1] })).granted).toBe(1);
    });
  });
}
