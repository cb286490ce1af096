import { describe, expect, it } from 'vitest';
import { backoffLevel } from '../../src/feedback/backoff.js';
import { observe } from '../../src/feedback/observe.js';
import { pauseOrigin } from '../../src/pauses.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';
import { FakeInternals } from './fake-internals.js';

const NOW = 1_700_000_000_000;

function setup(feedback = { maxPause: 3_600_000, backoffInitial: 1000, backoffMax: 60_000 }) {
  const clock = new FakeClock(NOW);
  const valve = new FakeInternals(clock, feedback);
  return { clock, valve };
}

describe('observe()', () => {
  it('returns the reading at once and writes the pause in the background with its source', () => {
    const { valve } = setup();
    const reading = observe(valve, new Response(null, { status: 429, headers: { 'Retry-After': '30' } }));
    expect(reading).toEqual({
      waitMs: 30_000,
      until: NOW + 30_000,
      source: 'retry-after',
      header: 'retry-after',
      raw: '30',
      status: 429,
      model: 'wait',
      // Whole seconds are rounded up: the true wait lies in (29 s, 30 s].
      earliest: NOW + 29_000,
      coarse: true,
    });
    expect(valve.pauses).toEqual([{ at: NOW, ms: 30_000, source: 'retry-after', detail: reading }]);
  });

  it('pauses on a success that spends the last unit (remaining 0, reset ahead)', () => {
    const { valve } = setup();
    const reading = observe(valve, {
      status: 200,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(NOW / 1000 + 12) },
    });
    expect(reading?.source).toBe('ratelimit-header');
    expect(valve.pauses.map((p) => [p.ms, p.source])).toEqual([[12_000, 'ratelimit-header']]);
  });

  it('does nothing for a response without feedback', () => {
    const { valve } = setup();
    expect(observe(valve, new Response('ok'))).toBeUndefined();
    expect(valve.pauses).toEqual([]);
    expect(valve.events).toEqual([]);
  });

  it("reports every value it did not use as sent with 'feedback-ignored'", () => {
    const { valve } = setup();
    const reading = observe(valve, { status: 429, headers: { 'retry-after': '999999' } });
    expect(reading).toMatchObject({ waitMs: 3_600_000, capped: true });
    expect(valve.eventsOf('feedback-ignored')).toEqual([
      {
        header: 'retry-after',
        value: '999999',
        reason: 'capped',
        status: 429,
        cappedTo: 3_600_000,
        requestedMs: 999_999_000,
      },
    ]);
    observe(valve, { status: 200, headers: { 'x-ratelimit-remaining': 'none' } });
    expect(valve.eventsOf('feedback-ignored')).toHaveLength(2);
  });

  it('pauses maxPause for a Retry-After or reset too large for a double (400 digits), reported as capped', () => {
    const huge = '9'.repeat(400);
    for (const input of [
      { status: 429, headers: { 'retry-after': huge } },
      { status: 200, headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': huge } },
    ]) {
      const { valve } = setup();
      const reading = observe(valve, input);
      expect(reading).toMatchObject({ waitMs: 3_600_000, until: NOW + 3_600_000, capped: true });
      expect(valve.pauses.map((p) => p.ms)).toEqual([3_600_000]);
      expect(valve.eventsOf('feedback-ignored')).toMatchObject([
        { reason: 'capped', cappedTo: 3_600_000, requestedMs: Number.POSITIVE_INFINITY },
      ]);
    }
  });

  it('throws TypeError for a non-object, and reports an input whose getters throw', () => {
    const { valve } = setup();
    expect(() => observe(valve, 42)).toThrow(TypeError);
    expect(() => observe(valve, undefined)).toThrow(TypeError);
    const evil = {
      status: 429,
      get headers(): never {
        throw new Error('boom');
      },
    };
    expect(observe(valve, evil)).toBeUndefined();
    expect(valve.eventsOf('feedback-ignored')).toEqual([
      { header: '', value: 'boom', reason: 'unreadable-input', status: undefined },
    ]);
  });

  it('takes now from the valve clock', () => {
    const { clock, valve } = setup();
    clock.jump(60_000);
    const reading = observe(valve, {
      status: 429,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(NOW / 1000 + 90) },
    });
    expect(reading?.waitMs).toBe(30_000);
    expect(reading?.until).toBe(NOW + 90_000);
  });
});

describe('backoff after a 429 with no usable header', () => {
  it('doubles from backoffInitial to backoffMax and resets after a success', () => {
    const { clock, valve } = setup({ maxPause: 3_600_000, backoffInitial: 1000, backoffMax: 16_000 });
    const waits: number[] = [];
    for (let i = 0; i < 7; i++) {
      const r = observe(valve, { status: 429, headers: {} });
      expect(r).toMatchObject({ source: 'backoff', header: undefined, model: 'backoff', attempt: i + 1 });
      waits.push(r!.waitMs);
      clock.jump(r!.waitMs);
    }
    expect(waits).toEqual([1000, 2000, 4000, 8000, 16_000, 16_000, 16_000]);
    expect(valve.pauses.map((p) => [p.ms, p.source])).toEqual(waits.map((w) => [w, 'backoff']));
    observe(valve, { status: 200, headers: {} });
    expect(backoffLevel(valve)).toBe(0);
    expect(observe(valve, { status: 429, headers: {} })?.waitMs).toBe(1000);
  });

  it('does not escalate on 429s that arrive while its pause is still running (requests already in flight)', () => {
    const { clock, valve } = setup();
    expect(observe(valve, { status: 429, headers: {} })?.waitMs).toBe(1000);
    clock.jump(300);
    expect(observe(valve, { status: 429, headers: {} })).toMatchObject({ waitMs: 700, attempt: 1 });
    expect(observe(valve, { status: 429, headers: {} })).toMatchObject({ waitMs: 700, attempt: 1 });
    clock.jump(700);
    expect(observe(valve, { status: 429, headers: {} })).toMatchObject({ waitMs: 2000, attempt: 2 });
  });

  it('ends with its pause when resume() deletes it: the next bare 429 is the next step, not what was left', async () => {
    const clock = new FakeClock(NOW);
    const store = memoryStore({ clock });
    const feedback = { backoffInitial: '1s', backoffMax: '60s' };
    const valve = createValve({ id: 'backoff-resume', clock, store, feedback });
    const other = createValve({ id: 'backoff-resume', clock, store, feedback });
    expect(valve.observe({ status: 429, headers: {} })).toMatchObject({ waitMs: 1000, attempt: 1 });
    clock.jump(900);
    await valve.resume();
    clock.jump(50);
    expect(valve.observe({ status: 429, headers: {} })).toMatchObject({ waitMs: 2000, attempt: 2 });
    // Inside the new pause, a 429 still does not escalate.
    clock.jump(500);
    expect(valve.observe({ status: 429, headers: {} })).toMatchObject({ waitMs: 1500, attempt: 2 });
    // Another process's resume() ends it too: a 'resume' wake-up, which a valve with a job
    // waiting listens for.
    const waiting = valve.run(() => 'ran');
    await flushMicrotasks();
    await other.resume();
    expect(await waiting).toBe('ran');
    expect(valve.observe({ status: 429, headers: {} })).toMatchObject({ waitMs: 4000, attempt: 3 });
    await Promise.all([valve.close(), other.close()]);
  });

  it('is kept per valve', () => {
    const clock = new FakeClock(NOW);
    const a = new FakeInternals(clock);
    const b = new FakeInternals(clock);
    observe(a, { status: 429, headers: {} });
    clock.jump(1000);
    expect(observe(a, { status: 429, headers: {} })?.waitMs).toBe(2000);
    expect(observe(b, { status: 429, headers: {} })?.waitMs).toBe(1000);
  });

  it('never exceeds maxPause, even when backoffMax is larger', () => {
    const { clock, valve } = setup({ maxPause: 5000, backoffInitial: 2000, backoffMax: 60_000 });
    const waits: number[] = [];
    for (let i = 0; i < 4; i++) {
      const r = observe(valve, { status: 429 });
      waits.push(r!.waitMs);
      clock.jump(r!.waitMs);
    }
    expect(waits).toEqual([2000, 4000, 5000, 5000]);
  });

  it('a 429 with a usable header neither uses nor advances the backoff; other errors leave it alone', () => {
    const { clock, valve } = setup();
    observe(valve, { status: 429, headers: {} });
    clock.jump(1000);
    expect(observe(valve, { status: 429, headers: { 'retry-after': '3' } })?.source).toBe('retry-after');
    clock.jump(3000);
    observe(valve, { status: 500, headers: {} });
    observe(valve, { status: 404, headers: {} });
    expect(observe(valve, { status: 429, headers: {} })?.waitMs).toBe(2000);
  });

  it('a 429 with a Retry-After of 0 backs off; a non-429 without headers never does', () => {
    const { valve } = setup();
    expect(observe(valve, { status: 429, headers: { 'retry-after': '0' } })?.source).toBe('backoff');
    expect(observe(valve, { status: 503, headers: {} })).toBeUndefined();
    expect(observe(valve, new Headers())).toBeUndefined();
  });
});

describe('pauseOrigin()', () => {
  it('names the header and the model of a feedback pause; nothing for manual and remote pauses', () => {
    const { valve } = setup();
    const reading = observe(valve, { status: 429, headers: { 'retry-after-ms': '150', 'retry-after': '1' } });
    expect(pauseOrigin(reading)).toEqual({ header: 'retry-after-ms', model: 'wait' });
    expect(pauseOrigin(observe(valve, { status: 429 }))).toEqual({ header: undefined, model: 'backoff' });
    expect(pauseOrigin(undefined)).toEqual({ header: undefined, model: undefined });
    expect(pauseOrigin({ header: 42, model: 'guess' })).toEqual({ header: undefined, model: undefined });
  });
});
