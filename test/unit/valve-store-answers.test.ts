import { describe, expect, it, vi } from 'vitest';
import { isValveError } from '../../src/errors.js';
import type { StoreErrorMode } from '../../src/options.js';
import type { AcquireRequest, AcquireResult } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { count, spyMemoryStore, type Timing } from '../helpers/spy-store.js';
import { FakeClock, track } from './harness.js';

/**
 * What a valve does with a store's answer it cannot use (a custom store's bug, or state the
 * store misread): a store failure with its 'store-error' event, the usual backoff and the
 * onStoreError mode; and a valve never asks its store more than about once per millisecond
 * while nothing is granted.
 */

type Answer = (request: AcquireRequest, now: number) => AcquireResult;

const refuse =
  (extra: Partial<AcquireResult>): Answer =>
  (_request, now) => ({ granted: 0, retryAfter: 10, blocked: 'rate', pausedUntil: null, now, ...extra });

const bad: [string, Answer, RegExp][] = [
  ['a negative hint', refuse({ retryAfter: -1 }), /retryAfter -1 with 0 of 1 granted/],
  [
    'a hint of -2^63 µs in ms (Lua inf)',
    refuse({ retryAfter: -9223372036854776 }),
    /retryAfter -9223372036854776/,
  ],
  ['a NaN hint', refuse({ retryAfter: Number.NaN }), /retryAfter NaN/],
  ['an infinite hint', refuse({ retryAfter: Number.POSITIVE_INFINITY }), /retryAfter Infinity/],
  ['no hint at all', refuse({ retryAfter: undefined as never }), /retryAfter undefined/],
  ['a fractional granted', refuse({ granted: 0.5 }), /granted 0\.5, not an integer from 0 to 1/],
  ['a negative granted', refuse({ granted: -1 }), /granted -1/],
  [
    'granted beyond the call',
    refuse({ granted: 2, retryAfter: 0, blocked: null }),
    /granted 2, not an integer from 0 to 1/,
  ],
  ['a NaN now', refuse({ now: Number.NaN }), /now NaN/],
  ['an infinite now', refuse({ now: Number.POSITIVE_INFINITY }), /now Infinity/],
  [
    'an infinite pausedUntil',
    refuse({ blocked: 'pause', pausedUntil: Number.POSITIVE_INFINITY }),
    /pausedUntil Infinity/,
  ],
  ['not an object', () => 'nonsense' as never, /"nonsense", not an object/],
];

function valveWith(answer: Answer, mode: StoreErrorMode, timing: Timing = null) {
  const clock = new FakeClock();
  const store = spyMemoryStore(clock, { acquire: (request) => answer(request, clock.now()) });
  store.timing.acquire = timing;
  const valve = createValve({ id: 'answers', clock, store, onStoreError: mode, maxWait: 1000 });
  const errors: unknown[] = [];
  valve.on('store-error', (err, ctx) => {
    expect(ctx).toMatchObject({ operation: 'acquire', id: 'answers', action: mode });
    errors.push(err);
  });
  return { clock, store, valve, errors };
}

describe('an answer a valve cannot use is a store failure', () => {
  for (const [what, answer, message] of bad) {
    it(`${what}: 'store-error', backoff, jobs wait (onStoreError 'wait')`, async () => {
      const { clock, store, valve, errors } = valveWith(answer, 'wait');
      const job = track(valve.run(() => 1));
      await clock.tickAsync(1000);
      // Backoff 100, 200, 400 ms (jitter: half of each): at most 5 calls in a second, not a loop.
      expect(count(store, 'acquire')).toBeGreaterThanOrEqual(3);
      expect(count(store, 'acquire')).toBeLessThanOrEqual(5);
      expect(errors.length).toBe(count(store, 'acquire'));
      expect(errors[0]).toBeInstanceOf(TypeError);
      expect((errors[0] as Error).message).toMatch(/^store\.acquire\(\) returned an invalid result: /);
      expect((errors[0] as Error).message).toMatch(message);
      // The job never started; at its maxWait it rejects STORE_UNAVAILABLE with the cause.
      expect(isValveError(job.error, 'STORE_UNAVAILABLE')).toBe(true);
      expect((job.error as Error).cause).toBe(errors.at(-1));
      expect(valve.stats()).toMatchObject({ started: 0, storeErrors: errors.length });
    });
  }

  it("onStoreError 'throw': the jobs reject STORE_UNAVAILABLE with the bad answer as the cause", async () => {
    const { clock, valve, errors } = valveWith(refuse({ retryAfter: -1 }), 'throw');
    const jobs = [track(valve.run(() => 1)), track(valve.run(() => 2))];
    await clock.tickAsync(1);
    expect(errors).toHaveLength(1);
    for (const job of jobs) {
      expect(isValveError(job.error, 'STORE_UNAVAILABLE')).toBe(true);
      expect((job.error as Error).cause).toBe(errors[0]);
    }
  });

  it("onStoreError 'open': the jobs start without the store for the backoff", async () => {
    const { clock, store, valve, errors } = valveWith(refuse({ now: Number.NaN }), 'open');
    const job = track(valve.run(() => 'ran'));
    await clock.tickAsync(1);
    expect(job.value).toBe('ran');
    expect(errors).toHaveLength(1);
    expect(count(store, 'acquire')).toBe(1);
  });

  it('an asynchronous store answering nonsense backs off the same way', async () => {
    const { clock, store, errors } = (() => {
      const v = valveWith(refuse({ retryAfter: Number.NEGATIVE_INFINITY }), 'wait', { delay: 0.2 });
      track(v.valve.run(() => 1));
      return v;
    })();
    await clock.tickAsync(1000);
    expect(count(store, 'acquire')).toBeLessThanOrEqual(5);
    expect(errors.length).toBe(count(store, 'acquire'));
  });
});

describe('at most about one store call per millisecond while nothing is granted', () => {
  // "0 granted, retry in ≤ 0 ms" (or a tiny hint): valid answers, but asking again at once loops.
  for (const hint of [0, 1e-6, 0.01, 0.3]) {
    for (const [kind, timing] of [
      ['synchronous', null],
      ['asynchronous (round trip 0.1 ms)', { delay: 0.1, decideAt: 0.05 }],
      ['asynchronous (round trip 0)', { delay: 0 }],
    ] as const) {
      it(`a ${kind} store answering "0 granted, retry in ${hint} ms": at most 1 call per ms`, async () => {
        const { clock, store, valve, errors } = valveWith(refuse({ retryAfter: hint }), 'wait', timing);
        const job = track(valve.run(() => 1, { maxWait: 100 }));
        await clock.tickAsync(100);
        const sent = store.acquires.map((a) => a.at);
        // 100 ms: about 100 calls, never two less than 1 ms apart.
        expect(sent.length).toBeGreaterThanOrEqual(50);
        expect(sent.length).toBeLessThanOrEqual(101);
        for (let i = 1; i < sent.length; i++)
          expect(sent[i]! - sent[i - 1]!).toBeGreaterThanOrEqual(1 - 1e-9);
        expect(errors).toEqual([]);
        expect(isValveError(job.error, 'MAX_WAIT')).toBe(true);
      });
    }
  }

  it('a burst-1 rule refused again and again just before its slot (asynchronous store): still capped', async () => {
    // The store always says the slot is 0.2 ms away, so a re-ask on each answer would poll.
    const clock = new FakeClock();
    const store = spyMemoryStore(clock, {
      acquire: (_r, _i) => ({
        granted: 0,
        retryAfter: 0.2,
        blocked: 'rate',
        pausedUntil: null,
        now: clock.now(),
      }),
    });
    store.timing.acquire = { delay: 0.06, decideAt: 0.03 };
    const valve = createValve({ id: 'poll', clock, store, rules: { limit: 2000, interval: 1000 } });
    const warn = vi.fn();
    valve.on('store-error', warn);
    track(valve.run(() => 1, { maxWait: 50 }));
    await clock.tickAsync(50);
    const sent = store.acquires.map((a) => a.at);
    expect(sent.length).toBeLessThanOrEqual(51);
    for (let i = 1; i < sent.length; i++) expect(sent[i]! - sent[i - 1]!).toBeGreaterThanOrEqual(1 - 1e-9);
    expect(warn).not.toHaveBeenCalled();
  });
});
