import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from './harness.js';

const ok = { id: 'svc' };

describe('createValve() option validation', () => {
  const cases: [string, unknown, ErrorConstructor, RegExp][] = [
    ['options missing', undefined, TypeError, /options to be an object.*got undefined/],
    ['options array', [], TypeError, /options to be an object.*got an array/],
    ['id missing', {}, TypeError, /`id`.*got undefined/],
    ['id number', { id: 5 }, TypeError, /`id`.*got 5/],
    ['id empty', { id: '' }, TypeError, /`id`.*1 to 200.*got 0 characters/],
    ['id too long', { id: 'x'.repeat(201) }, TypeError, /`id`.*got 201 characters/],
    ['id with brace', { id: 'a{b' }, TypeError, /`id`.*'\{'.*"a\{b"/],
    ['id with closing brace', { id: 'a}' }, TypeError, /`id`/],
    ['unknown option', { ...ok, limit: 5 }, TypeError, /Unknown option `limit`/],
    ['rules not object', { ...ok, rules: 5 }, TypeError, /`rules`.*got 5/],
    ['rule limit 0', { ...ok, rules: { limit: 0, interval: 1 } }, RangeError, /`rules.limit`.*got 0/],
    [
      'rule interval bad',
      { ...ok, rules: [{ limit: 1, interval: '1 sec' }] },
      RangeError,
      /`rules\[0\].interval`.*"1 sec"/,
    ],
    [
      'rule burst with window',
      { ...ok, rules: [{ limit: 1, interval: 1, algorithm: 'fixed-window', burst: 2 }] },
      TypeError,
      /burst/,
    ],
    ['store not a store', { ...ok, store: {} }, TypeError, /`store\.acquire` is undefined/],
    [
      'store missing renew',
      { ...ok, store: { acquire() {}, pause() {}, resume() {}, release() {} } },
      TypeError,
      /`store\.renew`/,
    ],
    ['store string', { ...ok, store: 'redis' }, TypeError, /`store`.*"redis"/],
    ['concurrency 0', { ...ok, concurrency: 0 }, RangeError, /`concurrency`.*got 0/],
    ['concurrency 1.5', { ...ok, concurrency: 1.5 }, RangeError, /`concurrency`.*got 1.5/],
    ['concurrency string', { ...ok, concurrency: '4' }, TypeError, /`concurrency`.*"4"/],
    [
      'concurrency scope',
      { ...ok, concurrency: { limit: 2, scope: 'cluster' } },
      TypeError,
      /`concurrency.scope`.*"cluster"/,
    ],
    ['concurrency unknown key', { ...ok, concurrency: { limit: 2, ttl: 5 } }, TypeError, /`concurrency.ttl`/],
    [
      'global without limit',
      { ...ok, concurrency: { scope: 'global' } },
      TypeError,
      /`concurrency.limit`.*got undefined/,
    ],
    [
      'global Infinity',
      { ...ok, concurrency: { limit: Infinity, scope: 'global' } },
      RangeError,
      /`concurrency.limit`/,
    ],
    [
      'leaseTtl small',
      { ...ok, concurrency: { limit: 2, scope: 'global', leaseTtl: 999 } },
      RangeError,
      /`concurrency.leaseTtl`.*at least 1000.*999/,
    ],
    ['leaseTtl local', { ...ok, concurrency: { limit: 2, leaseTtl: 5000 } }, TypeError, /leaseTtl.*global/],
    ['maxQueue 0', { ...ok, maxQueue: 0 }, RangeError, /`maxQueue`.*got 0/],
    ['maxQueue string', { ...ok, maxQueue: '5' }, TypeError, /`maxQueue`/],
    ['maxWait 0', { ...ok, maxWait: 0 }, RangeError, /`maxWait`.*got 0/],
    ['maxWait NaN', { ...ok, maxWait: Number.NaN }, RangeError, /`maxWait`.*NaN/],
    ['maxWait bool', { ...ok, maxWait: true }, TypeError, /`maxWait`.*true/],
    ['batch 0', { ...ok, batch: 0 }, RangeError, /`batch`.*got 0/],
    ['batch Infinity', { ...ok, batch: Infinity }, RangeError, /`batch`.*Infinity/],
    [
      'onStoreError',
      { ...ok, onStoreError: 'retry' },
      TypeError,
      /`onStoreError`.*'wait', 'throw' or 'open'.*"retry"/,
    ],
    [
      'open with global',
      { ...ok, onStoreError: 'open', concurrency: { limit: 1, scope: 'global' } },
      TypeError,
      /'open'.*global/,
    ],
    ['clock', { ...ok, clock: { now: () => 0 } }, TypeError, /`clock`/],
    ['feedback not object', { ...ok, feedback: 1 }, TypeError, /`feedback`/],
    ['feedback unknown', { ...ok, feedback: { cap: 1 } }, TypeError, /`feedback.cap`/],
    ['feedback maxPause', { ...ok, feedback: { maxPause: -1 } }, RangeError, /`feedback.maxPause`/],
    [
      'feedback backoff order',
      { ...ok, feedback: { backoffInitial: 5000, backoffMax: 1000 } },
      RangeError,
      /`feedback.backoffMax`/,
    ],
  ];
  for (const [name, options, type, message] of cases) {
    it(name, () => {
      let error: unknown;
      try {
        createValve(options as never);
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(type);
      expect((error as Error).message).toMatch(message);
    });
  }

  it('accepts every documented shape', () => {
    const clock = new FakeClock();
    const valid = [
      { id: 'a' },
      { id: 'x'.repeat(200), rules: [] },
      { id: 'hubspot:portal-123', rules: { limit: 10, interval: '1s' } },
      {
        id: 'github:app-42',
        rules: [
          { limit: 10, interval: '1s' },
          { limit: 100, interval: 60_000, burst: 20 },
          { limit: 5000, interval: '1h', algorithm: 'fixed-window' },
        ],
        store: memoryStore({ clock }),
        concurrency: 4,
        maxQueue: Infinity,
        maxWait: Infinity,
        batch: 32,
        onStoreError: 'wait',
      },
      { id: 'a', concurrency: { limit: 4, scope: 'local' } },
      { id: 'a', concurrency: { limit: 4 } },
      { id: 'a', concurrency: { limit: 4, scope: 'global', leaseTtl: 30_000 } },
      { id: 'a', concurrency: { limit: 4, scope: 'global', leaseTtl: '10s' } },
      { id: 'a', concurrency: Infinity, maxQueue: 10, maxWait: '30s', batch: 1, onStoreError: 'open' },
      {
        id: 'a',
        onStoreError: 'throw',
        clock,
        feedback: { maxPause: '10m', backoffInitial: 500, backoffMax: '2m' },
      },
    ];
    for (const options of valid) expect(() => createValve(options as never)).not.toThrow();
  });

  it('fuzz: any input throws only TypeError or RangeError, synchronously', () => {
    const value = fc.oneof(
      fc.constant(undefined),
      fc.constant(null),
      fc.boolean(),
      fc.double(),
      fc.integer({ min: -5, max: 100 }),
      fc.constantFrom(Infinity, -Infinity, Number.NaN, 0, -0, 1000, 30_000),
      fc.string({ maxLength: 8 }),
      fc.constantFrom(
        '1s',
        '250ms',
        'global',
        'local',
        'wait',
        'open',
        'throw',
        'gcra',
        'fixed-window',
        'sliding-window',
        '{',
        '',
      ),
      fc.array(fc.integer(), { maxLength: 2 }),
      fc.constant(() => {}),
    );
    const rule = fc.record(
      { limit: value, interval: value, algorithm: value, burst: value },
      { requiredKeys: [] },
    );
    const options = fc.record(
      {
        id: fc.oneof(value, fc.string({ minLength: 1, maxLength: 210 })),
        rules: fc.oneof(value, rule, fc.array(rule, { maxLength: 3 })),
        store: fc.oneof(value, fc.constant(memoryStore())),
        concurrency: fc.oneof(
          value,
          fc.record({ limit: value, scope: value, leaseTtl: value }, { requiredKeys: [] }),
        ),
        maxQueue: value,
        maxWait: value,
        batch: value,
        onStoreError: value,
        feedback: fc.oneof(
          value,
          fc.record({ maxPause: value, backoffInitial: value, backoffMax: value }, { requiredKeys: [] }),
        ),
        bogus: value,
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(fc.oneof(value, options), (input) => {
        try {
          const valve = createValve(input as never);
          expect(typeof valve.run).toBe('function');
        } catch (err) {
          expect(err instanceof TypeError || err instanceof RangeError).toBe(true);
          expect((err as Error).message.length).toBeGreaterThan(10);
        }
      }),
      { numRuns: 3000 },
    );
  });
});
