import { describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import type { ValveOptions } from '../../src/options.js';
import { MAX_DURATION_MS } from '../../src/stores/checks.js';
import { createValve } from '../../src/valve.js';
import { count } from '../helpers/spy-store.js';
import { setup, track } from './harness.js';

/**
 * Options a valve used to accept and then could not honour: null taken for "absent", and
 * durations longer than the stores accept (365 days), refused up front naming the option.
 */

const base = { id: 'limits' } as const;
const make = (extra: Record<string, unknown>) => () => createValve({ ...base, ...extra } as ValveOptions);

describe('null is not "absent"', () => {
  const cases: [string, Record<string, unknown>, RegExp][] = [
    [
      'onStoreError',
      { onStoreError: null },
      /^Expected `onStoreError` to be 'wait', 'throw' or 'open', got null$/,
    ],
    [
      'concurrency.scope',
      { concurrency: { limit: 2, scope: null } },
      /^Expected `concurrency.scope` .* got null$/,
    ],
    [
      'rules.algorithm',
      { rules: { limit: 1, interval: '1s', algorithm: null } },
      /`rules.algorithm`.*got null$/,
    ],
    ['rules', { rules: null }, /`rules`.*got null$/],
    ['store', { store: null }, /`store`.*got null$/],
    ['concurrency', { concurrency: null }, /`concurrency`.*got null$/],
    ['maxQueue', { maxQueue: null }, /`maxQueue`.*got null$/],
    ['maxWait', { maxWait: null }, /`maxWait`.*got null$/],
    ['batch', { batch: null }, /`batch`.*got null$/],
    ['feedback', { feedback: null }, /`feedback`.*got null$/],
    ['feedback.maxPause', { feedback: { maxPause: null } }, /`feedback.maxPause`.*got null$/],
    ['clock', { clock: null }, /`clock`.*got null$/],
    [
      'concurrency.leaseTtl',
      { concurrency: { limit: 1, scope: 'global', leaseTtl: null } },
      /`concurrency.leaseTtl`.*got null$/,
    ],
  ];
  for (const [option, extra, message] of cases) {
    it(`createValve({ ${option}: null }) throws a TypeError naming it`, () => {
      expect(make(extra)).toThrow(TypeError);
      expect(make(extra)).toThrow(message);
    });
  }

  it('run() and close() refuse null options too', async () => {
    const { valve } = setup({});
    for (const key of ['cost', 'priority', 'signal', 'maxWait']) {
      const error = await valve.run(() => 1, { [key]: null }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TypeError);
      expect((error as Error).message).toMatch(new RegExp(`\`${key}\`.*got null$`));
    }
    await expect(valve.close({ drain: null as never })).rejects.toThrow(/`drain`.*got null$/);
  });
});

describe('unknown keys: one message form everywhere', () => {
  it('createValve(), feedback, concurrency, run() and close()', async () => {
    expect(make({ onStoreErorr: 'throw' })).toThrow(
      'Unknown option `onStoreErorr`; createValve() takes `id`, `rules`, `store`, `concurrency`, `maxQueue`, `maxWait`, `batch`, `onStoreError`, `precision`, `feedback` and `clock`',
    );
    expect(make({ feedback: { maxPuase: 1 } })).toThrow(
      'Unknown option `feedback.maxPuase`; feedback takes `maxPause`, `backoffInitial` and `backoffMax`',
    );
    expect(make({ concurrency: { limit: 1, ttl: 1 } })).toThrow(
      'Unknown option `concurrency.ttl`; concurrency takes `limit`, `scope` and `leaseTtl`',
    );
    const { valve } = setup({});
    await expect(valve.run(() => 1, { costs: 2 } as never)).rejects.toThrow(
      'Unknown option `costs`; run() takes `cost`, `priority`, `signal` and `maxWait`',
    );
    await expect(valve.close({ drian: true } as never)).rejects.toThrow(
      'Unknown option `drian`; close() takes `drain`',
    );
  });
});

describe('durations longer than the stores accept (365 days) are refused up front', () => {
  const over = MAX_DURATION_MS + 1;
  it('concurrency.leaseTtl and feedback.maxPause: a RangeError naming the option and the value', () => {
    expect(make({ concurrency: { limit: 1, scope: 'global', leaseTtl: '366d' } })).toThrow(
      'Expected `concurrency.leaseTtl` to be at most 31536000000 ms (365 days), got "366d"',
    );
    expect(make({ concurrency: { limit: 1, scope: 'global', leaseTtl: over } })).toThrow(RangeError);
    expect(make({ feedback: { maxPause: '1000d' } })).toThrow(
      'Expected `feedback.maxPause` to be at most 31536000000 ms (365 days), got "1000d"',
    );
    expect(make({ feedback: { maxPause: over } })).toThrow(RangeError);
    // The cap itself is fine.
    expect(
      make({ concurrency: { limit: 1, scope: 'global', leaseTtl: '365d' }, feedback: { maxPause: '365d' } }),
    ).not.toThrow();
  });

  it('pause(): a duration or an `until` beyond 365 days rejects with a RangeError, nothing is written', async () => {
    const { valve, store, clock } = setup({});
    const long = await valve.pause('366d').catch((e: unknown) => e);
    expect(long).toBeInstanceOf(RangeError);
    expect((long as Error).message).toBe(
      'Expected `pause` to be at most 31536000000 ms (365 days), got "366d"',
    );
    await expect(valve.pause(over)).rejects.toThrow(RangeError);
    await expect(valve.pause({ until: clock.now() + over })).rejects.toThrow(
      /`until` to be at most 365 days ahead/,
    );
    expect(count(store, 'pause')).toBe(0);
    expect(valve.stats().pausedUntil).toBeNull();
    await valve.pause('365d');
    expect(count(store, 'pause')).toBe(1);
  });

  it('maxWait: Infinity means no deadline; a finite maxWait beyond 365 days is allowed (only the local timer sees it)', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 1, interval: '365d' }, maxWait: '400d' });
    const first = track(valve.run(() => 'first'));
    const second = track(valve.run(() => 'second'));
    const third = track(valve.run(() => 'third', { maxWait: Number.POSITIVE_INFINITY }));
    await clock.tickAsync(1);
    expect(first.value).toBe('first');
    await clock.tickAsync(365 * 86_400_000 - 2);
    expect(second.done).toBe(false);
    // The rule's slot at 365 days comes first: the second job starts within its maxWait.
    await clock.tickAsync(2);
    expect(second.value).toBe('second');
    // The third has no deadline: it waits for the next slot, 730 days in.
    await clock.tickAsync(365 * 86_400_000);
    expect(third.value).toBe('third');
    expect(count(store, 'acquire')).toBeLessThan(10);
  });

  it('a finite maxWait beyond 365 days expires on time', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: '365d' } });
    track(valve.run(() => 1));
    const late = track(valve.run(() => 2, { maxWait: '366d' }));
    await clock.tickAsync(1);
    // `late` waits for the slot 365 days away (within its 366 days); this one would need the slot
    // after that (730 days): it expires at its 400 days.
    const blocked = track(valve.run(() => 3, { maxWait: '400d' }));
    await clock.tickAsync(365 * 86_400_000);
    expect(late.value).toBe(2);
    await clock.tickAsync(35 * 86_400_000);
    expect(isValveError(blocked.error, 'MAX_WAIT')).toBe(true);
  });
});
