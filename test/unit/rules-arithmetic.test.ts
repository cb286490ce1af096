import { describe, expect, it } from 'vitest';
import { windowCount, windowEnd, windowIndex, windowWait } from '../../src/rules/fixed-window.js';
import { gcraCharge, gcraIncrement, gcraNext, gcraWait } from '../../src/rules/gcra.js';
import { MAX_SLIDING_LIMIT, normalizeRule, type Rule } from '../../src/rules/rule.js';
import {
  type SlidingState,
  slidingAppend,
  slidingEnd,
  slidingExpire,
  slidingWait,
} from '../../src/rules/sliding-window.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';

describe('GCRA arithmetic', () => {
  it('increment is cost × emission, rounded up to whole µs', () => {
    expect(gcraIncrement(1, 100_000)).toBe(100_000);
    expect(gcraIncrement(3, 333_334)).toBe(1_000_002);
    expect(gcraIncrement(0.5, 333_334)).toBe(166_667);
    expect(gcraIncrement(0.25, 333_334)).toBe(83_334); // 83333.5 → 83334
    expect(gcraIncrement(0.1, 3)).toBe(1); // 0.30000000000000004 → 1
  });

  it('an interval is rounded up to whole µs, never down (a shorter one would admit more)', () => {
    expect(normalizeRule({ limit: 1, interval: 1.0004 }, 'rules').intervalUs).toBe(1001);
    expect(normalizeRule({ limit: 1, interval: 1000 / 3 }, 'rules').intervalUs).toBe(333_334);
    expect(normalizeRule({ limit: 1, interval: 0.0001 }, 'rules').intervalUs).toBe(1);
    // Whole µs stay as they are, float error aside.
    expect(normalizeRule({ limit: 3, interval: 0.1 + 0.2 }, 'rules').intervalUs).toBe(300);
    expect(normalizeRule({ limit: 2, interval: 1.001 }, 'rules').intervalUs).toBe(1001);
    expect(normalizeRule({ limit: 10, interval: '1.5s' }, 'rules').digest).toBe('g10.1500000.1');
    expect(
      normalizeRule({ limit: 1, interval: 1.0004, algorithm: 'sliding-window' }, 'rules').intervalUs,
    ).toBe(1001);
  });

  it('next tat starts from max(tat, now)', () => {
    expect(gcraNext(0, 1000, 10)).toBe(1010); // fresh / expired state counts as now
    expect(gcraNext(1500, 1000, 10)).toBe(1510);
    expect(gcraNext(1000, 1000, 10)).toBe(1010);
  });

  it('wait is 0 exactly when next − now ≤ burst × emission', () => {
    // emission 100, burst 3 → capacity 300
    expect(gcraWait(1300, 1000, 3, 100)).toBe(0); // = capacity: fits
    expect(gcraWait(1301, 1000, 3, 100)).toBe(1); // 1µs over: waits 1µs
    expect(gcraWait(1100, 1000, 3, 100)).toBe(0);
    expect(gcraWait(1700, 1000, 3, 100)).toBe(400);
  });

  it('the wait is exact: after it, the same job fits; 1µs before, it does not', () => {
    const tat = 5_000;
    const now = 1_000;
    const inc = gcraIncrement(2, 100);
    const wait = gcraWait(gcraNext(tat, now, inc), now, 3, 100);
    expect(wait).toBe(5_000 + 200 - 1_000 - 300);
    expect(gcraWait(gcraNext(tat, now + wait, inc), now + wait, 3, 100)).toBe(0);
    expect(gcraWait(gcraNext(tat, now + wait - 1, inc), now + wait - 1, 3, 100)).toBe(1);
  });

  it('burst 1: back-to-back unit jobs are exactly one emission apart', () => {
    const rule = normalizeRule({ limit: 3, interval: '1s' }, 'r');
    expect(rule.emissionUs).toBe(333_334);
    let tat = 0;
    let now = 1_000_000;
    const starts: number[] = [];
    for (let i = 0; i < 5; i++) {
      const next = gcraNext(tat, now, gcraIncrement(1, rule.emissionUs));
      const wait = gcraWait(next, now, rule.burst, rule.emissionUs);
      if (wait > 0) {
        now += wait;
        i--;
        continue;
      }
      tat = next;
      starts.push(now);
    }
    expect(starts.slice(1).map((s, i) => s - starts[i]!)).toEqual([333_334, 333_334, 333_334, 333_334]);
  });
});

describe('fixed-window arithmetic', () => {
  it('windows are aligned on the clock: [k × I, (k + 1) × I)', () => {
    expect(windowIndex(0, 1000)).toBe(0);
    expect(windowIndex(999, 1000)).toBe(0);
    expect(windowIndex(1000, 1000)).toBe(1);
    expect(windowEnd(1, 1000)).toBe(2000);
  });

  it('windowIndex is exact near the edges for large epoch µs', () => {
    const I = 3_600_000_000; // 1h
    for (const k of [472_222, 472_223, 1_000_000]) {
      expect(windowIndex(k * I, I)).toBe(k);
      expect(windowIndex(k * I - 1, I)).toBe(k - 1);
    }
    const odd = 333_333;
    const now = 1_700_000_000_000_000;
    const k = windowIndex(now, odd);
    expect(k * odd).toBeLessThanOrEqual(now);
    expect((k + 1) * odd).toBeGreaterThan(now);
  });

  it('a state of another window counts as 0', () => {
    expect(windowCount(5, 3, 5)).toBe(3);
    expect(windowCount(4, 3, 5)).toBe(0);
  });

  it('a job fits when count + cost ≤ limit; otherwise it waits for the window end', () => {
    expect(windowWait(2, 1, 3, 7, 1000, 7_250)).toBe(0);
    expect(windowWait(2, 2, 3, 7, 1000, 7_250)).toBe(750);
    expect(windowWait(3, 0.5, 3, 7, 1000, 7_999)).toBe(1);
    expect(windowWait(2.5, 0.5, 3, 7, 1000, 7_999)).toBe(0);
  });
});

describe('sliding-window arithmetic', () => {
  const fresh = (): SlidingState => ({ log: [], head: 0, sum: 0 });

  it('an entry counts while t > now − interval; the state ends one interval after the newest', () => {
    const s = fresh();
    slidingAppend(s, 1000, 2);
    slidingAppend(s, 1500, 1);
    expect(s.sum).toBe(3);
    expect(slidingEnd(s, 1000)).toBe(2500);
    slidingExpire(s, 1999, 1000); // 1000 > 999: still counts
    expect(s.sum).toBe(3);
    slidingExpire(s, 2000, 1000); // 1000 ≤ 1000: gone
    expect(s.sum).toBe(1);
    slidingExpire(s, 2500, 1000);
    expect(s).toEqual({ log: [], head: 0, sum: 0 });
  });

  it('grants at the same instant share one entry', () => {
    const s = fresh();
    slidingAppend(s, 7, 1);
    slidingAppend(s, 7, 2);
    expect(s.log).toEqual([7, 3]);
  });

  it('the wait is until the oldest entries holding `need` units have left, exactly', () => {
    const s = fresh();
    slidingAppend(s, 100, 1);
    slidingAppend(s, 300, 2);
    slidingAppend(s, 600, 1);
    // limit 4, live 4: a job of cost 2 needs 2 units to leave: entries at 100 and 300.
    expect(slidingWait(s, 2, 800, 1000)).toBe(300 + 1000 - 800);
    expect(slidingWait(s, 1, 800, 1000)).toBe(100 + 1000 - 800);
    // Only this call's own grants (not in the log yet) can make room: one interval.
    expect(slidingWait(s, 5, 800, 1000)).toBe(1000);
  });

  it('compacts the log as entries leave (memory bounded by the live entries)', () => {
    const s = fresh();
    for (let t = 0; t < 10_000; t++) {
      slidingAppend(s, t, 1);
      slidingExpire(s, t, 100);
      expect(s.sum).toBe(Math.min(t + 1, 100));
    }
    expect(s.log.length - s.head).toBe(200);
    expect(s.log.length).toBeLessThanOrEqual(2 * 200 + 128);
  });

  it('normalizeRule: digest, label, max cost; burst is GCRA-only; limit capped', () => {
    const r = normalizeRule({ limit: 200, interval: '10s', algorithm: 'sliding-window' }, 'r');
    expect(r).toMatchObject({
      algorithm: 'sliding-window',
      digest: 's200.10000000',
      label: '200 per 10000ms (sliding-window)',
      maxCost: 200,
      burst: 1,
      intervalUs: 10_000_000,
    });
    expect(() =>
      normalizeRule({ limit: 2, interval: '1s', algorithm: 'sliding-window', burst: 2 }, 'rules[0]'),
    ).toThrow(
      new TypeError("`rules[0].burst` applies only to algorithm 'gcra', got algorithm 'sliding-window'"),
    );
    expect(() =>
      normalizeRule(
        { limit: MAX_SLIDING_LIMIT + 1, interval: '1h', algorithm: 'sliding-window' },
        'rules[1]',
      ),
    ).toThrow(RangeError);
    expect(() =>
      normalizeRule(
        { limit: MAX_SLIDING_LIMIT + 1, interval: '1h', algorithm: 'sliding-window' },
        'rules[1]',
      ),
    ).toThrow(/`rules\[1\]\.limit`.*at most 10000.*'sliding-window'.*got 10001/);
    expect(
      normalizeRule({ limit: MAX_SLIDING_LIMIT, interval: '1h', algorithm: 'sliding-window' }, 'r').limit,
    ).toBe(MAX_SLIDING_LIMIT);
    expect(() => normalizeRule({ limit: 1, interval: 1, algorithm: 'sliding' }, 'r')).toThrow(
      /'gcra', 'fixed-window' or 'sliding-window', got "sliding"/,
    );
  });
});

describe("GCRA's emission interval in whole µs (docs/guarantees.md, Rate bounds)", () => {
  /** Units a saturated store grants over `minutes` of its clock, after its initial bucket. */
  function sustained(rule: Rule, cost: number, minutes: number): number {
    const r = normalizeRule(rule, 'rules');
    const clock = new FakeClock(1_700_000_000_000);
    const store = memoryStore({ clock });
    const acquire = () =>
      store.acquire({
        id: 'tpm',
        rules: [r],
        costs: new Array(1000).fill(cost),
        count: 1000,
      }) as AcquireResult;
    // Empty the bucket first.
    for (let i = 0; i < 200 && acquire().granted > 0; i++);
    let units = 0;
    const end = clock.now() + minutes * 60_000;
    while (clock.now() < end) {
      const a = acquire();
      units += a.granted * cost;
      clock.advance(Math.max(a.retryAfter, 1));
    }
    return units / minutes;
  }

  it('a GCRA rule sustains interval_µs / ceil(interval_µs / limit) units: at most one per µs', () => {
    expect(normalizeRule({ limit: 150_000_000, interval: '1m' }, 'r').emissionUs).toBe(1);
    expect(normalizeRule({ limit: 40_000_000, interval: '1m' }, 'r').emissionUs).toBe(2);
    expect(normalizeRule({ limit: 200_000, interval: '1m' }, 'r').emissionUs).toBe(300);
    // 150M tokens a minute as one GCRA rule: 60M a minute, 40 %.
    const tpm = 150_000_000;
    const perMinute = sustained({ limit: tpm, interval: '1m', burst: tpm }, 100_000, 2);
    expect(perMinute).toBeGreaterThan(0.99 * 60_000_000);
    expect(perMinute).toBeLessThanOrEqual(60_000_000 + 100_000);
  });

  it('counted in thousands, or as a fixed window, the same limit keeps all of it', () => {
    const tpm = 150_000_000;
    const inThousands = sustained({ limit: tpm / 1000, interval: '1m', burst: tpm / 1000 }, 100, 2) * 1000;
    expect(inThousands).toBeGreaterThan(0.99 * tpm);
    expect(inThousands).toBeLessThanOrEqual(tpm + 100_000);
    const fixed = sustained({ limit: tpm, interval: '1m', algorithm: 'fixed-window' }, 100_000, 2);
    expect(fixed).toBeGreaterThan(0.99 * tpm);
    expect(fixed).toBeLessThanOrEqual(tpm);
  });
});

describe('GCRA charge of a cost above the burst (a previous rule of a rule change)', () => {
  it('is the increment up to the burst, and (burst + 1) × emission above it: a wait below 2^53 µs', () => {
    expect(gcraCharge(1, 100, 3)).toBe(100);
    expect(gcraCharge(3, 100, 3)).toBe(300);
    expect(gcraCharge(4, 100, 3)).toBe(400);
    expect(gcraCharge(50, 100, 3)).toBe(400);
    // 1 per day, a cost of 2e8: (cost − burst) days would be 1.7e19 µs, beyond 2^63.
    const day = normalizeRule({ limit: 1, interval: '1d' }, 'old');
    const inc = gcraCharge(2e8, day.emissionUs, day.burst);
    expect(inc).toBe(2 * 86_400_000_000);
    const now = 1_700_000_000_000_000;
    expect(gcraWait(gcraNext(now, now, inc), now, day.burst, day.emissionUs)).toBe(86_400_000_000);
  });
});
