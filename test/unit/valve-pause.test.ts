import { describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { Store, WakeEvent, WakeStatus } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { count, spyStore, storeWith } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, setup, track } from './harness.js';

describe('pause() and resume()', () => {
  it('blocks new starts until the pause ends, emits pause {until, source: manual}, resolves once recorded', async () => {
    const { valve, clock, store } = setup({ rules: [] });
    const events: unknown[] = [];
    valve.on('pause', (e) => events.push(e));
    const t0 = clock.now();
    await valve.pause(1000);
    expect(count(store, 'pause')).toBe(1);
    expect(events).toEqual([{ until: t0 + 1000, source: 'manual' }]);
    expect(valve.stats().pausedUntil).toBe(t0 + 1000);
    let started = 0;
    const job = valve.run(() => {
      started = clock.now();
    });
    await clock.tickAsync(999);
    expect(started).toBe(0);
    await clock.tickAsync(1);
    await job;
    expect(started).toBe(t0 + 1000);
    expect(valve.stats().pausedUntil).toBeNull();
  });

  it('does not call the store during a known pause (cached) and wakes at its end', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 100, interval: '1s' } });
    await valve.pause(5000);
    const all = Array.from({ length: 10 }, (_, i) => valve.run(() => i));
    // Starting to listen for wake-ups while it knows a pause, it asks once (another valve may
    // have resumed it while this one did not listen); the answer confirms the pause.
    await flushMicrotasks();
    expect(count(store, 'acquire')).toBe(1);
    await clock.tickAsync(4999);
    expect(count(store, 'acquire')).toBe(1);
    await clock.tickAsync(1);
    expect(count(store, 'acquire')).toBe(2);
    await clock.tickAsync(100);
    await Promise.all(all);
  });

  it('learns a pause from an acquisition and caches it', async () => {
    const clock = new FakeClock();
    const shared = memoryStore({ clock });
    const store = spyStore(shared, clock);
    // Another writer without notifications: the valve learns only from acquire.
    const noSub = { ...store, subscribe: undefined, notifies: false } as typeof store;
    const valve = createValve({ id: 'p', clock, store: noSub });
    shared.pause('p', 3000);
    const events: unknown[] = [];
    valve.on('pause', (e) => events.push(e));
    const all = [1, 2, 3].map((i) => valve.run(() => i));
    await flushMicrotasks();
    expect(store.acquires.length).toBe(1);
    expect(events).toEqual([{ until: clock.now() + 3000, source: 'remote' }]);
    await clock.tickAsync(2999);
    expect(store.acquires.length).toBe(1);
    await clock.tickAsync(1);
    expect(await Promise.all(all)).toEqual([1, 2, 3]);
    expect(store.acquires.length).toBe(2);
  });

  it('only extends: a shorter pause does not shorten a longer one (and emits no event)', async () => {
    const { valve, clock } = setup({});
    const t0 = clock.now();
    const events: { until: number }[] = [];
    valve.on('pause', (e) => events.push(e));
    await valve.pause(2000);
    await valve.pause(500);
    expect(events.map((e) => e.until - t0)).toEqual([2000]);
    expect(valve.stats().pausedUntil).toBe(t0 + 2000);
    const job = track(valve.run(() => 1));
    await clock.tickAsync(1999);
    expect(job.done).toBe(false);
    await clock.tickAsync(1);
    expect(job.value).toBe(1);
  });

  it('accepts { until: Date | number } and duration strings; a past until is a no-op', async () => {
    const { valve, clock, store } = setup({});
    const t0 = clock.now();
    await valve.pause({ until: new Date(t0 + 1500) });
    expect(valve.stats().pausedUntil).toBe(t0 + 1500);
    await valve.pause({ until: t0 + 2500 });
    expect(valve.stats().pausedUntil).toBe(t0 + 2500);
    await valve.pause('3s');
    expect(valve.stats().pausedUntil).toBe(t0 + 3000);
    await valve.pause({ until: t0 - 5 });
    expect(count(store, 'pause')).toBe(3);
  });

  it('rejects bad pause arguments with TypeError/RangeError', async () => {
    const { valve } = setup({});
    await expect(valve.pause(-1)).rejects.toBeInstanceOf(RangeError);
    await expect(valve.pause(Number.NaN)).rejects.toBeInstanceOf(RangeError);
    await expect(valve.pause('soon')).rejects.toBeInstanceOf(RangeError);
    await expect(valve.pause({ until: 'x' } as never)).rejects.toBeInstanceOf(TypeError);
    await expect(valve.pause({ until: new Date(Number.NaN) })).rejects.toBeInstanceOf(RangeError);
    await expect(valve.pause(null as never)).rejects.toBeInstanceOf(TypeError);
  });

  it('resume() deletes the pause, emits resume, and queued jobs start at once', async () => {
    const { valve, clock } = setup({});
    const resumed = vi.fn();
    valve.on('resume', resumed);
    await valve.pause(60_000);
    const job = track(valve.run(() => 'go'));
    await clock.tickAsync(100);
    expect(job.done).toBe(false);
    await valve.resume();
    expect(resumed).toHaveBeenCalledWith({ source: 'manual' });
    await clock.tickAsync(0);
    expect(job.value).toBe('go');
    expect(valve.stats().pausedUntil).toBeNull();
  });

  it("another valve's pause and resume wake this one through the store's subscriber", async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'shared', clock, store });
    const b = createValve({ id: 'shared', clock, store });
    const bEvents: unknown[] = [];
    b.on('pause', (e) => bEvents.push(e));
    b.on('resume', (e) => bEvents.push(e));
    // b follows the store's wake-ups while it has work: a job of its runs.
    let finish = () => {};
    const busy = track(b.run(() => new Promise<void>((resolve) => (finish = resolve))));
    await flushMicrotasks();
    const until = clock.now() + 10_000;
    await a.pause(10_000);
    await flushMicrotasks();
    // Nothing queued: nothing to ask the store about, and the wake-up alone is not trusted.
    expect(bEvents).toEqual([]);
    const job = track(b.run(() => 'b'));
    await clock.tickAsync(100);
    // Its store call learnt the pause.
    expect(bEvents).toEqual([{ until, source: 'remote' }]);
    expect(job.done).toBe(false);
    await a.resume();
    await flushMicrotasks();
    expect(bEvents.at(-1)).toEqual({ source: 'remote' });
    expect(job.value).toBe('b');
    finish();
    await flushMicrotasks();
    expect(busy.done).toBe(true);
  });

  it('with wake-ups confirmed, a cached pause is still checked with the store every 30 s (a lost resume costs at most that)', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    // Wake-ups confirmed, but none ever delivered (a subscription the server dropped).
    const store = {
      ...spyStore(inner, clock),
      notifies: true,
      subscribe: (_id: string, _onWake: (e: WakeEvent) => void, onStatus?: (s: WakeStatus) => void) => {
        queueMicrotask(() => onStatus?.({ listening: true }));
        return () => {};
      },
    };
    const valve = createValve({ id: 'lost', clock, store });
    await valve.pause('10m');
    const job = track(valve.run(() => 'ran'));
    await clock.tickAsync(1);
    // One call as it starts listening (it knows a pause), one on confirmation (wake-ups before
    // it may have been missed): both answer the pause. Then no polling.
    expect(count(store, 'acquire')).toBe(2);
    await inner.resume('lost'); // no wake-up reaches the valve
    await clock.tickAsync(29_990);
    expect(count(store, 'acquire')).toBe(2);
    expect(job.done).toBe(false);
    await clock.tickAsync(20);
    expect(job.value).toBe('ran');
    expect(count(store, 'acquire')).toBe(3);
    await valve.close();
  });

  it("a pause wake-up is only a cue: whatever end it announces, the store's answer decides", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    let wake: ((e: unknown) => void) | undefined;
    const store = {
      ...spyStore(inner, clock),
      notifies: true,
      subscribe: (_id: string, onWake: (e: WakeEvent) => void, onStatus?: (s: WakeStatus) => void) => {
        wake = onWake as (e: unknown) => void;
        queueMicrotask(() => onStatus?.({ listening: true }));
        return () => {};
      },
    };
    const valve = createValve({ id: 'forged', clock, store, rules: { limit: 1, interval: 100 } });
    const events: unknown[] = [];
    valve.on('pause', (e) => events.push(e));
    const first = track(valve.run(() => 1));
    const second = track(valve.run(() => 2)); // waits 100 ms for the rule, following wake-ups
    await flushMicrotasks();
    expect(first.value).toBe(1);
    for (const until of [Number.POSITIVE_INFINITY, Number.NaN, clock.now() + 400 * 86_400_000, '1e99']) {
      wake!({ type: 'pause', until });
    }
    await clock.tickAsync(100);
    expect(second.value).toBe(2);
    expect(events).toEqual([]);
    // A well-formed one for a pause the store does not have (another database's, say) holds
    // nothing either: the job queued behind the rule asks the store at once, once.
    const third = track(valve.run(() => 3));
    await flushMicrotasks();
    let calls = count(store, 'acquire');
    wake!({ type: 'pause', until: clock.now() + 5000 });
    await flushMicrotasks();
    expect(count(store, 'acquire')).toBe(calls + 1);
    await clock.tickAsync(100);
    expect(third.value).toBe(3);
    expect(events).toEqual([]);
    expect(valve.stats().pausedUntil).toBeNull();
    // One for a pause the store has is learnt from the store's answer, whatever end it says.
    const fourth = track(valve.run(() => 4));
    await flushMicrotasks();
    await inner.pause('forged', 5000);
    const until = clock.now() + 5000;
    calls = count(store, 'acquire');
    wake!({ type: 'pause', until: 1 });
    wake!({ type: 'pause', until: 2 }); // several in one tick: one call
    await flushMicrotasks();
    expect(count(store, 'acquire')).toBe(calls + 1);
    expect(events).toEqual([{ until, source: 'remote' }]);
    expect(valve.stats().pausedUntil).toBe(until);
    expect(fourth.done).toBe(false);
    await valve.close();
  });

  it("its own pause's wake-up arriving before the store's reply is not reported as a remote pause", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = spyStore(inner, clock);
    // Written at once (the wake-up goes out in a microtask), answered 10 ms later.
    store.timing.pause = { delay: 10, decideAt: 0 };
    const valve = createValve({ id: 'own', clock, store });
    await valve.run(() => 0); // subscribed
    const events: { source: string }[] = [];
    valve.on('pause', (e) => events.push(e));
    const done = valve.pause(1000);
    await flushMicrotasks();
    await clock.tickAsync(10);
    await done;
    expect(events.map((e) => e.source)).toEqual(['manual']);
  });

  it('subscribes while it has work, unsubscribes when idle and on close', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const unsubscribe = vi.fn();
    const store = { ...spyStore(inner, clock), subscribe: vi.fn(() => unsubscribe), notifies: true };
    const valve = createValve({ id: 'u', clock, store });
    expect(store.subscribe).not.toHaveBeenCalled();
    let finish = () => {};
    const busy = track(valve.run(() => new Promise<void>((resolve) => (finish = resolve))));
    await flushMicrotasks();
    expect(store.subscribe).toHaveBeenCalledTimes(1);
    const second = track(valve.run(() => 2));
    await flushMicrotasks();
    expect(second.value).toBe(2);
    expect(store.subscribe).toHaveBeenCalledTimes(1);
    expect(unsubscribe).not.toHaveBeenCalled();
    finish();
    await flushMicrotasks();
    expect(busy.done).toBe(true);
    expect(unsubscribe).toHaveBeenCalledTimes(1); // idle: nothing held in the store
    await valve.run(() => 3);
    expect(store.subscribe).toHaveBeenCalledTimes(2);
    const busyAgain = track(valve.run(() => new Promise<void>((resolve) => (finish = resolve))));
    await flushMicrotasks();
    const closed = valve.close();
    finish();
    await closed;
    expect(busyAgain.done).toBe(true);
    expect(unsubscribe).toHaveBeenCalledTimes(3);
  });

  it('a grant issued before a pause still starts', async () => {
    const { valve, store } = setup({});
    store.async = { delay: 0 };
    const job = track(valve.run(() => 'granted'));
    await Promise.resolve();
    await Promise.resolve();
    expect(count(store, 'acquire')).toBe(1);
    // The pause is written while the acquisition is in flight (granted before it).
    store.async = null;
    await valve.pause(1000);
    await flushMicrotasks();
    expect(job.value).toBe('granted');
  });
});

/** A memory store seen through a store whose pause() fails (and, without `wakeUps`, that cannot subscribe). */
function failingPauseStore(clock: FakeClock, wakeUps: boolean, inner = memoryStore({ clock })): Store {
  const store: Store = {
    acquire: (r) => inner.acquire(r),
    pause: () => {
      throw new Error('pause write failed');
    },
    resume: (id) => inner.resume(id),
    renew: (id, t, ttl) => inner.renew(id, t, ttl),
    release: (id, t) => inner.release(id, t),
  };
  if (wakeUps) {
    store.subscribe = (id, onWake, onStatus) => inner.subscribe!(id, onWake, onStatus);
    store.listening = (id) => inner.listening!(id);
  }
  return store;
}

describe('a pause the store has not confirmed', () => {
  for (const wakeUps of [false, true]) {
    it(`a failed write keeps this process paused for the whole pause, whatever the store answers (wake-ups: ${wakeUps})`, async () => {
      // Store answers reporting no pause cleared it: the job started at 30 s (the trusted
      // recheck) without wake-ups, at once with them (the new subscription's recheck).
      const clock = new FakeClock();
      const valve = createValve({
        id: 'failed',
        clock,
        store: failingPauseStore(clock, wakeUps),
        rules: { limit: 1000, interval: '1s' },
      });
      await valve.run(() => 0); // idle again: the next job takes a new subscription
      const t0 = clock.now();
      const err = await valve.pause(60_000).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'STORE_UNAVAILABLE' });
      const job = track(valve.run(() => clock.now() - t0));
      await clock.tickAsync(59_999);
      expect(job.done).toBe(false);
      expect(valve.stats().pausedUntil).toBe(t0 + 60_000);
      expect(valve.stats().pausedBy).toMatchObject({ source: 'manual' });
      await clock.tickAsync(1);
      expect(job.value).toBe(60_000);
      expect(valve.stats().pausedUntil).toBeNull();
    });
  }

  it("observe()'s pause whose background write failed holds until its end (the store answers none)", async () => {
    const clock = new FakeClock();
    const valve = createValve({ id: 'observed', clock, store: failingPauseStore(clock, false) });
    const errors: string[] = [];
    valve.on('store-error', (_e, c) => errors.push(c.operation));
    await valve.run(() => 0);
    const t0 = clock.now();
    expect(valve.observe({ status: 429, headers: { 'retry-after': '120' } })?.waitMs).toBe(120_000);
    expect(errors).toEqual(['pause']);
    const job = track(valve.run(() => clock.now() - t0));
    await clock.tickAsync(119_999);
    expect(job.done).toBe(false);
    await clock.tickAsync(1);
    expect(job.value).toBe(120_000);
  });

  it('a write still in flight holds: a job queued right after pause() on an idle valve waits for it', async () => {
    // The new subscription's recheck asked the store before the write landed, and its answer
    // (no pause) cleared the pause: the job started at 0 ms.
    const clock = new FakeClock();
    const store = spyStore(memoryStore({ clock }), clock);
    store.timing.pause = { delay: 5 }; // decided and answered 5 ms later, like a network store
    const valve = createValve({ id: 'inflight', clock, store });
    await valve.run(() => 0);
    const t0 = clock.now();
    const paused = valve.pause(60_000);
    const job = track(valve.run(() => clock.now() - t0));
    await clock.tickAsync(10);
    await paused;
    expect(job.done).toBe(false);
    await clock.tickAsync(61_000);
    expect(job.value).toBeGreaterThanOrEqual(60_000);
  });

  it('resume() ends a held pause at once; a resume wake-up from another valve does too', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const valve = createValve({ id: 'held', clock, store: failingPauseStore(clock, true, inner) });
    const other = createValve({ id: 'held', clock, store: inner });
    await valve.pause(60_000).catch(() => {});
    const first = track(valve.run(() => 1));
    await clock.tickAsync(1000);
    expect(first.done).toBe(false);
    await valve.resume();
    await clock.tickAsync(0);
    expect(first.value).toBe(1);
    // A running job keeps the subscription, so the other valve's resume is heard.
    let finish = () => {};
    const busy = track(valve.run(() => new Promise<void>((resolve) => (finish = resolve))));
    await flushMicrotasks();
    await valve.pause(60_000).catch(() => {});
    const second = track(valve.run(() => 2));
    await clock.tickAsync(1000);
    expect(second.done).toBe(false);
    await other.resume();
    await clock.tickAsync(0);
    expect(second.value).toBe(2);
    finish();
    await flushMicrotasks();
    expect(busy.done).toBe(true);
  });
});

describe("'pause' and 'resume' events", () => {
  it('pause() then resume() in one tick with work queued: only the manual events, not paused after', async () => {
    // The store's own 'pause' wake-up arrived after resume() and was cached as a remote
    // pause: [pause manual, resume manual, pause remote, resume remote].
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const valve = createValve({ id: 'tick', clock, store, rules: { limit: 1, interval: '1h' } });
    const events: string[] = [];
    valve.on('pause', (e) => events.push(`pause ${e.source}`));
    valve.on('resume', (e) => events.push(`resume ${e.source}`));
    await valve.run(() => 1); // spends the budget
    const queued = track(valve.run(() => 2)); // waits for the rule: subscribed
    await flushMicrotasks();
    await Promise.all([valve.pause(60_000), valve.resume()]);
    await flushMicrotasks();
    expect(events).toEqual(['pause manual', 'resume manual']);
    expect(valve.stats().pausedUntil).toBeNull();
    // A shorter pause another valve writes after the resume is still heard.
    await createValve({ id: 'tick', clock, store }).pause(10_000);
    await flushMicrotasks();
    expect(events).toEqual(['pause manual', 'resume manual', 'pause remote']);
    await valve.close();
    expect(queued.done).toBe(true);
  });

  it("another valve's resume noticed through a store answer emits 'resume' { source: 'remote' }", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const noWakeUps = (): Store => ({
      acquire: (r) => inner.acquire(r),
      pause: (id, ms, by) => inner.pause(id, ms, by),
      resume: (id) => inner.resume(id),
      renew: (id, t, ttl) => inner.renew(id, t, ttl),
      release: (id, t) => inner.release(id, t),
    });
    const a = createValve({ id: 'answer', clock, store: noWakeUps() });
    const b = createValve({ id: 'answer', clock, store: noWakeUps() });
    const events: string[] = [];
    b.on('pause', (e) => events.push(`pause ${e.source}`));
    b.on('resume', (e) => events.push(`resume ${e.source}`));
    await a.pause(120_000);
    const t0 = clock.now();
    const job = track(b.run(() => clock.now() - t0));
    await clock.tickAsync(10);
    expect(events).toEqual(['pause remote']);
    await a.resume();
    await clock.tickAsync(40_000);
    expect(job.value).toBe(30_000); // the cached pause is rechecked after 30 s
    expect(events).toEqual(['pause remote', 'resume remote']);
  });

  it("a pause that ended on the store's clock is not reported as resumed", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = storeWith(inner, {});
    const valve = createValve({ id: 'ended', clock, store });
    const resumed = vi.fn();
    valve.on('resume', resumed);
    await valve.pause(1000);
    const job = track(valve.run(() => 1));
    await clock.tickAsync(1000);
    expect(job.value).toBe(1);
    expect(resumed).not.toHaveBeenCalled();
  });
});

describe("a pause another valve writes in the seconds after resume(), its 'resume' wake-up lost", () => {
  it('is learnt from the store at once by a valve with a job queued (the wake-up is not trusted either way)', async () => {
    // It was dropped as this valve's own stale wake-up: a valve waiting on a 1 h rule never
    // knew of the 10-minute pause (pausedUntil null at every minute).
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = storeWith(inner, {
      // Pub/sub delivers at most once: every 'resume' wake-up is lost.
      subscribe: (id, onWake) => inner.subscribe!(id, (e) => e.type !== 'resume' && onWake(e)),
    });
    const a = createValve({ id: 'heard', clock, store, rules: { limit: 1, interval: '1h' } });
    const b = createValve({ id: 'heard', clock, store });
    const events: string[] = [];
    a.on('pause', (e) => events.push(`pause ${e.source}`));
    await a.run(() => 1);
    const queued = track(a.run(() => 2)); // waits an hour for the rule
    await flushMicrotasks();
    await a.pause(3_600_000);
    await a.resume();
    await clock.tickAsync(1000);
    events.length = 0;
    await b.pause(600_000); // another process, 1 s after the resume, shorter than the deleted pause
    await clock.tickAsync(10);
    expect(events).toEqual(['pause remote']);
    expect(a.stats().pausedUntil).toBeGreaterThan(clock.now() + 590_000);
    await a.close();
    expect(queued.done).toBe(true);
  });
});

describe("'pause' wake-ups around this valve's resume(): cues to ask the store, whose answer decides", () => {
  // A 'pause' wake-up is never taken at its word: it may be the stale one of the pause resume()
  // deleted (still on its way), or another process's pause, shorter than the deleted one. Once
  // dropped until the resume's own 'resume' wake-up (which never comes when the valve was idle,
  // when store.resume failed or when the message was lost), then for 2 s: such a pause of
  // another process went unheard. Now a valve with jobs queued asks the store (once store.resume
  // answered, if it is in flight).

  /** A valve waiting for its rule (subscribed, no store call for an hour) and another valve of its id on `other`. */
  async function subscribedPair(store: Store, other: Store, clock: FakeClock) {
    const a = createValve({ id: 'du', clock, store, rules: { limit: 1, interval: '1h' } });
    const b = createValve({ id: 'du', clock, store: other });
    const events: string[] = [];
    a.on('pause', (e) => events.push(`pause ${e.source}`));
    a.on('resume', (e) => events.push(`resume ${e.source}`));
    await a.run(() => 1); // spends the budget
    const queued = track(a.run(() => 2)); // waits for the rule: subscribed
    await flushMicrotasks();
    return { a, b, events, queued };
  }

  it('a valve that resumed while idle learns a shorter pause of another valve at its next store call', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'idle', clock, store });
    const b = createValve({ id: 'idle', clock, store });
    const events: string[] = [];
    a.on('pause', (e) => events.push(`pause ${e.source}`));
    a.on('resume', (e) => events.push(`resume ${e.source}`));
    await a.pause(3_600_000); // idle: not subscribed, its own 'resume' wake-up is never heard
    await a.resume();
    await clock.tickAsync(1000);
    events.length = 0;
    let finish = () => {};
    const job = track(a.run(() => new Promise<void>((r) => (finish = r)))); // subscribes
    await clock.tickAsync(10);
    await b.pause(600_000);
    await flushMicrotasks();
    expect(events).toEqual([]); // nothing queued: the wake-up alone is not trusted
    const next = track(a.run(() => 'next')); // its store call learns the pause
    await flushMicrotasks();
    expect(next.done).toBe(false);
    expect(events).toEqual(['pause remote']);
    expect(a.stats().pausedUntil).toBe(clock.now() + 600_000);
    finish();
    await flushMicrotasks();
    expect(job.done).toBe(true);
  });

  it("its own 'resume' wake-up lost: a shorter pause another valve writes right after is learnt at once", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = storeWith(inner, {
      // Pub/sub delivers at most once: every 'resume' wake-up is lost.
      subscribe: (id, onWake) => inner.subscribe!(id, (e: WakeEvent) => e.type !== 'resume' && onWake(e)),
    });
    const { a, b, events, queued } = await subscribedPair(store, inner, clock);
    await a.pause(3_600_000);
    await a.resume();
    await flushMicrotasks();
    expect(events).toEqual(['pause manual', 'resume manual']);
    await clock.tickAsync(10);
    await b.pause(600_000);
    await flushMicrotasks();
    expect(events).toEqual(['pause manual', 'resume manual', 'pause remote']);
    expect(a.stats().pausedUntil).toBe(clock.now() + 600_000);
    await a.close();
    expect(queued.done).toBe(true);
  });

  it("the deleted pause's own wake-up, delivered 1.5 s late, does not bring it back (the store, asked, has none)", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = storeWith(inner, {
      // A slow subscriber connection, and the 'resume' wake-up lost.
      subscribe: (id, onWake) =>
        inner.subscribe!(id, (e: WakeEvent) => {
          if (e.type !== 'resume') clock.setTimeout(() => onWake(e), 1500);
        }),
    });
    const { a, events, queued } = await subscribedPair(store, inner, clock);
    await a.pause(3_600_000);
    await a.resume();
    await clock.tickAsync(1600);
    expect(events).toEqual(['pause manual', 'resume manual']);
    expect(a.stats().pausedUntil).toBeNull();
    await a.close();
    expect(queued.done).toBe(true);
  });

  it('store.resume failed: the pause still on the store is learnt again when a wake-up makes the valve ask', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = storeWith(inner, {
      resume: () => Promise.reject(new Error('down')),
    });
    const { a, b, events, queued } = await subscribedPair(store, inner, clock);
    a.on('store-error', () => {});
    const end = clock.now() + 3_600_000;
    await a.pause(3_600_000);
    await expect(a.resume()).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(a.stats().pausedUntil).toBeNull();
    await clock.tickAsync(10);
    // Another valve pauses for less: the store keeps (and announces) the hour still there.
    await b.pause(600_000);
    await flushMicrotasks();
    expect(events).toEqual(['pause manual', 'pause remote']);
    expect(a.stats().pausedUntil).toBe(end);
    await a.close();
    expect(queued.done).toBe(true);
  });

  for (const decideAt of [0, 5]) {
    it(`pause() then resume() in one tick on a store that decides them ${decideAt} ms after the call: no stray remote events`, async () => {
      // The store's 'pause' wake-up comes while store.resume is in flight: the valve asks the
      // store only once the resume answered (an answer decided before it would cache the deleted
      // pause again, and its 'resume' wake-up then emit a stray 'resume' { source: 'remote' }).
      const clock = new FakeClock();
      const store = spyStore(memoryStore({ clock }), clock);
      store.timing.pause = { delay: 10, decideAt };
      store.timing.resume = { delay: 10, decideAt: decideAt + 1 };
      const valve = createValve({ id: 'late', clock, store, rules: { limit: 1, interval: '1h' } });
      const events: string[] = [];
      valve.on('pause', (e) => events.push(`pause ${e.source}`));
      valve.on('resume', (e) => events.push(`resume ${e.source}`));
      await valve.run(() => 1);
      const queued = track(valve.run(() => 2));
      await flushMicrotasks();
      const both = Promise.all([valve.pause(60_000), valve.resume()]);
      await clock.tickAsync(20);
      await both;
      await flushMicrotasks();
      expect(events).toEqual(['pause manual', 'resume manual']);
      expect(valve.stats().pausedUntil).toBeNull();
      await valve.close();
      expect(queued.done).toBe(true);
    });
  }
});
