/**
 * Over Redis, two valves of one id on two connections (two processes, as far as the store can
 * tell): A pauses for long, B then pauses for less. Redis answers B's write with A's end. B
 * learns A's pause as another process's: stats() names it 'remote' with A's end, B emits one
 * 'remote' 'pause' event for it and no 'manual' one, and its jobs wait for A's end. B's own
 * longer pause stays 'manual' and costs no store call beyond its write.
 */
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import { createValve, type Valve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { countingAcquires } from '../helpers/spy-store.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) {
    try {
      await fn();
    } catch {
      // best effort
    }
  }
});

const RULES = { limit: 10, interval: '1s' } as const;

function connection(): Redis {
  const c = new Redis(sharedRedis().url);
  c.on('error', () => {});
  cleanups.push(() => c.disconnect());
  return c;
}

/** Valves A and B of one id, each with its own connection; B's store counts its acquisitions. */
function pair(options: { testClock?: FakeClock; bClock?: Clock } = {}) {
  const prefix = uniquePrefix('rlonger');
  const store = (): Store =>
    redisStore({
      client: connection(),
      prefix,
      ...(options.testClock ? { unsafeTestClock: options.testClock } : {}),
    });
  const counted = countingAcquires(store());
  const make = (s: Store, clock: Clock | undefined): Valve => {
    const v = createValve({ id: 'longer', rules: RULES, store: s, ...(clock ? { clock } : {}) });
    cleanups.push(() => v.close());
    return v;
  };
  const a = make(store(), options.testClock);
  const b = make(counted.store, options.bClock ?? options.testClock);
  const events: { source: string; until: number }[] = [];
  b.on('pause', (e) => events.push({ source: e.source, until: e.until }));
  return { a, b, events, acquires: counted.acquires };
}

/** A's pause, with its end as the store recorded it (A's own 'pause' event). */
async function pauseA(a: Valve, ms: number): Promise<number> {
  const ended = new Promise<number>((resolve) => a.once('pause', (e) => resolve(e.until)));
  await a.pause(ms);
  return ended;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('over Redis, a pause() inside another valve’s longer pause (real clock)', () => {
  for (const first of ['pause', 'job'] as const) {
    it(`B's first store call is its ${first}: 'remote' with A's end, no 'manual' event, jobs wait for A's end`, async () => {
      const { a, b, events } = pair();
      if (first === 'job') await b.run(() => 'ran');
      const aEnd = await pauseA(a, 1500);
      await sleep(100);
      await b.pause(200);
      expect(events).toEqual([{ source: 'remote', until: aEnd }]);
      const s = b.stats();
      expect(s.pausedBy?.source).toBe('remote');
      // A's end on B's clock: the same host's clock, off by the estimate's error at most.
      expect(Math.abs(s.pausedUntil! - aEnd)).toBeLessThan(50);
      const startedAt = await b.run(() => Date.now());
      expect(startedAt).toBeGreaterThanOrEqual(aEnd - 5);
      expect(events).toHaveLength(1);
    });
  }

  it("B's own longer pause: 'manual', and no store call besides its write", async () => {
    const { a, b, events, acquires } = pair();
    await pauseA(a, 300);
    await b.pause(1000);
    expect(events.map((e) => e.source)).toEqual(['manual']);
    expect(b.stats().pausedBy?.source).toBe('manual');
    expect(acquires()).toBe(0);
  });
});

describe('over Redis, on a controlled clock, with B’s clock 10 minutes off the server’s', () => {
  for (const skew of [-600_000, 600_000]) {
    it(`skew ${skew / 60_000} min: B reads the server's clock once and knows A's pause as 'remote'`, async () => {
      const clock = new FakeClock();
      const bClock: Clock = {
        now: () => clock.now() + skew,
        setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
        clearTimeout: (handle) => clock.clearTimeout(handle),
      };
      const { a, b, events, acquires } = pair({ testClock: clock, bClock });
      const aEnd = await pauseA(a, 3000);
      await clock.tickAsync(300);
      await b.pause(500);
      expect(events).toEqual([{ source: 'remote', until: aEnd }]);
      expect(b.stats().pausedBy?.source).toBe('remote');
      // Redis answers while the controlled clock stands still: the estimate is exact.
      expect(b.stats().pausedUntil! - skew).toBe(aEnd);
      expect(acquires()).toBe(1);
    });
  }
});
