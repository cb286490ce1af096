/**
 * A pause() that meets another valve's longer pause on the store: the store answers the write
 * with the longer pause's end. The valve learns that pause as another process's (stats() names
 * it 'remote' with its end; one 'remote' 'pause' event if it did not know it yet) and emits no
 * 'manual' event: its own shorter pause applied nothing. Whether the answer is its own end or a
 * longer one, the valve tells from the store's clock (store-clock.ts): from its estimate when an
 * acquisition told it, else from one read of the store's clock.
 */
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import type { PauseEvent } from '../../src/events.js';
import { createValve, type Valve } from '../../src/index.js';
import { memoryStore } from '../../src/stores/memory.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { spyStore } from '../helpers/spy-store.js';

const RULES = { limit: 10, interval: '1s' } as const;

/** `skew` ms off the store's clock, on the same timers. */
function skewed(fake: FakeClock, skew: number): Clock {
  return {
    now: () => fake.now() + skew,
    setTimeout: (fn, ms) => fake.setTimeout(fn, ms),
    clearTimeout: (handle) => fake.clearTimeout(handle),
  };
}

function recorder(valve: Valve, t0: number): { source: string; until: number }[] {
  const events: { source: string; until: number }[] = [];
  valve.on('pause', (e: PauseEvent) => events.push({ source: e.source, until: e.until - t0 }));
  return events;
}

/** B's view of the pause: its end on the store's clock (B's clock is `skew` ms off it), relative to t0, and its source. */
function view(b: Valve, skew: number, t0: number) {
  const s = b.stats();
  return {
    pausedUntil: s.pausedUntil === null ? null : s.pausedUntil - skew - t0,
    source: s.pausedBy?.source,
  };
}

describe("a pause() inside another valve's longer pause", () => {
  for (const answers of ['synchronous', 'asynchronous'] as const) {
    for (const first of ['pause', 'job'] as const) {
      for (const skew of [0, -600_000, 600_000]) {
        it(`${answers} store, B's first store call is its ${first}, B's clock off by ${skew / 60_000} min: 'remote', A's end, no 'manual' event`, async () => {
          const fake = new FakeClock();
          const inner = memoryStore({ clock: fake });
          const spy = spyStore(inner, fake);
          if (answers === 'asynchronous') spy.async = { delay: 5, decideAt: 2 };
          const clock = skewed(fake, skew);
          // A writes to the same store through its own client (here: straight to it).
          const a = createValve({ id: 'x', rules: RULES, store: inner, clock: fake });
          const b = createValve({ id: 'x', rules: RULES, store: spy, clock });
          const t0 = fake.now();
          const events = recorder(b, t0);
          const ran = first === 'job' ? b.run(() => 'ran') : undefined;
          await fake.tickAsync(20);
          if (ran !== undefined) await expect(ran).resolves.toBe('ran');
          await a.pause(3000);
          await fake.tickAsync(300);
          const bPaused = b.pause(500);
          await fake.tickAsync(20);
          await bPaused;
          // On B's clock, as B estimates the store's: asynchronous answers leave half their 5 ms round trip.
          const seen = view(b, skew, t0);
          expect(seen.source).toBe('remote');
          expect(Math.abs(seen.pausedUntil! - 3020)).toBeLessThanOrEqual(answers === 'synchronous' ? 0 : 3);
          expect(events).toEqual([{ source: 'remote', until: 3020 }]);
          // B holds its jobs until A's end, and announces nothing more.
          let startedAt: number | undefined;
          const job = b.run(() => {
            startedAt = fake.now() - t0;
          });
          await fake.tickAsync(3000);
          await job;
          expect(startedAt).toBeGreaterThanOrEqual(3020);
          expect(events).toHaveLength(1);
          await a.close();
          await b.close();
        });
      }
    }
  }

  it('deterministic: shared memoryStore, A pauses 3 s, B pauses 0.5 s 300 ms later', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'x', rules: RULES, store, clock });
    const b = createValve({ id: 'x', rules: RULES, store, clock });
    const t0 = clock.now();
    const events = recorder(b, t0);
    await a.pause(3000);
    await clock.tickAsync(300);
    await b.pause(500);
    expect(view(b, 0, t0)).toEqual({ pausedUntil: 3000, source: 'remote' });
    expect(events).toEqual([{ source: 'remote', until: 3000 }]);
    // B already knew A's pause: a shorter pause inside it emits nothing and keeps the cause.
    await b.pause(1000);
    expect(events).toHaveLength(1);
    expect(b.stats().pausedBy?.source).toBe('remote');
    // A longer one is B's own.
    await b.pause(5000);
    expect(events).toEqual([
      { source: 'remote', until: 3000 },
      { source: 'manual', until: 5300 },
    ]);
    expect(b.stats().pausedBy?.source).toBe('manual');
    await a.close();
    await b.close();
  });

  it("a pause that is the valve's own costs no store call beyond its write (first call or not)", async () => {
    const clock = new FakeClock();
    for (const answers of [null, { delay: 5, decideAt: 2 }] as const) {
      const inner = memoryStore({ clock });
      const store = spyStore(inner, clock);
      store.async = answers;
      const a = createValve({ id: 'x', rules: RULES, store: inner, clock });
      const b = createValve({ id: 'x', rules: RULES, store, clock });
      const events = recorder(b, 0);
      await a.pause(500);
      const paused = b.pause(2000);
      await clock.tickAsync(10);
      await paused;
      expect(store.calls.map((c) => c.op)).toEqual(['pause']);
      expect(events.map((e) => e.source)).toEqual(['manual']);
      expect(b.stats().pausedBy?.source).toBe('manual');
      await a.close();
      await b.close();
    }
  });

  it("observe()'s pause inside a longer one: no 'retry-after' event, the pause is 'remote'", async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'x', rules: RULES, store, clock });
    const b = createValve({ id: 'x', rules: RULES, store, clock });
    const t0 = clock.now();
    const events = recorder(b, t0);
    await a.pause(60_000);
    b.observe({ status: 429, headers: { 'retry-after': '2' } });
    await clock.tickAsync(1);
    expect(events).toEqual([{ source: 'remote', until: 60_000 }]);
    expect(b.stats().pausedBy?.source).toBe('remote');
    await a.close();
    await b.close();
  });
});
