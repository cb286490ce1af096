import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isMainThread } from 'node:worker_threads';
import { afterAll, describe, expect, it } from 'vitest';
import { type Clock, lowerTimerSlack, systemClock, TIMER_SLACK_NS } from '../../src/clock.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';

const dir = mkdtempSync(join(tmpdir(), 'valve-slack-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A timerslack_ns stand-in holding `text`. */
function slackFile(name: string, text: string): string {
  const file = join(dir, name);
  writeFileSync(file, text);
  return file;
}

describe('lowerTimerSlack: a thread’s timer slack, lowered to 1 µs', () => {
  it('lowers the kernel’s default (50 µs) to TIMER_SLACK_NS', () => {
    const file = slackFile('default', '50000\n');
    expect(lowerTimerSlack(file)).toBe(true);
    expect(readFileSync(file, 'utf8')).toBe(String(TIMER_SLACK_NS));
    expect(TIMER_SLACK_NS).toBe(1000);
  });

  it('never raises a slack already lower, or equal', () => {
    for (const text of ['500\n', '1000\n', '1\n']) {
      const file = slackFile(`low-${text.trim()}`, text);
      expect(lowerTimerSlack(file)).toBe(false);
      expect(readFileSync(file, 'utf8')).toBe(text);
    }
  });

  it('leaves alone what it cannot read as a number', () => {
    const file = slackFile('garbage', 'not a number\n');
    expect(lowerTimerSlack(file)).toBe(false);
    expect(readFileSync(file, 'utf8')).toBe('not a number\n');
  });

  it('a missing file or one it cannot write is no error (old kernels, a read-only /proc, other systems)', () => {
    expect(lowerTimerSlack(join(dir, 'missing', 'timerslack_ns'))).toBe(false);
    expect(lowerTimerSlack(dir)).toBe(false); // a directory: reading fails
  });
});

const procSlack = '/proc/self/timerslack_ns';
const canCheck = process.platform === 'linux' && isMainThread && existsSync(procSlack);
const readSlack = (): number => Number(readFileSync(procSlack, 'utf8'));

/** systemClock's methods, but not systemClock: a valve on it is not on the real clock as far as sharpening goes. */
const wrapped: Clock = {
  now: () => systemClock.now(),
  setTimeout: (fn, ms) => systemClock.setTimeout(fn, ms),
  clearTimeout: (h) => systemClock.clearTimeout(h),
};

// One process (vitest's forks pool): the order matters, the slack is lowered once and stays.
describe.runIf(canCheck && readSlack() > TIMER_SLACK_NS)(
  'a valve on the real clock, this process’s main thread',
  () => {
    it('a rule that absorbs a late start, precision spin, or another clock: the slack is left alone', async () => {
      const before = readSlack();
      const valves = [
        createValve({
          id: 'loose',
          rules: [{ limit: 1000, interval: 1000, burst: 10 }],
          store: memoryStore(),
        }),
        createValve({
          id: 'spin',
          rules: [{ limit: 1000, interval: 1000 }],
          store: memoryStore(),
          precision: 'spin',
        }),
        createValve({
          id: 'other-clock',
          rules: [{ limit: 1000, interval: 1000 }],
          store: memoryStore({ clock: wrapped }),
          clock: wrapped,
        }),
      ];
      for (const valve of valves) await valve.run(() => {});
      expect(readSlack()).toBe(before);
      await Promise.all(valves.map((v) => v.close()));
    });

    it('setRules() to a burst-1 rule under the default precision lowers it to 1 µs', async () => {
      const valve = createValve({
        id: 'tight-later',
        rules: [{ limit: 1000, interval: 1000, burst: 10 }],
        store: memoryStore(),
      });
      expect(readSlack()).toBeGreaterThan(TIMER_SLACK_NS);
      valve.setRules([{ limit: 1000, interval: 1000 }]);
      expect(readSlack()).toBe(TIMER_SLACK_NS);
      await valve.close();
    });

    it('a burst-1 valve created afterwards leaves it so and keeps its rule', async () => {
      const valve = createValve({
        id: 'tight',
        rules: [{ limit: 1000, interval: 1000 }],
        store: memoryStore(),
      });
      // 5 jobs at 1000/s with burst 1 span at least 4 ms (the first job may start a few µs after
      // its grant, so its time is only near the first slot's).
      const starts: number[] = [];
      await Promise.all(
        Array.from({ length: 5 }, () => valve.run(() => void starts.push(performance.now()))),
      );
      expect(starts.at(-1)! - starts[0]!).toBeGreaterThanOrEqual(4 - 0.1);
      expect(readSlack()).toBe(TIMER_SLACK_NS);
      await valve.close();
    });
  },
);
