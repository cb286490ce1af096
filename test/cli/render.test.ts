/**
 * The command's rendering, without a server: durations for people, the live view's lines
 * (colour on a terminal) and its starts-per-second, which only state that records starts gives.
 */
import { describe, expect, it } from 'vitest';
import { human } from '../../src/cli/format.js';
import type { IdStatus, RuleStatus } from '../../src/cli/state.js';
import { startsPerSecond, watchLines, watchPlain } from '../../src/cli/watch.js';

const fixed = (left: number, windowStart: number): RuleStatus => ({
  digest: 'w100.60000000',
  rule: { limit: 100, interval: 60_000, algorithm: 'fixed-window' },
  label: '100 per 60000ms (fixed-window)',
  recorded: true,
  capacity: 100,
  left,
  nextUnitIn: 1000,
  allBackIn: 1000,
  recent: null,
  windowStart,
});

describe('human durations', () => {
  it('ms, seconds with a tenth, then minutes, hours and days', () => {
    expect(human(2)).toBe('2 ms');
    expect(human(999.2)).toBe('1000 ms');
    expect(human(12_340)).toBe('12.4 s');
    expect(human(252_000)).toBe('4m 12s');
    expect(human(2 * 3_600_000 + 5 * 60_000)).toBe('2h 05m');
    expect(human(3 * 86_400_000 + 4 * 3_600_000)).toBe('3d 04h');
  });
});

describe('starts per second', () => {
  it('a fixed window: the count growth within one window, the new count after a roll-over', () => {
    expect(startsPerSecond(fixed(90, 0), fixed(80, 0), 2000)).toBe(5);
    expect(startsPerSecond(fixed(10, 0), fixed(97, 60_000), 1000)).toBe(3);
    expect(startsPerSecond(undefined, fixed(97, 60_000), 1000)).toBeNull();
  });

  it('a sliding window: its log gives it exactly; GCRA keeps no history', () => {
    const sliding = { ...fixed(40, 0), windowStart: undefined, recent: 7 };
    expect(startsPerSecond(undefined, sliding, 0)).toBe(7);
    const gcra = { ...fixed(3, 0), windowStart: undefined };
    expect(startsPerSecond(gcra, gcra, 1000)).toBeNull();
  });
});

describe('the live view', () => {
  const status: IdStatus = {
    id: 'gh',
    prefix: 'valve',
    keyPrefix: '',
    now: Date.UTC(2026, 0, 1),
    recorded: { digests: ['w100.60000000'], until: Date.UTC(2026, 0, 1, 1) },
    rules: [fixed(75, 0)],
    mismatch: { checked: true, digests: [] },
    problems: [],
    pause: { until: Date.UTC(2026, 0, 1) + 30_000, in: 30_000, by: 'retry-after (retry-after)' },
    leases: [{ token: 'a.7', fence: 7, expiresAt: 0, ttl: 12_000 }],
    fence: 7,
    window: null,
    lines: [],
    unknown: false,
  };

  it('draws a bar per rule, the pause in colour on a terminal, the leases', () => {
    const lines = watchLines(status, [4], true);
    expect(lines[0]).toBe('valve watch gh   prefix valve   2026-01-01T00:00:00.000Z (store clock)');
    expect(lines[1]).toBe(
      `  100 per 60000ms (fixed-window)  ${'█'.repeat(5)}${'░'.repeat(15)}  25/100 in use, 4.0 starts/s, next unit in 1.0 s`,
    );
    expect(lines[2]).toBe(
      'pause    \u001b[33mPAUSED for 30.0 s (until 2026-01-01T00:00:30.000Z, by retry-after (retry-after))\u001b[39m',
    );
    expect(lines[3]).toBe('leases   1 lease(s) held, fences 7, next expiry in 12.0 s');
    expect(watchLines(status, [4], false)[2]).not.toContain('\u001b');
  });

  it('one plain line per reading otherwise', () => {
    expect(watchPlain(status, [null])).toBe(
      '[2026-01-01T00:00:00.000Z] gh: 100 per 60000ms (fixed-window): 25/100 in use, next unit in 1.0 s; ' +
        'PAUSED for 30.0 s (until 2026-01-01T00:00:30.000Z, by retry-after (retry-after)); 1 lease(s) held, fences 7, next expiry in 12.0 s',
    );
  });
});
