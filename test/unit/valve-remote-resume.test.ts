/**
 * Another valve's resume() on a shared memory store, and what it ends in this one.
 *
 * A valve listens for wake-ups only while it has work: an idle valve that knows a pause cannot
 * hear another valve delete it. When it gets work and starts listening it asks the store once,
 * however recently it heard of the pause (the memory store delivers wake-ups from the moment a
 * valve subscribes and never confirms later, so there is no other moment to ask). And whatever
 * way the valve learns the pause is gone (that store answer, a 'resume' wake-up, its own
 * resume(), the end), the backoff pause ends with it: the next header-less 429 is the next step.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createValve, memoryStore, type Valve } from '../../src/index.js';
import type { Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { count, spyStore } from '../helpers/spy-store.js';
import { track } from '../helpers/track.js';

const valves: Valve[] = [];
afterEach(async () => {
  await Promise.all(valves.splice(0).map((v) => v.close()));
});

const RULES = { limit: 10, interval: '1s', burst: 10 } as const;
const FEEDBACK = { backoffInitial: '20s', backoffMax: '5m' } as const;
const BARE_429 = { status: 429, headers: {} };

/** Two valves of one id on one memory store (a spy in front of A's side), on a controlled clock. */
function pair() {
  const clock = new FakeClock();
  const inner = memoryStore({ clock });
  const spy = spyStore(inner, clock);
  const make = (store: Store) => {
    const v = createValve({ id: 'shared', rules: RULES, store, clock, feedback: FEEDBACK });
    valves.push(v);
    return v;
  };
  return { clock, spy, a: make(spy), b: make(inner) };
}

describe("another valve's resume() on a shared memory store while this one is idle", () => {
  const pauses: [string, (a: Valve) => Promise<unknown> | unknown][] = [
    ['its own pause()', (a) => a.pause('16s')],
    ['a backoff pause (a header-less 429)', (a) => a.observe(BARE_429)],
  ];
  for (const [name, pauseA] of pauses) {
    it(`${name}, resumed 10 ms later: A's next job starts at once (the store is asked once)`, async () => {
      const { clock, spy, a, b } = pair();
      const events: string[] = [];
      a.on('resume', (e) => events.push(`resume ${e.source}`));
      await pauseA(a);
      await clock.tickAsync(10);
      await b.resume(); // A has no work: it does not listen
      await clock.tickAsync(10);
      const job = track(a.run(() => 'ran'));
      await clock.tickAsync(10);
      expect(job).toEqual({ done: true, value: 'ran' });
      expect(count(spy, 'acquire')).toBe(1);
      expect(events).toEqual(['resume remote']);
      expect(a.stats().pausedUntil).toBeNull();
    });
  }

  it('a pause that still holds: the job waits, and the store is asked once, not polled', async () => {
    const { clock, spy, a } = pair();
    await a.pause('16s');
    await clock.tickAsync(10);
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(15_000);
    expect(job.done).toBe(false);
    expect(count(spy, 'acquire')).toBe(1);
    await clock.tickAsync(1000);
    expect(job).toEqual({ done: true, value: 'ran' });
  });

  it('without a pause known, a first job costs one store call (nothing more)', async () => {
    const { clock, spy, a } = pair();
    expect(await a.run(() => 1)).toBe(1);
    await clock.tickAsync(10);
    expect(await a.run(() => 2)).toBe(2);
    expect(count(spy, 'acquire')).toBe(2);
  });

  it('while A listens (a job running), B’s resume reaches A’s queued job at once through the wake-up', async () => {
    const { clock, spy, a, b } = pair();
    let finish = () => {};
    const busy = track(a.run(() => new Promise<void>((resolve) => (finish = resolve))));
    await clock.tickAsync(1);
    await a.pause('16s');
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(10);
    const calls = count(spy, 'acquire');
    await b.resume();
    await clock.tickAsync(1);
    expect(job).toEqual({ done: true, value: 'ran' });
    expect(count(spy, 'acquire')).toBe(calls + 1);
    finish();
    await clock.tickAsync(1);
    expect(busy.done).toBe(true);
  });

  it('on real time: a job queued in A right after B resumed runs', async () => {
    const store = memoryStore();
    const mk = () => {
      const v = createValve({ id: 'real', rules: RULES, store });
      valves.push(v);
      return v;
    };
    const a = mk();
    const b = mk();
    await a.pause('16s');
    await b.resume();
    // Before: it waited the whole 16 s (here: maxWait ended it).
    await expect(a.run(() => 'ran', { maxWait: 3000 })).resolves.toBe('ran');
  });
});

describe('the backoff pause ends whenever the valve learns its pause is gone', () => {
  /** A has run a job before (it listened once, then went idle), then met a header-less 429. */
  async function backedOff() {
    const p = pair();
    expect(await p.a.run(() => 0)).toBe(0);
    await p.clock.tickAsync(10);
    expect(p.a.observe(BARE_429)).toMatchObject({ waitMs: 20_000, attempt: 1 });
    await p.clock.tickAsync(10);
    return p;
  }

  it("from a store answer: B resumed while A was idle, A's job learnt it, the next 429 is the next step", async () => {
    const { clock, a, b } = await backedOff();
    await b.resume();
    await clock.tickAsync(10);
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(10);
    expect(job.done).toBe(true);
    // Before: { waitMs: 19_970, attempt: 1 } (the deleted pause's remainder, written again).
    expect(a.observe(BARE_429)).toMatchObject({ waitMs: 40_000, attempt: 2 });
    expect(a.stats().pausedUntil).toBe(clock.now() + 40_000);
  });

  it("from a 'resume' wake-up while A listens (a job queued behind the pause)", async () => {
    const { clock, a, b } = await backedOff();
    let finish = () => {};
    const busy = track(a.run(() => new Promise<void>((resolve) => (finish = resolve))));
    await clock.tickAsync(1);
    await b.resume();
    await clock.tickAsync(1);
    expect(a.observe(BARE_429)).toMatchObject({ waitMs: 40_000, attempt: 2 });
    finish();
    await clock.tickAsync(1);
    expect(busy.done).toBe(true);
  });

  it("from A's own resume()", async () => {
    const { a } = await backedOff();
    await a.resume();
    expect(a.observe(BARE_429)).toMatchObject({ waitMs: 40_000, attempt: 2 });
  });

  it('from its end', async () => {
    const { clock, a } = await backedOff();
    await clock.tickAsync(20_000);
    expect(a.observe(BARE_429)).toMatchObject({ waitMs: 40_000, attempt: 2 });
  });

  it('while it holds (nobody resumed), a 429 of a request in flight reports the time left', async () => {
    const { clock, a } = await backedOff();
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(10);
    expect(job.done).toBe(false);
    expect(a.observe(BARE_429)).toMatchObject({ waitMs: 19_980, attempt: 1 });
  });
});
