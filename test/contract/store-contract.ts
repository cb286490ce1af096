import { describe, expect, it, onTestFinished } from 'vitest';
import type { Rule, StoreRule } from '../../src/rules/rule.js';
import { normalizeRule } from '../../src/rules/rule.js';
import type { AcquireRequest, AcquireResult, Store, WakeEvent } from '../../src/stores/store.js';

/**
 * The Store conformance suite. Every store (memory, Redis, a user's own) must pass it.
 *
 * `makeStore` is called once per test. It returns the store and, optionally:
 * - `advance(ms)`: moves the store's clock forward by exactly `ms` (a controlled clock,
 *   e.g. a FakeClock, or a Redis test mode that takes time from an argument). The
 *   clock must not move otherwise. Tests that need exact time run only with it
 *   (they are skipped otherwise); the rest use slow rules (per hour) so that their
 *   answers do not depend on time, or short real waits of a few tens of ms.
 * - `cleanup()`: called after the test.
 *
 * Every test uses fresh random ids, so the suite can run against a shared Redis.
 */
export interface StoreUnderTest {
  store: Store;
  advance?: ((ms: number) => Promise<void> | void) | undefined;
  cleanup?: (() => Promise<void>) | undefined;
}

const rule = (r: Rule): StoreRule => normalizeRule(r, 'rule');
const ones = (n: number): number[] => Array.from({ length: n }, () => 1);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** µs resolution: two ms values from the store agree when they round to the same µs. */
function expectMs(actual: number, expected: number): void {
  expect(Math.round(actual * 1000)).toBe(Math.round(expected * 1000));
}

async function waitFor(check: () => boolean, timeoutMs = 2000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out waiting for a condition');
    await sleep(2);
  }
}

/**
 * What the store under test can do. Cases that need a capability are registered only when the
 * caller declares it (they are not skipped at run time: a declared capability that is missing
 * fails the case).
 */
export interface StoreCapabilities {
  /** `makeStore` returns `advance`: time moves only when the test says so (exact-timing cases). */
  controlledClock?: boolean;
  /** The store implements `subscribe()` (wake-up cases). Default true. */
  wakeUps?: boolean;
}

/** Registers nothing: used for cases whose capability the store under test does not declare. */
const notRegistered = (() => undefined) as unknown as typeof it;

export function storeContract(
  name: string,
  makeStore: () => Promise<StoreUnderTest> | StoreUnderTest,
  capabilities: StoreCapabilities = {},
): void {
  const itClock = capabilities.controlledClock ? it : notRegistered;
  const itWake = capabilities.wakeUps === false ? notRegistered : it;
  const describeClock = capabilities.controlledClock
    ? describe
    : (notRegistered as unknown as typeof describe);
  const describeWake =
    capabilities.wakeUps === false ? (notRegistered as unknown as typeof describe) : describe;
  const missing = (what: string): never => {
    throw new Error(
      `storeContract(${JSON.stringify(name)}): the store was declared with ${what} but has none`,
    );
  };
  let seq = 0;
  const run = Math.random().toString(36).slice(2, 8);
  const newId = () => `contract:${name}:${run}:${++seq}`;

  interface Ctx {
    store: Store;
    advance: ((ms: number) => Promise<void> | void) | undefined;
    acquire(request: Omit<AcquireRequest, 'count'> & { count?: number }): Promise<AcquireResult>;
    /** Lets time pass: exactly `ms` with a controlled clock, else a real wait of `ms`. */
    pass(ms: number): Promise<void>;
  }

  async function setup(): Promise<Ctx> {
    const made = await makeStore();
    if (made.cleanup) onTestFinished(made.cleanup);
    const { store, advance } = made;
    return {
      store,
      advance,
      acquire: async (request) =>
        await store.acquire({ ...request, count: request.count ?? request.costs.length }),
      pass: async (ms) => {
        if (advance) await advance(ms);
        else await sleep(ms);
      },
    };
  }

  // Slow rules: their answers do not change over the few ms a test takes.
  const hourly3 = rule({ limit: 3600, interval: '1h', burst: 3 }); // emission 1s, burst 3
  const hourlyWindow = rule({ limit: 3, interval: '1h', algorithm: 'fixed-window' });

  describe(`Store contract: ${name}`, () => {
    describe('admission', () => {
      it('grants the longest prefix that fits and reports why it stopped', async () => {
        const s = await setup();
        const id = newId();
        const r = await s.acquire({ id, rules: [hourly3], costs: ones(5) });
        expect(r.granted).toBe(3);
        expect(r.blocked).toBe('rate');
        expect(r.pausedUntil).toBeNull();
        expect(r.leases).toBeUndefined();
        expect(r.retryAfter).toBeGreaterThan(900);
        expect(r.retryAfter).toBeLessThanOrEqual(1000);
        expect(typeof r.now).toBe('number');
        expect(Math.abs(r.now - Date.now())).toBeLessThan(s.advance ? Number.POSITIVE_INFINITY : 60_000);
        const again = await s.acquire({ id, rules: [hourly3], costs: ones(2) });
        expect(again.granted).toBe(0);
        expect(again.blocked).toBe('rate');
      });

      it('grants everything with blocked null and retryAfter 0 when all fits', async () => {
        const s = await setup();
        const r = await s.acquire({ id: newId(), rules: [hourly3], costs: ones(3) });
        expect(r).toMatchObject({ granted: 3, retryAfter: 0, blocked: null, pausedUntil: null });
      });

      it('grants everything when there are no rules', async () => {
        const s = await setup();
        const r = await s.acquire({ id: newId(), rules: [], costs: ones(40) });
        expect(r).toMatchObject({ granted: 40, retryAfter: 0, blocked: null });
      });

      it('reads only the first `count` costs', async () => {
        const s = await setup();
        const id = newId();
        const r = await s.acquire({ id, rules: [hourly3], costs: ones(5), count: 2 });
        expect(r.granted).toBe(2);
        expect(r.blocked).toBeNull();
        const next = await s.acquire({ id, rules: [hourly3], costs: ones(5), count: 2 });
        expect(next.granted).toBe(1);
      });

      it('counts cost: a job fits only when the whole cost fits', async () => {
        const s = await setup();
        const id = newId();
        const r = await s.acquire({ id, rules: [hourly3], costs: [2, 2, 1] });
        // 2 fits; the second 2 does not, and the 1 behind it is not granted either (a prefix).
        expect(r.granted).toBe(1);
        expect(r.blocked).toBe('rate');
        const next = await s.acquire({ id, rules: [hourly3], costs: [1] });
        expect(next.granted).toBe(1);
      });

      it('rejects costs that are not positive integers (cost units), spending nothing', async () => {
        const s = await setup();
        const id = newId();
        const slow = rule({ limit: 1, interval: '1h', burst: 3 });
        for (const bad of [0.5, 1.5, 0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
          await expect((async () => s.acquire({ id, rules: [slow], costs: [1, bad] }))()).rejects.toThrow(
            RangeError,
          );
        }
        // Nothing of the refused batches was spent.
        expect((await s.acquire({ id, rules: [slow], costs: [1, 1, 1] })).granted).toBe(3);
      });

      it('fixed window: grants up to limit units in the window', async () => {
        const s = await setup();
        const id = newId();
        const r = await s.acquire({ id, rules: [hourlyWindow], costs: [1, 2, 1] });
        expect(r.granted).toBe(2);
        const id2 = newId();
        // The whole cost must fit in what is left: 2 + 2 > 3.
        expect((await s.acquire({ id: id2, rules: [hourlyWindow], costs: [2, 2] })).granted).toBe(1);
        expect((await s.acquire({ id: id2, rules: [hourlyWindow], costs: [1] })).granted).toBe(1);
        expect(r.blocked).toBe('rate');
        expect(r.retryAfter).toBeGreaterThan(0);
        expect(r.retryAfter).toBeLessThanOrEqual(3_600_000);
      });

      it('sliding window: the whole limit at once, then nothing until units leave the window', async () => {
        const s = await setup();
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
        // The same rule as GCRA or a fixed window is another budget (another digest).
        expect(
          (
            await s.acquire({
              id,
              rules: [rule({ limit: 3, interval: '1h', algorithm: 'fixed-window' })],
              costs: [3],
            })
          ).granted,
        ).toBe(1);
      });

      it('several rules: each one binds', async () => {
        const s = await setup();
        const id = newId();
        const fast = rule({ limit: 1000, interval: '1s', burst: 2 }); // 1 unit per ms, 2 back to back
        const daily = rule({ limit: 3, interval: '1d', algorithm: 'fixed-window' });
        const first = await s.acquire({ id, rules: [fast, daily], costs: ones(5) });
        expect(first.granted).toBe(2); // the GCRA rule binds
        expect(first.retryAfter).toBeLessThanOrEqual(1);
        await s.pass(5);
        const second = await s.acquire({ id, rules: [fast, daily], costs: ones(5) });
        expect(second.granted).toBe(1); // the GCRA rule has room for 2, the window only for 1
        expect(second.blocked).toBe('rate');
        expect(second.retryAfter).toBeGreaterThan(1000); // until the day's window ends
      });

      it('retryAfter is the largest wait over the rules the job failed', async () => {
        const s = await setup();
        const id = newId();
        const a = rule({ limit: 3600, interval: '1h' }); // 1s emission
        const b = rule({ limit: 360, interval: '1h' }); // 10s emission
        const r = await s.acquire({ id, rules: [a, b], costs: ones(2) });
        expect(r.granted).toBe(1);
        expect(r.retryAfter).toBeGreaterThan(9000);
        expect(r.retryAfter).toBeLessThanOrEqual(10_000);
      });

      it('spends atomically: a refused job spends nothing on any rule', async () => {
        const s = await setup();
        const id = newId();
        const shared = rule({ limit: 2, interval: '1h', burst: 2 });
        const tight = rule({ limit: 1, interval: '1h', algorithm: 'fixed-window' });
        expect((await s.acquire({ id, rules: [shared, tight], costs: [1] })).granted).toBe(1);
        // `shared` has one unit left, `tight` none: refused, and `shared` keeps its unit.
        for (let i = 0; i < 3; i++) {
          expect((await s.acquire({ id, rules: [shared, tight], costs: [1] })).granted).toBe(0);
        }
        expect((await s.acquire({ id, rules: [shared], costs: [1] })).granted).toBe(1);
        expect((await s.acquire({ id, rules: [shared], costs: [1] })).granted).toBe(0);
      });

      it('spends atomically within a batch: the refused job and those behind it spend nothing', async () => {
        const s = await setup();
        const id = newId();
        const r = await s.acquire({ id, rules: [hourly3], costs: [1, 3, 1, 1] });
        expect(r.granted).toBe(1);
        // Two units are left: a cost-2 job fits.
        expect((await s.acquire({ id, rules: [hourly3], costs: [2] })).granted).toBe(1);
      });

      it('a batch checks each job against the state as updated by the grants before it', async () => {
        const s = await setup();
        const id = newId();
        const w = rule({ limit: 5, interval: '1h', algorithm: 'fixed-window' });
        const r = await s.acquire({ id, rules: [hourly3, w], costs: [1, 1, 1] });
        expect(r.granted).toBe(3);
        const r2 = await s.acquire({ id, rules: [w], costs: [1, 1, 1] });
        expect(r2.granted).toBe(2);
      });
    });

    describeClock('exact retry hints (controlled clock)', () => {
      const exactness = async (
        rules: StoreRule[],
        costs: number[],
        expected: { granted: number; wait: number },
      ) => {
        const s = await setup();
        if (!s.advance) return missing('a controlled clock');
        const id = newId();
        const r = await s.acquire({ id, rules, costs });
        expect(r.granted).toBe(expected.granted);
        expect(r.blocked).toBe('rate');
        expectMs(r.retryAfter, expected.wait);
        const rest = costs.slice(expected.granted, expected.granted + 1);
        // 1 µs before the hint: still refused, and the new hint is the remaining 1 µs.
        await s.advance(r.retryAfter - 0.001);
        const early = await s.acquire({ id, rules, costs: rest });
        expect(early.granted).toBe(0);
        expectMs(early.retryAfter, 0.001);
        await s.advance(0.001);
        const onTime = await s.acquire({ id, rules, costs: rest });
        expect(onTime.granted).toBe(1);
        return true;
      };

      itClock('GCRA, burst 1: the next job fits exactly retryAfter later', async () => {
        await exactness([rule({ limit: 10, interval: '1s' })], [1, 1], { granted: 1, wait: 100 });
      });

      itClock(
        'GCRA: an emission interval that does not divide evenly is rounded up to whole µs',
        async () => {
          // 1s / 3 = 333333.33µs → 333334µs.
          await exactness([rule({ limit: 3, interval: '1s' })], [1, 1], { granted: 1, wait: 333.334 });
        },
      );

      itClock('GCRA with burst and costs', async () => {
        const r = rule({ limit: 10, interval: '1s', burst: 4 }); // 100ms per unit, 400ms capacity
        // 3 + 1 fill the capacity; the next job of cost 2 needs 200ms more.
        await exactness([r], [3, 1, 2], { granted: 2, wait: 200 });
      });

      itClock('GCRA rounds the emission interval up, once per unit of cost', async () => {
        const r = rule({ limit: 3, interval: '1s', burst: 2 }); // 333334µs per unit, 666668µs capacity
        // A cost of 2 fills the capacity; one more unit waits one emission interval.
        await exactness([r], [2, 1], { granted: 1, wait: 333.334 });
      });

      itClock('fixed window: the next job fits exactly when the window ends', async () => {
        const s = await setup();
        if (!s.advance) return missing('a controlled clock');
        const id = newId();
        const w = rule({ limit: 2, interval: '1s', algorithm: 'fixed-window' });
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

      itClock('sliding window: the window follows the grants (not aligned); hints are exact', async () => {
        const s = await setup();
        if (!s.advance) return missing('a controlled clock');
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

      itClock('sliding window: sustains exactly limit per interval at the hints', async () => {
        const s = await setup();
        if (!s.advance) return missing('a controlled clock');
        const id = newId();
        const w = rule({ limit: 4, interval: '1s', algorithm: 'sliding-window' });
        let granted = 0;
        let asked = 0;
        // 3 s of saturated traffic, asking again at each hint: 4 + 4 + 4 starts, the first 4 at once.
        for (let elapsed = 0; elapsed < 3000; ) {
          const r = await s.acquire({ id, rules: [w], costs: ones(3) });
          granted += r.granted;
          asked++;
          if (r.granted === 3) continue;
          await s.advance(r.retryAfter);
          elapsed += r.retryAfter;
        }
        expect(granted).toBe(12);
        expect(asked).toBeLessThan(20);
      });

      itClock('several rules: after the largest wait every rule fits', async () => {
        const s = await setup();
        if (!s.advance) return missing('a controlled clock');
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

      itClock('GCRA: budget refills at the rule rate, never faster', async () => {
        const s = await setup();
        if (!s.advance) return missing('a controlled clock');
        const id = newId();
        const r = rule({ limit: 10, interval: '1s', burst: 5 });
        expect((await s.acquire({ id, rules: [r], costs: ones(10) })).granted).toBe(5);
        await s.advance(250); // 2.5 units back
        expect((await s.acquire({ id, rules: [r], costs: ones(10) })).granted).toBe(2);
        await s.advance(10_000); // long idle: back to a full burst, not more
        expect((await s.acquire({ id, rules: [r], costs: ones(10) })).granted).toBe(5);
      });
    });

    describe('real time (any store)', () => {
      it('the next job fits after waiting retryAfter', async () => {
        const s = await setup();
        const id = newId();
        const r = rule({ limit: 1, interval: 40 });
        const first = await s.acquire({ id, rules: [r], costs: [1, 1] });
        expect(first.granted).toBe(1);
        expect(first.retryAfter).toBeGreaterThan(0);
        expect(first.retryAfter).toBeLessThanOrEqual(40);
        await s.pass(first.retryAfter + 1);
        expect((await s.acquire({ id, rules: [r], costs: [1] })).granted).toBe(1);
      });

      it('a pause ends by itself', async () => {
        const s = await setup();
        const id = newId();
        await s.store.pause(id, 100);
        expect((await s.acquire({ id, rules: [], costs: [1] })).blocked).toBe('pause');
        await s.pass(110);
        expect((await s.acquire({ id, rules: [], costs: [1] })).granted).toBe(1);
      });
    });

    describe('pause', () => {
      it('blocks every grant and reports pausedUntil and retryAfter', async () => {
        const s = await setup();
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

      it('returns its end, now + ms', async () => {
        const s = await setup();
        const id = newId();
        const until = await s.store.pause(id, 5000);
        const r = await s.acquire({ id, rules: [], costs: [1] });
        if (s.advance) expectMs(until, r.now + 5000);
        else {
          expect(until - r.now).toBeLessThanOrEqual(5000);
          expect(until - r.now).toBeGreaterThan(4000);
        }
      });

      it('only extends: a shorter pause keeps the longer end', async () => {
        const s = await setup();
        const id = newId();
        const long = await s.store.pause(id, 60_000);
        const short = await s.store.pause(id, 1000);
        expectMs(short, long);
        const longer = await s.store.pause(id, 120_000);
        expect(longer).toBeGreaterThan(long);
        expectMs((await s.acquire({ id, rules: [], costs: [1] })).pausedUntil!, longer);
      });

      it('a paused acquisition spends nothing', async () => {
        const s = await setup();
        const id = newId();
        await s.store.pause(id, 60_000);
        for (let i = 0; i < 3; i++) await s.acquire({ id, rules: [hourly3], costs: ones(3) });
        await s.store.resume(id);
        expect((await s.acquire({ id, rules: [hourly3], costs: ones(3) })).granted).toBe(3);
      });

      it('blocks lease grants too', async () => {
        const s = await setup();
        const id = newId();
        await s.store.pause(id, 60_000);
        const r = await s.acquire({ id, rules: [], costs: [1], lease: { limit: 2, ttl: 10_000 } });
        expect(r.granted).toBe(0);
        expect(r.blocked).toBe('pause');
        expect(r.leases ?? []).toEqual([]);
      });

      it('resume() deletes it', async () => {
        const s = await setup();
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

      itClock('ends exactly at pausedUntil (controlled clock)', async () => {
        const s = await setup();
        if (!s.advance) return missing('a controlled clock');
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

    describe('leases', () => {
      const lease = { limit: 2, ttl: 60_000 };

      it('grants at most limit leases, with unique tokens and increasing fences', async () => {
        const s = await setup();
        const id = newId();
        const r = await s.acquire({ id, rules: [], costs: ones(3), lease });
        expect(r.granted).toBe(2);
        expect(r.blocked).toBe('concurrency');
        expect(r.retryAfter).toBeGreaterThan(0);
        expect(r.retryAfter).toBeLessThanOrEqual(60_000);
        expect(r.leases).toHaveLength(2);
        const [a, b] = r.leases!;
        expect(a!.token).not.toBe(b!.token);
        expect(typeof a!.token).toBe('string');
        expect(b!.fence).toBeGreaterThan(a!.fence);
        expect(Number.isSafeInteger(a!.fence)).toBe(true);
        expectMs(a!.expiresAt, r.now + 60_000);
        const full = await s.acquire({ id, rules: [], costs: [1], lease });
        expect(full).toMatchObject({ granted: 0, blocked: 'concurrency' });
      });

      it('issues one lease per granted job, even when a rule stops the batch', async () => {
        const s = await setup();
        const id = newId();
        const r = await s.acquire({
          id,
          rules: [hourly3],
          costs: ones(5),
          lease: { limit: 10, ttl: 60_000 },
        });
        expect(r.granted).toBe(3);
        expect(r.blocked).toBe('rate');
        expect(r.leases).toHaveLength(3);
        // Only 3 slots are held.
        const more = await s.acquire({ id, rules: [], costs: ones(10), lease: { limit: 10, ttl: 60_000 } });
        expect(more.granted).toBe(7);
      });

      it('a job refused for lack of a slot spends no rate budget', async () => {
        const s = await setup();
        const id = newId();
        const one = { limit: 1, ttl: 60_000 };
        const r = await s.acquire({ id, rules: [hourly3], costs: ones(3), lease: one });
        expect(r.granted).toBe(1);
        expect(r.blocked).toBe('concurrency');
        await s.store.release(id, [r.leases![0]!.token]);
        expect((await s.acquire({ id, rules: [hourly3], costs: ones(3) })).granted).toBe(2);
      });

      it('release frees only the given tokens; fences keep growing', async () => {
        const s = await setup();
        const id = newId();
        const l3 = { limit: 3, ttl: 60_000 };
        const r = await s.acquire({ id, rules: [], costs: ones(3), lease: l3 });
        const tokens = r.leases!.map((l) => l.token);
        await s.store.release(id, [tokens[0]!]);
        expect(await s.store.renew(id, tokens, 60_000)).toEqual([false, true, true]);
        const next = await s.acquire({ id, rules: [], costs: ones(2), lease: l3 });
        expect(next.granted).toBe(1);
        expect(next.leases![0]!.fence).toBeGreaterThan(r.leases![2]!.fence);
        expect(tokens).not.toContain(next.leases![0]!.token);
        await s.store.release(id, ['not-a-token']);
        await s.store.release(id, []);
        expect(await s.store.renew(id, [tokens[1]!, tokens[2]!, next.leases![0]!.token], 60_000)).toEqual([
          true,
          true,
          true,
        ]);
      });

      it('renew never resurrects a released lease, and reports unknown tokens as lost', async () => {
        const s = await setup();
        const id = newId();
        const r = await s.acquire({ id, rules: [], costs: [1], lease });
        const token = r.leases![0]!.token;
        await s.store.release(id, [token]);
        expect(await s.store.renew(id, [token, 'unknown'], 60_000)).toEqual([false, false]);
        // Still free: two slots.
        expect((await s.acquire({ id, rules: [], costs: ones(3), lease })).granted).toBe(2);
      });

      it('leases of one id do not hold slots of another', async () => {
        const s = await setup();
        const a = newId();
        const b = newId();
        const ra = await s.acquire({ id: a, rules: [], costs: ones(2), lease });
        expect(ra.granted).toBe(2);
        expect((await s.acquire({ id: b, rules: [], costs: ones(2), lease })).granted).toBe(2);
        expect((await s.acquire({ id: a, rules: [], costs: [1], lease })).granted).toBe(0);
        // Releasing everything on one id frees nothing on the other.
        await s.store.release(b, [ra.leases![0]!.token, ra.leases![1]!.token]);
        expect(await s.store.renew(a, [ra.leases![0]!.token], 60_000)).toEqual([true]);
        expect((await s.acquire({ id: a, rules: [], costs: [1], lease })).granted).toBe(0);
      });

      it('an expired lease frees its slot and is never resurrected', async () => {
        const s = await setup();
        const id = newId();
        const short = { limit: 1, ttl: 30 };
        const r = await s.acquire({ id, rules: [], costs: [1, 1], lease: short });
        expect(r.granted).toBe(1);
        expect(r.blocked).toBe('concurrency');
        expect(r.retryAfter).toBeLessThanOrEqual(30);
        await s.pass(40);
        expect(await s.store.renew(id, [r.leases![0]!.token], 60_000)).toEqual([false]);
        const next = await s.acquire({ id, rules: [], costs: [1], lease: short });
        expect(next.granted).toBe(1);
        expect(next.leases![0]!.fence).toBeGreaterThan(r.leases![0]!.fence);
      });

      it('renew extends a held lease to now + ttl', async () => {
        const s = await setup();
        const id = newId();
        const t = 300;
        const r = await s.acquire({ id, rules: [], costs: [1], lease: { limit: 1, ttl: t } });
        const token = r.leases![0]!.token;
        await s.pass(180);
        expect(await s.store.renew(id, [token], t)).toEqual([true]);
        await s.pass(180); // 360ms after the grant: held only thanks to the renewal
        const blocked = await s.acquire({ id, rules: [], costs: [1], lease: { limit: 1, ttl: t } });
        expect(blocked.blocked).toBe('concurrency');
        expect(await s.store.renew(id, [token], t)).toEqual([true]);
      });

      itClock(
        'the concurrency hint is the time until the earliest lease expires (controlled clock)',
        async () => {
          const s = await setup();
          if (!s.advance) return missing('a controlled clock');
          const id = newId();
          await s.acquire({ id, rules: [], costs: [1], lease: { limit: 2, ttl: 5000 } });
          await s.advance(1000);
          const r = await s.acquire({ id, rules: [], costs: [1, 1], lease: { limit: 2, ttl: 5000 } });
          expect(r.granted).toBe(1);
          expectMs(r.retryAfter, 4000);
          await s.advance(4000);
          expect(
            (await s.acquire({ id, rules: [], costs: [1], lease: { limit: 2, ttl: 5000 } })).granted,
          ).toBe(1);
        },
      );

      itClock(
        'fences keep growing after every lease of the id expired long ago (controlled clock)',
        async () => {
          const s = await setup();
          if (!s.advance) return missing('a controlled clock');
          const id = newId();
          const r = await s.acquire({ id, rules: [], costs: ones(5), lease: { limit: 5, ttl: 1000 } });
          const last = r.leases![4]!.fence;
          await s.advance(86_400_000 * 3);
          const later = await s.acquire({ id, rules: [], costs: [1], lease: { limit: 5, ttl: 1000 } });
          expect(later.leases![0]!.fence).toBeGreaterThan(last);
        },
      );
    });

    // Rule sets and rule changes (valve.setRules()): self-contained, they use only `rule`, `ones`
    // and `setup` above.
    describe('rule sets and rule changes', () => {
      const fiveHourly = rule({ limit: 5, interval: '1h', algorithm: 'fixed-window' });

      it('records the rule set of an id and answers `recorded` when another set was recorded', async () => {
        const s = await setup();
        const id = newId();
        const first = await s.acquire({ id, rules: [hourlyWindow], costs: [1], record: hourlyWindow.digest });
        expect(first.recorded).toBeUndefined();
        const same = await s.acquire({ id, rules: [hourlyWindow], costs: [1], record: hourlyWindow.digest });
        expect(same.recorded).toBeUndefined();
        const other = await s.acquire({ id, rules: [fiveHourly], costs: [1], record: fiveHourly.digest });
        expect(other.recorded).toEqual([hourlyWindow.digest]);
        // The latest set is the one recorded now.
        const back = await s.acquire({ id, rules: [hourlyWindow], costs: [1], record: hourlyWindow.digest });
        expect(back.recorded).toEqual([fiveHourly.digest]);
        // Without `record`, nothing is compared.
        expect((await s.acquire({ id, rules: [fiveHourly], costs: [1] })).recorded).toBeUndefined();
      });

      it('converts: a new rule counts what the previous rules prove was spent in its window', async () => {
        const s = await setup();
        const id = newId();
        expect((await s.acquire({ id, rules: [hourlyWindow], costs: ones(3) })).granted).toBe(3);
        const changed = await s.acquire({
          id,
          rules: [fiveHourly],
          previous: [hourlyWindow],
          convert: true,
          costs: ones(5),
        });
        // 3 of fiveHourly's 5 are spent already, and hourlyWindow (still spent) has none left.
        expect(changed.granted).toBe(0);
        expect(changed.blocked).toBe('rate');
        // Once the old rule is dropped, the new one has 5 − 3 left in this window.
        expect((await s.acquire({ id, rules: [fiveHourly], costs: ones(5) })).granted).toBe(2);
      });

      it("spends the previous rules too, and a cost above a previous rule's largest does not fit (no error)", async () => {
        const s = await setup();
        const id = newId();
        const big = rule({ limit: 10, interval: '1h', algorithm: 'fixed-window' });
        const r = await s.acquire({ id, rules: [big], previous: [hourlyWindow], costs: [2, 5] });
        expect(r.granted).toBe(1);
        expect(r.blocked).toBe('rate');
        expect((await s.acquire({ id, rules: [hourlyWindow], costs: ones(2) })).granted).toBe(1);
      });
    });

    describe('isolation and sharing', () => {
      it('ids are isolated: budget, pause and slots', async () => {
        const s = await setup();
        const a = newId();
        const b = newId();
        expect((await s.acquire({ id: a, rules: [hourly3], costs: ones(4) })).granted).toBe(3);
        expect((await s.acquire({ id: b, rules: [hourly3], costs: ones(4) })).granted).toBe(3);
        await s.store.pause(a, 60_000);
        expect((await s.acquire({ id: b, rules: [], costs: [1] })).granted).toBe(1);
        await s.store.resume(b);
        expect((await s.acquire({ id: a, rules: [], costs: [1] })).blocked).toBe('pause');
      });

      it('different rules (digests) on one id do not share state', async () => {
        const s = await setup();
        const id = newId();
        const r1 = rule({ limit: 3600, interval: '1h', burst: 3 });
        const r2 = rule({ limit: 3601, interval: '1h', burst: 3 });
        const r3 = rule({ limit: 3600, interval: '1h', burst: 3, algorithm: 'gcra' });
        expect(r1.digest).not.toBe(r2.digest);
        expect((await s.acquire({ id, rules: [r1], costs: ones(4) })).granted).toBe(3);
        expect((await s.acquire({ id, rules: [r2], costs: ones(4) })).granted).toBe(3);
        expect((await s.acquire({ id, rules: [r3], costs: ones(4) })).granted).toBe(0); // same as r1
      });

      it('the same rule on the same id is one budget for every valve using the store', async () => {
        const s = await setup();
        const id = newId();
        const valveA = [rule({ limit: 3600, interval: '1h', burst: 3 })];
        const valveB = [rule({ limit: 3600, interval: 3_600_000, burst: 3 })];
        expect((await s.acquire({ id, rules: valveA, costs: ones(2) })).granted).toBe(2);
        expect((await s.acquire({ id, rules: valveB, costs: ones(2) })).granted).toBe(1);
        expect((await s.acquire({ id, rules: valveA, costs: [1] })).granted).toBe(0);
      });

      it('a rule shared by two rule sets is spent by both', async () => {
        const s = await setup();
        const id = newId();
        const shared = rule({ limit: 3, interval: '1h', algorithm: 'fixed-window' });
        const other = rule({ limit: 100, interval: '1h', algorithm: 'fixed-window' });
        expect((await s.acquire({ id, rules: [shared, other], costs: ones(2) })).granted).toBe(2);
        expect((await s.acquire({ id, rules: [shared], costs: ones(2) })).granted).toBe(1);
      });
    });

    describeWake('wake-ups', () => {
      itWake(
        'subscribers hear pause, resume and release for their id only, until they unsubscribe',
        async () => {
          const s = await setup();
          if (typeof s.store.subscribe !== 'function') return missing('wake-ups');
          const id = newId();
          const other = newId();
          const events: WakeEvent[] = [];
          const foreign: WakeEvent[] = [];
          const unsubscribe = s.store.subscribe(id, (e) => events.push(e));
          const unsubscribeOther = s.store.subscribe(other, (e) => foreign.push(e));
          onTestFinished(unsubscribeOther);
          if (s.store.notifies === false) await waitFor(() => s.store.notifies === true, 5000);
          // A subscription may take a moment to become active (e.g. SSUBSCRIBE on a cluster), and
          // wake-ups sent before that are lost (they are hints). Probe with resume() until one arrives.
          const probeEnd = Date.now() + 5000;
          while (!events.some((e) => e.type === 'resume') || !foreign.some((e) => e.type === 'resume')) {
            if (Date.now() > probeEnd) throw new Error('no wake-up arrived within 5s of subscribing');
            await s.store.resume(id);
            await s.store.resume(other);
            await sleep(20);
          }
          await sleep(30); // late duplicates of the probe
          events.length = 0;
          foreign.length = 0;

          const until = await s.store.pause(id, 60_000);
          await waitFor(() => events.length >= 1);
          expect(events[0]!.type).toBe('pause');
          expectMs((events[0] as { until: number }).until, until);

          await s.store.resume(id);
          await waitFor(() => events.length >= 2);
          expect(events[1]).toEqual({ type: 'resume' });

          const r = await s.acquire({ id, rules: [], costs: [1], lease: { limit: 1, ttl: 60_000 } });
          await s.store.release(id, [r.leases![0]!.token]);
          await waitFor(() => events.length >= 3);
          expect(events[2]).toEqual({ type: 'release' });

          unsubscribe();
          unsubscribe(); // idempotent
          await s.store.pause(id, 1000);
          await sleep(30);
          expect(events).toHaveLength(3);
          expect(foreign).toEqual([]);
        },
      );

      itWake('listening(id), where present, turns true once wake-ups for the id are delivered', async () => {
        const s = await setup();
        if (typeof s.store.subscribe !== 'function') return missing('wake-ups');
        if (typeof s.store.listening !== 'function') return;
        const id = newId();
        expect(s.store.listening(id)).toBe(false);
        const events: WakeEvent[] = [];
        const unsubscribe = s.store.subscribe(id, (e) => events.push(e));
        await waitFor(() => s.store.listening!(id), 5000);
        // Once it says so, the next wake-up arrives: no probing with resume() needed.
        await s.store.pause(id, 1000);
        await waitFor(() => events.some((e) => e.type === 'pause'), 2000);
        unsubscribe();
        expect(s.store.listening(id)).toBe(false);
      });
    });
  });
}
