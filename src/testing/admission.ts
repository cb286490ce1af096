/**
 * Conformance cases: admission (longest prefix, counts, costs, several rules, atomic spends),
 * exact retry hints on a controlled clock (the real-time cases any store runs: realtime.ts).
 */
import type { StoreRule } from '../rules/rule.js';
import { expect, fail } from './expect.js';
import {
  type CaseRegistry,
  type ClockCaseContext,
  expectMs,
  hourly3,
  hourlyWindow,
  ones,
  outcomeOf,
  rule,
} from './suite.js';

/** How many acquisitions the concurrency cases fire at once on one id. */
export const AT_ONCE = 20;
/** 3 units per hour, all 3 back to back: no unit comes back within a case, however slow. */
export const slow3 = rule({ limit: 3, interval: '1h', burst: 3 });

export function admissionCases(c: CaseRegistry): void {
  const { newId } = c;
  c.describe('admission', () => {
    c.it('grants the longest prefix that fits and reports why it stopped', async (s) => {
      const id = newId();
      const r = await s.acquire({ id, rules: [hourly3], costs: ones(5) });
      const first = '5 jobs of cost 1 asked under 3600 per hour, burst 3';
      expect(r.granted, `${first}: granted`).toBe(3);
      expect(r.blocked, `${first}: blocked`).toBe('rate');
      expect(r.pausedUntil, `${first}: pausedUntil (no pause)`).toBeNull();
      expect(r.leases, `${first}: leases (none asked for)`).toBeUndefined();
      expect(r.retryAfter, `${first}: retryAfter (ms until the next unit, 1 s per unit)`).toBeGreaterThan(
        900,
      );
      expect(r.retryAfter, `${first}: retryAfter (ms until the next unit, 1 s per unit)`).toBeLessThanOrEqual(
        1000,
      );
      expect(
        Math.abs(r.now - Date.now()),
        `now ${r.now}: the store's clock (epoch ms) against this process's Date.now(), in ms`,
      ).toBeLessThan(s.advance ? Number.POSITIVE_INFINITY : 60_000);
      const again = await s.acquire({ id, rules: [hourly3], costs: ones(2) });
      expect(again.granted, 'jobs granted right after the burst of 3 was spent').toBe(0);
      expect(again.blocked, 'blocked, right after the burst of 3 was spent').toBe('rate');
    });

    c.it('grants everything with blocked null and retryAfter 0 when all fits', async (s) => {
      const r = await s.acquire({ id: newId(), rules: [hourly3], costs: ones(3) });
      expect(r, '3 jobs of cost 1 under 3600 per hour, burst 3 (all fit)').toMatchObject({
        granted: 3,
        retryAfter: 0,
        blocked: null,
        pausedUntil: null,
      });
    });

    c.it('grants everything when there are no rules', async (s) => {
      const r = await s.acquire({ id: newId(), rules: [], costs: ones(40) });
      expect(r, '40 jobs with `rules: []`').toMatchObject({ granted: 40, retryAfter: 0, blocked: null });
    });

    c.it('reads only the first `count` costs', async (s) => {
      const id = newId();
      const r = await s.acquire({ id, rules: [hourly3], costs: ones(5), count: 2 });
      expect(r.granted, 'jobs granted for `count: 2` with 5 costs (burst 3)').toBe(2);
      expect(r.blocked, 'blocked, for `count: 2` with 5 costs (burst 3)').toBeNull();
      const next = await s.acquire({ id, rules: [hourly3], costs: ones(5), count: 2 });
      expect(next.granted, 'jobs granted for `count: 2` again, 1 unit of 3 left').toBe(1);
    });

    c.it('counts cost: a job fits only when the whole cost fits', async (s) => {
      const id = newId();
      const r = await s.acquire({ id, rules: [hourly3], costs: [2, 2, 1] });
      // 2 fits; the second 2 does not, and the 1 behind it is not granted either (a prefix).
      expect(r.granted, 'jobs granted of costs [2, 2, 1] under burst 3 (a prefix: the 1 waits too)').toBe(1);
      expect(r.blocked, 'blocked, costs [2, 2, 1] under burst 3').toBe('rate');
      const next = await s.acquire({ id, rules: [hourly3], costs: [1] });
      expect(next.granted, 'a job of cost 1 after one of cost 2 (burst 3)').toBe(1);
    });

    c.it('rejects costs that are not positive integers (cost units), spending nothing', async (s) => {
      const id = newId();
      const slow = rule({ limit: 1, interval: '1h', burst: 3 });
      for (const bad of [0.5, 1.5, 0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
        // The answer itself, unchecked: a store that answers is reported with what it granted.
        const { thrown, what } = await outcomeOf(
          async () => await s.store.acquire({ id, rules: [slow], costs: [1, bad], count: 2 }),
        );
        if (!(thrown instanceof RangeError)) {
          fail(
            `a cost of ${bad} must be refused with a RangeError (spending nothing), but acquire() ${what}`,
          );
        }
      }
      // Nothing of the refused batches was spent.
      expect(
        (await s.acquire({ id, rules: [slow], costs: [1, 1, 1] })).granted,
        'jobs of cost 1 granted (burst 3) after the refused batches',
      ).toBe(3);
    });

    c.it('fixed window: grants up to limit units in the window', async (s) => {
      const id = newId();
      const r = await s.acquire({ id, rules: [hourlyWindow], costs: [1, 2, 1] });
      expect(r.granted, 'jobs granted of costs [1, 2, 1] under a fixed window of 3 per hour').toBe(2);
      const id2 = newId();
      // The whole cost must fit in what is left: 2 + 2 > 3.
      expect(
        (await s.acquire({ id: id2, rules: [hourlyWindow], costs: [2, 2] })).granted,
        'jobs granted of costs [2, 2] under a fixed window of 3 per hour',
      ).toBe(1);
      expect(
        (await s.acquire({ id: id2, rules: [hourlyWindow], costs: [1] })).granted,
        'a job of cost 1 with 1 unit of the window left',
      ).toBe(1);
      expect(r.blocked, 'blocked, costs [1, 2, 1] under 3 per hour').toBe('rate');
      expect(r.retryAfter, 'retryAfter: ms until the window ends').toBeGreaterThan(0);
      expect(r.retryAfter, 'retryAfter: ms until the window ends').toBeLessThanOrEqual(3_600_000);
      // Aligned on the store's clock: the window ends at the next whole hour of AcquireResult.now
      // (not an hour after the first grant), and the hint is the time to that end.
      const end = 3_600_000 - (r.now % 3_600_000);
      expect(
        Math.abs(r.retryAfter - end) <= 0.002,
        `retryAfter ${r.retryAfter} ms at now ${r.now}: a fixed window of 1 h is aligned on the store's clock, so the hint must be the time to the next whole hour, ${end} ms (not the whole interval, nor an hour from the first grant)`,
      ).toBe(true);
    });

    c.it('sliding window: the whole limit at once, then nothing until units leave the window', async (s) => {
      const id = newId();
      const sliding = rule({ limit: 3, interval: '1h', algorithm: 'sliding-window' });
      const r = await s.acquire({ id, rules: [sliding], costs: [1, 1, 2, 1] });
      expect(r.granted).toBe(2);
      expect(r.blocked).toBe('rate');
      // The first grants leave one interval after they were made.
      expect(r.retryAfter).toBeGreaterThan(3_590_000);
      expect(r.retryAfter).toBeLessThanOrEqual(3_600_000);
      // A refused job spends nothing: one unit is left.
      expect((await s.acquire({ id, rules: [sliding], costs: [2] })).granted).toBe(0);
      expect((await s.acquire({ id, rules: [sliding], costs: [1, 1] })).granted).toBe(1);
      expect((await s.acquire({ id, rules: [sliding], costs: [1] })).granted).toBe(0);
      // The same rule as a fixed window is another budget (another digest).
      const window = rule({ limit: 3, interval: '1h', algorithm: 'fixed-window' });
      expect((await s.acquire({ id, rules: [window], costs: [3] })).granted).toBe(1);
    });

    c.it('several rules: each one binds', async (s) => {
      const id = newId();
      const fast = rule({ limit: 1000, interval: '1s', burst: 2 }); // 1 unit per ms, 2 back to back
      const daily = rule({ limit: 3, interval: '1d', algorithm: 'fixed-window' });
      const first = await s.acquire({ id, rules: [fast, daily], costs: ones(5) });
      const rules = '1000 per second, burst 2, and a fixed window of 3 per day';
      expect(first.granted, `5 jobs under ${rules} (the burst binds)`).toBe(2);
      expect(first.retryAfter, `retryAfter under ${rules} (1 ms per unit)`).toBeLessThanOrEqual(1);
      await s.pass(5);
      const second = await s.acquire({ id, rules: [fast, daily], costs: ones(5) });
      // The GCRA rule has room for 2, the window only for 1.
      expect(second.granted, `5 more jobs 5 ms later under ${rules} (the day's window binds)`).toBe(1);
      expect(second.blocked, `blocked, 5 more jobs under ${rules}`).toBe('rate');
      expect(second.retryAfter, "retryAfter: ms until the day's window ends").toBeGreaterThan(1000);
    });

    c.it('retryAfter is the largest wait over the rules the job failed', async (s) => {
      const id = newId();
      const a = rule({ limit: 3600, interval: '1h' }); // 1s emission
      const b = rule({ limit: 360, interval: '1h' }); // 10s emission
      const r = await s.acquire({ id, rules: [a, b], costs: ones(2) });
      expect(r.granted, '2 jobs under 3600 and 360 per hour').toBe(1);
      expect(r.retryAfter, 'retryAfter: the larger wait, of 360 per hour (10 s per unit)').toBeGreaterThan(
        9000,
      );
      expect(
        r.retryAfter,
        'retryAfter: the larger wait, of 360 per hour (10 s per unit)',
      ).toBeLessThanOrEqual(10_000);
    });

    c.it('spends atomically: a refused job spends nothing on any rule', async (s) => {
      const id = newId();
      const shared = rule({ limit: 2, interval: '1h', burst: 2 });
      const tight = rule({ limit: 1, interval: '1h', algorithm: 'fixed-window' });
      expect((await s.acquire({ id, rules: [shared, tight], costs: [1] })).granted).toBe(1);
      // `shared` has one unit left, `tight` none: refused, and `shared` keeps its unit.
      for (let i = 0; i < 3; i++) {
        expect(
          (await s.acquire({ id, rules: [shared, tight], costs: [1] })).granted,
          'a job refused by the spent rule of two',
        ).toBe(0);
      }
      expect(
        (await s.acquire({ id, rules: [shared], costs: [1] })).granted,
        'the other rule alone, after 3 refusals: the refused jobs must have spent nothing of it',
      ).toBe(1);
      expect((await s.acquire({ id, rules: [shared], costs: [1] })).granted, 'the other rule, spent').toBe(0);
    });

    c.it('spends atomically within a batch: the refused job and those behind it spend nothing', async (s) => {
      const id = newId();
      const r = await s.acquire({ id, rules: [hourly3], costs: [1, 3, 1, 1] });
      expect(r.granted, 'jobs granted of costs [1, 3, 1, 1] under burst 3').toBe(1);
      // Two units are left: a cost-2 job fits.
      expect(
        (await s.acquire({ id, rules: [hourly3], costs: [2] })).granted,
        'a job of cost 2 after [1, 3, 1, 1] granted 1: the refused jobs must have spent nothing',
      ).toBe(1);
    });

    c.it('a batch checks each job against the state as updated by the grants before it', async (s) => {
      const id = newId();
      const w = rule({ limit: 5, interval: '1h', algorithm: 'fixed-window' });
      const r = await s.acquire({ id, rules: [hourly3, w], costs: [1, 1, 1] });
      expect(r.granted, '3 jobs under burst 3 and a fixed window of 5 per hour').toBe(3);
      const r2 = await s.acquire({ id, rules: [w], costs: [1, 1, 1] });
      expect(r2.granted, 'the window of 5 alone, after the batch of 3 spent 3 of it').toBe(2);
    });
  });

  c.describe('concurrent calls on one id', () => {
    c.it(`${AT_ONCE} acquisitions at once on one id grant what the rules allow, in total`, async (s) => {
      // Each call is atomic: whatever order the store runs them in, the totals are those of the
      // calls made one after another. A store that reads the state, then writes it (two calls
      // in flight read the same state) grants more.
      const sliding = rule({ limit: 5, interval: '1h', algorithm: 'sliding-window' });
      const fixed = rule({ limit: 5, interval: '1h', algorithm: 'fixed-window' });
      const ids = { gcra: newId(), sliding: newId(), fixed: newId() };
      const fire = (id: string, rules: StoreRule[], costs: number[]) =>
        Promise.all(Array.from({ length: AT_ONCE }, () => s.acquire({ id, rules, costs })));
      const [gcra, slid, fix] = await Promise.all([
        fire(ids.gcra, [slow3], ones(2)),
        fire(ids.sliding, [sliding], [1]),
        fire(ids.fixed, [fixed], [1]),
      ]);
      const total = (rs: { granted: number }[]) => rs.reduce((sum, r) => sum + r.granted, 0);
      expect(
        total(gcra),
        `jobs granted by ${AT_ONCE} concurrent calls of 2 jobs under GCRA 3 per hour, burst 3`,
      ).toBe(3);
      expect(
        total(slid),
        `jobs granted by ${AT_ONCE} concurrent calls under a sliding window of 5 per hour`,
      ).toBe(5);
      // A fixed window is aligned: the calls may straddle the end of one (5 more then).
      const windows = new Set(fix.map((r) => Math.floor(r.now / 3_600_000))).size;
      expect(
        total(fix),
        `jobs granted by ${AT_ONCE} concurrent calls under a fixed window of 5 per hour`,
      ).toBeLessThanOrEqual(5 * windows);
      expect(
        total(fix),
        `jobs granted by ${AT_ONCE} concurrent calls under a fixed window of 5 per hour`,
      ).toBeGreaterThanOrEqual(5);
      // Nothing is left for the next call.
      expect((await s.acquire({ id: ids.gcra, rules: [slow3], costs: [1] })).granted).toBe(0);
      expect((await s.acquire({ id: ids.sliding, rules: [sliding], costs: [1] })).granted).toBe(0);
    });

    c.it(
      `${AT_ONCE} lease acquisitions at once hold at most the limit, with unique tokens and fences`,
      async (s) => {
        const id = newId();
        const lease = { limit: 3, ttl: 60_000 };
        const results = await Promise.all(
          Array.from({ length: AT_ONCE }, (_, i) =>
            s.acquire({ id, rules: [], costs: ones(1 + (i % 2)), lease }),
          ),
        );
        const granted = results.reduce((sum, r) => sum + r.granted, 0);
        expect(granted, `leases granted by ${AT_ONCE} concurrent calls under a limit of 3`).toBe(3);
        const leases = results.flatMap((r) => r.leases ?? []);
        expect(leases, 'the leases of the concurrent calls (one per granted job)').toHaveLength(3);
        const tokens = new Set(leases.map((l) => l.token));
        expect(tokens.size, `distinct tokens among ${JSON.stringify(leases.map((l) => l.token))}`).toBe(3);
        const fences = new Set(leases.map((l) => l.fence));
        expect(fences.size, `distinct fences among ${JSON.stringify(leases.map((l) => l.fence))}`).toBe(3);
        expect((await s.acquire({ id, rules: [], costs: [1], lease })).blocked).toBe('concurrency');
      },
    );
  });

  if (c.controlledClock)
    c.describe('exact retry hints (controlled clock)', () => {
      const exactness = async (
        s: ClockCaseContext,
        rules: StoreRule[],
        costs: number[],
        expected: { granted: number; wait: number },
      ) => {
        const id = newId();
        const r = await s.acquire({ id, rules, costs });
        expect(r.granted, `jobs granted of costs ${JSON.stringify(costs)}`).toBe(expected.granted);
        expect(r.blocked, `blocked, costs ${JSON.stringify(costs)}`).toBe('rate');
        expectMs(r.retryAfter, expected.wait);
        const rest = costs.slice(expected.granted, expected.granted + 1);
        // 1 µs before the hint: still refused, and the new hint is the remaining 1 µs.
        await s.advance(r.retryAfter - 0.001);
        const early = await s.acquire({ id, rules, costs: rest });
        expect(early.granted, 'the next job 1 µs before retryAfter').toBe(0);
        expectMs(early.retryAfter, 0.001);
        await s.advance(0.001);
        const onTime = await s.acquire({ id, rules, costs: rest });
        expect(onTime.granted, 'the next job exactly retryAfter later').toBe(1);
      };

      c.itClock('GCRA, burst 1: the next job fits exactly retryAfter later', async (s) => {
        await exactness(s, [rule({ limit: 10, interval: '1s' })], [1, 1], { granted: 1, wait: 100 });
      });

      c.itClock(
        'GCRA: an emission interval that does not divide evenly is rounded up to whole µs',
        async (s) => {
          // 1s / 3 = 333333.33µs → 333334µs.
          await exactness(s, [rule({ limit: 3, interval: '1s' })], [1, 1], { granted: 1, wait: 333.334 });
        },
      );

      c.itClock('GCRA with burst and costs', async (s) => {
        const r = rule({ limit: 10, interval: '1s', burst: 4 }); // 100ms per unit, 400ms capacity
        // 3 + 1 fill the capacity; the next job of cost 2 needs 200ms more.
        await exactness(s, [r], [3, 1, 2], { granted: 2, wait: 200 });
      });

      c.itClock('GCRA rounds the emission interval up, once per unit of cost', async (s) => {
        const r = rule({ limit: 3, interval: '1s', burst: 2 }); // 333334µs per unit, 666668µs capacity
        // A cost of 2 fills the capacity; one more unit waits one emission interval.
        await exactness(s, [r], [2, 1], { granted: 1, wait: 333.334 });
      });

      c.itClock('fixed window: the next job fits exactly when the window ends', async (s) => {
        const id = newId();
        const w = rule({ limit: 2, interval: '1s', algorithm: 'fixed-window' });
        // Off a whole second (a controlled clock often starts on one), so that a window anchored
        // at its first grant is told from one aligned on the clock.
        await s.advance(123.457);
        const r = await s.acquire({ id, rules: [w], costs: ones(3) });
        expect(r.granted).toBe(2);
        // The window is aligned on the store's clock: it ends at the next multiple of 1s.
        expectMs(r.retryAfter, 1000 - (r.now % 1000));
        await s.advance(r.retryAfter - 0.001);
        expect((await s.acquire({ id, rules: [w], costs: [1] })).granted).toBe(0);
        await s.advance(0.001);
        const next = await s.acquire({ id, rules: [w], costs: ones(3) });
        expect(next.granted).toBe(2);
        expectMs(next.retryAfter, 1000);
      });

      c.itClock('sliding window: the window follows the grants (not aligned); hints are exact', async (s) => {
        const id = newId();
        const w = rule({ limit: 3, interval: '1s', algorithm: 'sliding-window' });
        expect((await s.acquire({ id, rules: [w], costs: [1] })).granted).toBe(1); // t0
        await s.advance(300);
        expect((await s.acquire({ id, rules: [w], costs: [2] })).granted).toBe(1); // t0 + 300
        await s.advance(100);
        const r = await s.acquire({ id, rules: [w], costs: [1] });
        expect(r).toMatchObject({ granted: 0, blocked: 'rate' });
        expectMs(r.retryAfter, 600); // the unit of t0 leaves at t0 + 1000
        await s.advance(599.999);
        const early = await s.acquire({ id, rules: [w], costs: [1] });
        expect(early.granted).toBe(0);
        expectMs(early.retryAfter, 0.001);
        await s.advance(0.001);
        const onTime = await s.acquire({ id, rules: [w], costs: [1, 1] }); // t0 + 1000
        expect(onTime.granted).toBe(1);
        expectMs(onTime.retryAfter, 300); // the 2 units of t0 + 300 leave at t0 + 1300
        // A job of cost 3 needs every unit to leave: the newest leaves at t0 + 2000.
        const whole = await s.acquire({ id, rules: [w], costs: [3] });
        expect(whole.granted).toBe(0);
        expectMs(whole.retryAfter, 1000);
        await s.advance(999.999);
        expect((await s.acquire({ id, rules: [w], costs: [3] })).granted).toBe(0);
        await s.advance(0.001);
        const all = await s.acquire({ id, rules: [w], costs: [3, 1] });
        expect(all.granted).toBe(1);
        expectMs(all.retryAfter, 1000);
      });

      c.itClock('sliding window: sustains exactly limit per interval at the hints', async (s) => {
        const id = newId();
        const w = rule({ limit: 4, interval: '1s', algorithm: 'sliding-window' });
        let granted = 0;
        let asked = 0;
        // 3 s of saturated traffic, asking again at each hint: 4 + 4 + 4 starts, the first 4 at once.
        // Bounded: a store whose hints never move the clock forward fails here instead of looping.
        for (let elapsed = 0; elapsed < 3000 && asked < 40; ) {
          const r = await s.acquire({ id, rules: [w], costs: ones(3) });
          granted += r.granted;
          asked++;
          if (r.granted === 3) continue;
          expect(r.retryAfter, 'the hint of a refused call').toBeGreaterThan(0);
          await s.advance(r.retryAfter);
          elapsed += r.retryAfter;
        }
        expect(granted).toBe(12);
        expect(asked).toBeLessThan(20);
      });

      c.itClock('several rules: after the largest wait every rule fits', async (s) => {
        const id = newId();
        const a = rule({ limit: 10, interval: '1s' }); // 100ms
        const b = rule({ limit: 4, interval: '1s' }); // 250ms
        const r = await s.acquire({ id, rules: [a, b], costs: [1, 1] });
        expect(r.granted).toBe(1);
        expectMs(r.retryAfter, 250);
        await s.advance(249.999);
        expect((await s.acquire({ id, rules: [a, b], costs: [1] })).granted).toBe(0);
        await s.advance(0.001);
        expect((await s.acquire({ id, rules: [a, b], costs: [1] })).granted).toBe(1);
      });

      c.itClock('GCRA: budget refills at the rule rate, never faster', async (s) => {
        const id = newId();
        const r = rule({ limit: 10, interval: '1s', burst: 5 });
        expect((await s.acquire({ id, rules: [r], costs: ones(10) })).granted).toBe(5);
        await s.advance(250); // 2.5 units back
        expect((await s.acquire({ id, rules: [r], costs: ones(10) })).granted).toBe(2);
        await s.advance(10_000); // long idle: back to a full burst, not more
        expect((await s.acquire({ id, rules: [r], costs: ones(10) })).granted).toBe(5);
      });
    });
}
