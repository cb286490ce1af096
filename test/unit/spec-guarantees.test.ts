/**
 * Requirement sentences of the Guarantees / How valve works pages and of the API contract
 * that had no test able to fail (see docs/spec-coverage.md). Each test quotes its sentence.
 */
import { describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { JobContext } from '../../src/valve.js';
import { createValve } from '../../src/valve.js';
import { spyStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, setup, track } from './harness.js';

/** A job that holds until released. */
function holder() {
  const contexts: JobContext[] = [];
  const gates: (() => void)[] = [];
  const job = (ctx: JobContext) => {
    contexts.push(ctx);
    return new Promise<void>((resolve) => gates.push(resolve));
  };
  return { contexts, gates, job };
}

describe('Guarantees: Concurrency', () => {
  it('"Concurrency counts jobs, not cost": local concurrency 2 runs two jobs of cost 5, not one', async () => {
    const { valve } = setup({ rules: { limit: 100, interval: '1s', burst: 20 }, concurrency: 2 });
    const h = holder();
    const jobs = [
      valve.run(h.job, { cost: 5 }),
      valve.run(h.job, { cost: 5 }),
      valve.run(h.job, { cost: 1 }),
    ];
    await flushMicrotasks();
    expect(valve.stats()).toMatchObject({ running: 2, queued: 1 });
    h.gates.shift()!();
    await flushMicrotasks();
    expect(valve.stats()).toMatchObject({ running: 2, queued: 0 });
    for (const g of h.gates.splice(0)) g();
    await Promise.all(jobs);
  });

  it('"Concurrency counts jobs, not cost": global concurrency 2 holds one lease per job whatever its cost', async () => {
    const clock = new FakeClock();
    const store = spyStore(memoryStore({ clock }), clock);
    const valve = createValve({
      id: 'g',
      clock,
      store,
      rules: { limit: 100, interval: '1s', burst: 20 },
      concurrency: { limit: 2, scope: 'global', leaseTtl: 3000 },
    });
    const h = holder();
    const jobs = [
      valve.run(h.job, { cost: 7 }),
      valve.run(h.job, { cost: 7 }),
      valve.run(h.job, { cost: 1 }),
    ];
    await flushMicrotasks();
    expect(h.contexts).toHaveLength(2);
    expect(h.contexts.every((c) => c.lease !== undefined)).toBe(true);
    for (let i = 0; i < 3; i++) {
      h.gates.shift()?.();
      await clock.tickAsync(0);
    }
    await Promise.all(jobs);
    expect(h.contexts).toHaveLength(3);
  });
});

describe('Guarantees: Timing', () => {
  it('"With local concurrency, rate waits add no random jitter": starts land exactly on the GCRA schedule', async () => {
    const { valve, clock } = setup({ rules: { limit: 10, interval: '1s' }, concurrency: 3 });
    const random = vi.spyOn(Math, 'random');
    try {
      const t0 = clock.now();
      const starts: number[] = [];
      const jobs = Array.from({ length: 8 }, () => valve.run(() => starts.push(clock.now() - t0)));
      await clock.runAllAsync();
      await Promise.all(jobs);
      expect(starts).toEqual([0, 100, 200, 300, 400, 500, 600, 700]);
      expect(random).not.toHaveBeenCalled();
    } finally {
      random.mockRestore();
    }
  });

  it('"Waits caused by rate rules follow the store\'s retry hint" with global concurrency too (no poll, no jitter)', async () => {
    const clock = new FakeClock();
    const store = spyStore(memoryStore({ clock }), clock);
    const valve = createValve({
      id: 'gr',
      clock,
      store,
      rules: { limit: 10, interval: '1s' },
      concurrency: { limit: 5, scope: 'global', leaseTtl: 30_000 },
    });
    const t0 = clock.now();
    const starts: number[] = [];
    const jobs = Array.from({ length: 5 }, () => valve.run(() => starts.push(clock.now() - t0)));
    await clock.runAllAsync();
    await Promise.all(jobs);
    expect(starts).toEqual([0, 100, 200, 300, 400]);
    // One acquisition per start: the valve slept on each hint instead of polling.
    expect(store.acquires.filter((a) => a.at > t0).map((a) => a.at - t0)).toEqual([100, 200, 300, 400]);
  });

  it('"Every wakeup still asks the store, and another worker may have spent the budget first"', async () => {
    const clock = new FakeClock();
    // A store that keeps no line (a custom store may ignore `turn`): both valves race.
    const memory = memoryStore({ clock });
    const store = spyStore(
      {
        ...memory,
        acquire: (request) => memory.acquire({ ...request, turn: undefined }),
        pause: memory.pause.bind(memory),
        resume: memory.resume.bind(memory),
        renew: memory.renew.bind(memory),
        release: memory.release.bind(memory),
      },
      clock,
    );
    const rules = { limit: 1, interval: '1s' };
    const a = createValve({ id: 's', clock, store, rules });
    const b = createValve({ id: 's', clock, store, rules });
    const t0 = clock.now();
    const starts: [string, number][] = [];
    await a.run(() => starts.push(['a', clock.now() - t0]));
    // Both valves are refused now and both sleep on the same hint (1000 ms).
    const jobs = [
      a.run(() => starts.push(['a', clock.now() - t0])),
      b.run(() => starts.push(['b', clock.now() - t0])),
    ];
    await flushMicrotasks();
    const acquiresBefore = store.acquires.length;
    await clock.tickAsync(1000);
    // Exactly one of them got the budget at 1000; the other asked and was refused.
    expect(starts.slice(1)).toHaveLength(1);
    expect(starts[1]![1]).toBe(1000);
    expect(store.acquires.length - acquiresBefore).toBe(2);
    await clock.runAllAsync();
    await Promise.all(jobs);
    expect(starts.map(([, t]) => t)).toEqual([0, 1000, 2000]);
  });

  it('under a rule that cannot absorb a late turn (burst 1) valves take no part in the line of turns: no acquisition carries a ticket (src/pace.ts, joinsLine)', async () => {
    const clock = new FakeClock();
    const store = spyStore(memoryStore({ clock }), clock);
    const rules = { limit: 1, interval: '1s' };
    const a = createValve({ id: 's', clock, store, rules });
    const b = createValve({ id: 's', clock, store, rules });
    const t0 = clock.now();
    const starts: [string, number][] = [];
    await a.run(() => starts.push(['a', clock.now() - t0]));
    const jobs = [
      a.run(() => starts.push(['a', clock.now() - t0])),
      b.run(() => starts.push(['b', clock.now() - t0])),
    ];
    await clock.runAllAsync();
    await Promise.all(jobs);
    expect(starts.map(([, t]) => Math.round(t))).toEqual([0, 1000, 2000]);
    // The memory store keeps a line, but only for callers that send `turn`.
    const requests = store.calls.filter((c) => c.op === 'acquire').map((c) => c.args[0] as { turn?: number });
    expect(requests.length).toBeGreaterThan(2);
    expect(requests.filter((r) => r.turn !== undefined)).toEqual([]);
  });
});

describe('Guarantees: Ordering', () => {
  it('"A batch already sent to the store can receive grants before a newly arrived higher-priority job"', async () => {
    const { valve, store, clock } = setup({ rules: { limit: 1000, interval: '1s', burst: 10 } });
    store.async = { delay: 5 };
    const order: string[] = [];
    const low = [valve.run(() => order.push('low1')), valve.run(() => order.push('low2'))];
    await flushMicrotasks();
    expect(store.acquires).toHaveLength(1); // the low batch is on the wire
    const high = valve.run(() => order.push('high'), { priority: 10 });
    await clock.runAllAsync();
    await Promise.all([...low, high]);
    expect(order).toEqual(['low1', 'low2', 'high']);
  });
});

describe('API contract: cost', () => {
  it('a cost no rule can ever admit rejects with a RangeError naming the rule by its option path', async () => {
    const { valve } = setup({
      rules: [
        { limit: 10, interval: '1s', burst: 5 },
        { limit: 3, interval: '1m', algorithm: 'fixed-window' },
      ],
    });
    const err = await valve.run(() => 1, { cost: 4 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RangeError);
    expect((err as Error).message).toMatch(/`rules\[1\]`/);
    const single = setup({ rules: { limit: 10, interval: '1s' } }).valve;
    const err2 = await single.run(() => 1, { cost: 2 }).catch((e: unknown) => e);
    expect((err2 as Error).message).toMatch(/`rules`/);
    expect((err2 as Error).message).toMatch(/burst 1/);
  });
});

describe('API contract: a caller signal and an in-flight grant', () => {
  it('"the job never runs (even when a grant for it was in flight)": it rejects with signal.reason at once', async () => {
    const { valve, store, clock } = setup({});
    store.async = { delay: 10 };
    const ran = vi.fn();
    const controller = new AbortController();
    const job = track(valve.run(ran, { signal: controller.signal }));
    await flushMicrotasks();
    expect(store.acquires).toHaveLength(1);
    controller.abort('gone');
    await flushMicrotasks();
    expect(job).toMatchObject({ done: true, ok: false, error: 'gone' });
    await clock.runAllAsync();
    expect(ran).not.toHaveBeenCalled();
    expect(valve.stats()).toMatchObject({ started: 0, rejected: 1, queued: 0 });
  });
});

describe('API contract: events', () => {
  it('"an unheard event must never crash the process": an async listener that rejects is reported, not left unhandled', async () => {
    const { valve, clock } = setup({});
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const unhandled = vi.fn();
    process.on('unhandledRejection', unhandled);
    try {
      const after = vi.fn();
      valve.on('pause', async () => {
        throw new Error('async listener bug');
      });
      valve.once('pause', async () => {
        throw new Error('async once listener bug');
      });
      valve.on('pause', after);
      await valve.pause(10);
      await flushMicrotasks();
      await new Promise((r) => setImmediate(r));
      expect(after).toHaveBeenCalledTimes(1);
      expect(warn).toHaveBeenCalledTimes(2);
      expect((warn.mock.calls[0]![0] as Error).cause).toMatchObject({ message: 'async listener bug' });
      expect((warn.mock.calls[1]![0] as Error).cause).toMatchObject({ message: 'async once listener bug' });
      expect(unhandled).not.toHaveBeenCalled();
      await clock.runAllAsync();
      const alive = valve.run(() => 'alive');
      await clock.runAllAsync();
      await expect(alive).resolves.toBe('alive');
    } finally {
      process.off('unhandledRejection', unhandled);
      warn.mockRestore();
    }
  });
});

describe('API contract: store options are validated like createValve options', () => {
  it('memoryStore() rejects an unknown option, naming it (a typo must not silently fall back to the system clock)', () => {
    expect(() => memoryStore({ clok: new FakeClock() } as never)).toThrow(TypeError);
    expect(() => memoryStore({ clok: new FakeClock() } as never)).toThrow(/`clok`/);
    expect(() => memoryStore({ clock: new FakeClock() })).not.toThrow();
    // null is not "the default" (docs/errors.md).
    expect(() => memoryStore({ clock: null as never })).toThrow(
      /`options.clock` to be a Clock with now\(\), got null/,
    );
    expect(() => memoryStore({})).not.toThrow();
    expect(() => memoryStore()).not.toThrow();
  });
});

describe('Guarantees: "resume() deletes it" (a late store answer does not bring the pause back)', () => {
  it('a pause answered after resume() was called does not keep this valve paused', async () => {
    const { valve, store, clock } = setup({});
    store.async = { delay: 5 };
    const paused = valve.pause(60_000);
    const resumed = valve.resume(); // sent after the pause: the store ends with no pause
    await clock.tickAsync(10);
    await Promise.all([paused, resumed]);
    expect(valve.stats().pausedUntil).toBeNull();
    const job = track(valve.run(() => 'ran'));
    await clock.tickAsync(20);
    expect(job).toMatchObject({ done: true, value: 'ran' });
  });

  it('an acquisition answered with a pause after resume() was called does not keep this valve paused', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store = spyStore(inner, clock);
    store.async = { delay: 5 };
    store.subscribe = undefined; // like redisStore without a subscriber: no wake-up rescues it
    const valve = createValve({ id: 'r', clock, store });
    inner.pause('r', 60_000); // another process paused the id; this valve does not know yet
    const first = track(valve.run(() => 'first'));
    await flushMicrotasks(); // its acquisition is on the wire and will report the pause
    const resumed = valve.resume();
    await clock.tickAsync(10);
    await resumed;
    expect(valve.stats().pausedUntil).toBeNull();
    await clock.tickAsync(20);
    expect(first).toMatchObject({ done: true, value: 'first' });
  });
});

describe('Guarantees: a resume from another valve, heard through the subscriber, is not undone by a late reply', () => {
  it("this valve's pause reply that arrives after the remote resume's wake-up does not re-cache the deleted pause", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    // The pause is applied at the store at once; its reply reaches the valve only when we say so.
    const slow = spyStore(inner, clock);
    slow.timing.pause = 'manual';
    const answer = () => slow.pending.shift()!.resolve();
    const a = createValve({ id: 'x', clock, store: slow });
    const b = createValve({ id: 'x', clock, store: inner });
    // a subscribes on its first acquisition and listens while it has work (a running job).
    let finish = () => {};
    const busy = track(a.run(() => new Promise<void>((resolve) => (finish = resolve))));
    await flushMicrotasks();
    const paused = a.pause(60_000);
    await b.resume(); // the store's pause is gone; a hears 'resume'
    await flushMicrotasks();
    answer(); // now a's pause reply arrives, stale
    await paused;
    expect(a.stats().pausedUntil).toBeNull();
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(5);
    expect(job).toMatchObject({ done: true, value: 'ran' });
    finish();
    await flushMicrotasks();
    expect(busy.done).toBe(true);
  });
});
