import { afterEach, describe, expect, it, vi } from 'vitest';
import { MAX_TIMER_DELAY_MS, systemClock } from '../../src/clock.js';
import { createValve } from '../../src/valve.js';

const DAY = 86_400_000;

/** Records the delays the clock asks Node's setTimeout for, and the callbacks, without arming them. */
function captureTimers() {
  const delays: number[] = [];
  const callbacks: (() => void)[] = [];
  const spy = vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: () => void, ms?: number) => {
    delays.push(ms ?? 0);
    callbacks.push(fn);
    return { ref() {}, unref() {}, hasRef: () => false } as unknown as NodeJS.Timeout;
  }) as typeof setTimeout);
  const clearSpy = vi.spyOn(globalThis, 'clearTimeout').mockImplementation(() => {});
  const restore = () => {
    spy.mockRestore();
    clearSpy.mockRestore();
  };
  return { delays, callbacks, restore };
}

function collectWarnings(): { warnings: string[]; stop: () => void } {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  return { warnings, stop: () => process.off('warning', onWarning) };
}

describe('systemClock: waits longer than Node’s longest timer (2^31 − 1 ms)', () => {
  afterEach(() => vi.restoreAllMocks());

  for (const kind of ['setTimeout', 'setPreciseTimeout'] as const) {
    it(`${kind} of 30 days sleeps in chunks of at most 2^31 − 1 ms, never a 1 ms loop`, () => {
      const timers = captureTimers();
      const fn = vi.fn();
      try {
        const handle = systemClock[kind]!(fn, 30 * DAY);
        expect(timers.delays).toHaveLength(1);
        expect(timers.delays[0]).toBe(MAX_TIMER_DELAY_MS);
        // The chunk "fires" long before the target (here: at once): the timer re-arms a whole
        // chunk again instead of a clamped 1 ms, and the callback does not run early.
        timers.callbacks[0]!();
        expect(fn).not.toHaveBeenCalled();
        expect(timers.delays).toHaveLength(2);
        expect(timers.delays[1]).toBe(MAX_TIMER_DELAY_MS);
        systemClock.clearTimeout(handle);
      } finally {
        timers.restore();
      }
    });
  }

  it('a wait a little over the limit takes one whole chunk, then the rest', () => {
    const timers = captureTimers();
    try {
      const handle = systemClock.setTimeout(() => {}, MAX_TIMER_DELAY_MS + 10 * DAY);
      expect(timers.delays).toEqual([MAX_TIMER_DELAY_MS]);
      systemClock.clearTimeout(handle);
    } finally {
      timers.restore();
    }
  });

  it('a valve paused for 30 days on the real clock does not wake up in a loop or warn', async () => {
    const { warnings, stop } = collectWarnings();
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const valve = createValve({ id: 'long-pause', rules: { limit: 10, interval: '1s' } });
    try {
      await valve.pause('30d');
      const job = valve.run(() => 'ran', { maxWait: '40d' });
      job.catch(() => {});
      const before = spy.mock.calls.length;
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => globalThis.setTimeout(resolve, 30));
      // One timer for the pause (plus the test's own 30 ms timer); the old clamp re-armed every
      // millisecond (~30 calls here) with a TimeoutOverflowWarning each time.
      expect(spy.mock.calls.length - before).toBeLessThanOrEqual(3);
      expect(spy.mock.calls.every((call) => (call[1] ?? 0) <= MAX_TIMER_DELAY_MS)).toBe(true);
      expect(valve.stats().started).toBe(0);
      expect(warnings).not.toContain('TimeoutOverflowWarning');
    } finally {
      await valve.close();
      stop();
    }
  });
});

describe('systemClock: a plain timer does not oversleep a whole millisecond for a fraction of one', () => {
  afterEach(() => vi.restoreAllMocks());

  it('a wait just over whole milliseconds sleeps those, then finishes on event-loop turns; a longer fraction rounds up', () => {
    const timers = captureTimers();
    const immediates: (() => void)[] = [];
    const immediate = vi.spyOn(globalThis, 'setImmediate').mockImplementation(((fn: () => void) => {
      immediates.push(fn);
      return {} as NodeJS.Immediate;
    }) as unknown as typeof setImmediate);
    let now = 1_000_000;
    const perf = vi.spyOn(performance, 'now').mockImplementation(() => now - performance.timeOrigin);
    try {
      const fn = vi.fn();
      systemClock.setTimeout(fn, 5.1);
      // 5 ms asleep, not 6: at most 0.25 ms is left for the turns.
      expect(timers.delays).toEqual([5]);
      // Node's timer fires at 5.04 ms: 0.06 ms left, checked on the next turns, never early.
      now += 5.04;
      timers.callbacks[0]!();
      expect(fn).not.toHaveBeenCalled();
      expect(immediates).toHaveLength(1);
      expect(timers.delays).toHaveLength(1);
      now += 0.05;
      immediates[0]!();
      expect(fn).not.toHaveBeenCalled();
      now += 0.02;
      immediates[1]!();
      expect(fn).toHaveBeenCalledTimes(1);

      // 5.3 ms: the fraction is too long to spend on turns, so the timer sleeps 6 ms.
      systemClock.setTimeout(() => {}, 5.3);
      expect(timers.delays.at(-1)).toBe(6);
      // A whole-millisecond wait is unchanged.
      systemClock.setTimeout(() => {}, 3);
      expect(timers.delays.at(-1)).toBe(3);
      // A timer that fired early with 0.6 ms left sleeps one more millisecond (no long turns).
      const early = vi.fn();
      systemClock.setTimeout(early, 2);
      const before = immediates.length;
      now += 1.4;
      timers.callbacks.at(-1)!();
      expect(timers.delays.at(-1)).toBe(1);
      expect(immediates).toHaveLength(before);
      expect(early).not.toHaveBeenCalled();
    } finally {
      perf.mockRestore();
      immediate.mockRestore();
      timers.restore();
    }
  });
});
