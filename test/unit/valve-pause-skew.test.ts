/**
 * A valve whose clock is off the store's (a process 10 minutes behind its Redis server) and
 * whose first act is a pause: the store's answer to the write tells its time, so the pause ends
 * when it should, not when the valve next rechecks a cached pause (30 s: PAUSE_TRUST).
 */
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import { createValve } from '../../src/index.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { storeWith } from '../helpers/spy-store.js';

/** The store's clock, and the valve's `skew` ms off it on the same timers. */
function clocks(skew: number): { fake: FakeClock; clock: Clock } {
  const fake = new FakeClock();
  const clock: Clock = {
    now: () => fake.now() + skew,
    setTimeout: (fn, ms) => fake.setTimeout(fn, ms),
    clearTimeout: (handle) => fake.clearTimeout(handle),
  };
  return { fake, clock };
}

describe('a fresh valve whose clock is off the store’s: its own pause ends on time', () => {
  for (const skew of [-600_000, 600_000]) {
    for (const answer of ['synchronous', 'asynchronous'] as const) {
      it(`clock ${skew > 0 ? 'ahead' : 'behind'} by 10 min, ${answer} store answers`, async () => {
        const { fake, clock } = clocks(skew);
        const inner = memoryStore({ clock: fake });
        const store: Store =
          answer === 'synchronous'
            ? inner
            : storeWith(inner, {
                acquire: async (r) => inner.acquire(r),
                pause: async (id, ms, by) => inner.pause(id, ms, by),
              });
        const valve = createValve({ id: 'k', store, rules: { limit: 100, interval: '1s' }, clock });
        const t0 = fake.now();
        await valve.pause('2s');
        expect(valve.stats().pausedUntil! - clock.now(), 'the pause as the valve sees it').toBeCloseTo(
          2000,
          0,
        );
        let startedAfter: number | undefined;
        const job = valve.run(() => {
          startedAfter = fake.now() - t0;
        });
        await fake.tickAsync(1990);
        expect(startedAfter, 'not before the pause ends').toBeUndefined();
        await fake.tickAsync(60);
        expect(startedAfter, 'at the pause’s end').toBeDefined();
        expect(startedAfter!).toBeGreaterThanOrEqual(2000);
        await job;
        await valve.close();
      });
    }
  }
});
