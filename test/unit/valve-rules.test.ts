/**
 * valve.setRules() and 'rule-mismatch' on the fake clock (memory store, through the spy).
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireRequest, Store } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { spyStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, setup, track } from './harness.js';

/** Lets fake time pass (100 ms steps) until `promise` settles; returns its outcome. */
async function settle<T>(clock: FakeClock, promise: Promise<T>): Promise<ReturnType<typeof track<T>>> {
  const state = track(promise);
  for (let i = 0; i < 200 && !state.done; i++) {
    await flushMicrotasks();
    if (!state.done) clock.advance(100);
  }
  return state;
}

describe('setRules()', () => {
  it('rejects bad rules with the TypeError or RangeError createValve() throws, as a rejected promise', async () => {
    const { valve } = setup({ rules: { limit: 5, interval: 1000 } });
    await expect(valve.setRules({ limit: 0, interval: 1000 })).rejects.toThrow(RangeError);
    await expect(valve.setRules({ limit: 0, interval: 1000 })).rejects.toThrow('`rules.limit`');
    await expect(valve.setRules([{ limit: 1, interval: 'soon' }])).rejects.toThrow('`rules[0].interval`');
    await expect(valve.setRules('10/s' as never)).rejects.toThrow(TypeError);
    await valve.close();
    await expect(valve.setRules({ limit: 5, interval: 1000 })).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('carries spent budget over: cutting 10 per second to 4 after 6 starts admits nothing more in that window', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const { valve, store } = setup(
      { rules: { limit: 10, interval: 1000, algorithm: 'fixed-window' } },
      clock,
    );
    const first = Array.from({ length: 6 }, () => valve.run(() => clock.now()));
    await Promise.all(first);
    await valve.setRules({ limit: 4, interval: 1000, algorithm: 'fixed-window' });
    const later = track(valve.run(() => clock.now()));
    await flushMicrotasks();
    expect(later.done).toBe(false);
    const convert = store.calls.filter((c) => c.op === 'acquire').map((c) => c.args[0] as AcquireRequest);
    expect(convert.at(-1)).toMatchObject({ convert: true });
    clock.advance(1000);
    await flushMicrotasks();
    expect(later.done).toBe(true);
    await valve.close();
  });

  it('rejects queued jobs whose cost the new rules can never admit, naming the rule; keeps the others in order', async () => {
    const clock = new FakeClock();
    const { valve } = setup({ rules: { limit: 1, interval: 1000, burst: 5 } }, clock);
    await settle(
      clock,
      valve.run(() => {}),
    );
    await settle(
      clock,
      valve.run(() => {}, { cost: 5 }),
    );
    const order: number[] = [];
    const a = track(valve.run(() => order.push(4), { cost: 4 }));
    const b = track(valve.run(() => order.push(1), { cost: 1 }));
    const c = track(valve.run(() => order.push(2), { cost: 2 }));
    await flushMicrotasks();
    await valve.setRules([
      { limit: 10, interval: 1000, burst: 10 },
      { limit: 1, interval: 1000, burst: 2 },
    ]);
    await flushMicrotasks();
    expect(a.done).toBe(true);
    expect(a.error).toBeInstanceOf(RangeError);
    expect(String(a.error)).toContain('`rules[1]`');
    expect(String(a.error)).toContain('got 4');
    for (let i = 0; i < 20 && !(b.done && c.done); i++) {
      clock.advance(1000);
      await flushMicrotasks();
    }
    expect(order).toEqual([1, 2]);
    await expect(valve.run(() => {}, { cost: 3 })).rejects.toThrow('`rules[1]`');
    await valve.close();
  });

  it('a job in flight during the change that the new rules cannot admit rejects once its call returns', async () => {
    const clock = new FakeClock();
    const { valve, store } = setup({ rules: { limit: 1, interval: 1000, burst: 3 } }, clock);
    await valve.run(() => {}, { cost: 3 });
    store.async = 'manual';
    const job = track(valve.run(() => {}, { cost: 3 }));
    await flushMicrotasks();
    expect(store.pending.length).toBe(1);
    await valve.setRules({ limit: 1, interval: 1000, burst: 2 });
    store.async = null;
    store.pending[0]!.resolve();
    await flushMicrotasks();
    expect(job.done).toBe(true);
    expect(job.error).toBeInstanceOf(RangeError);
    await valve.close();
  });

  it('keeps spending the old rules until one old interval has passed, then sends the new rules alone', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const { valve, store } = setup(
      { rules: { limit: 5, interval: 1000, algorithm: 'sliding-window' } },
      clock,
    );
    await Promise.all(Array.from({ length: 5 }, () => valve.run(() => {})));
    clock.advance(500);
    await valve.setRules({ limit: 8, interval: 1000, algorithm: 'sliding-window' });
    const starts: number[] = [];
    const jobs = Array.from({ length: 8 }, () => valve.run(() => starts.push(clock.now())));
    for (let i = 0; i < 40 && starts.length < 8; i++) {
      clock.advance(100);
      await flushMicrotasks();
    }
    await Promise.all(jobs);
    const t0 = 1_700_000_000_000;
    // Nothing before the old window of the first five ends (t0 + 1000): the old rule still holds.
    expect(Math.min(...starts)).toBeGreaterThanOrEqual(t0 + 1000);
    // Then 3 (the new limit counts the 5 spent at t0 while they are in its window), the rest after.
    expect(starts.filter((t) => t < t0 + 1500).length).toBe(3);
    const requests = store.calls.filter((c) => c.op === 'acquire').map((c) => c.args[0] as AcquireRequest);
    expect(requests.some((r) => r.previous !== undefined)).toBe(true);
    expect(requests.at(-1)!.previous).toBeUndefined();
    await valve.close();
  });
});

describe('setRules(): the conversion and the transition', () => {
  /** The memory store as another process sees it without a subscriber: no wake-ups. */
  function quietStore(inner: Store, log: AcquireRequest[]): Store {
    return {
      acquire: (r) => {
        log.push({ ...r });
        return inner.acquire(r);
      },
      pause: (id, ms) => inner.pause(id, ms),
      resume: (id) => inner.resume(id),
      renew: (id, t, ttl) => inner.renew(id, t, ttl),
      release: (id, t) => inner.release(id, t),
    };
  }

  it("converts when the first call after setRules() meets another process's pause", async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const inner = memoryStore({ clock });
    const log: AcquireRequest[] = [];
    const valve = createValve({
      id: 'p',
      store: quietStore(inner, log),
      clock,
      rules: { limit: 10, interval: 1000, algorithm: 'fixed-window' },
    });
    const starts: number[] = [];
    await Promise.all(Array.from({ length: 6 }, () => valve.run(() => starts.push(clock.now()))));
    inner.pause('p', 50);
    await valve.setRules({ limit: 4, interval: 1000, algorithm: 'fixed-window' });
    for (let i = 0; i < 10; i++) valve.run(() => starts.push(clock.now())).catch(() => {});
    for (let i = 0; i < 9; i++) {
      await flushMicrotasks();
      clock.advance(100);
    }
    await flushMicrotasks();
    // The first call met the pause (and converted): asked once, answered 'pause'.
    const converting = log.filter((r) => r.convert === true);
    expect(converting.length).toBe(1);
    // Cutting 10 per second to 4 after 6 starts admits nothing more in that window.
    expect(starts.filter((t) => t < 1_700_000_001_000).length).toBe(6);
    await valve.close({ drain: false }).catch(() => {});
  });

  it("converts during the valve's own pause (a cut of 10 per 2 min to 4 after 6 starts)", async () => {
    const t0 = 1_700_000_040_000; // aligned to 120 s
    const clock = new FakeClock(t0);
    const valve = createValve({
      id: 'p',
      store: memoryStore({ clock }),
      clock,
      rules: { limit: 10, interval: '2m', algorithm: 'fixed-window' },
    });
    const starts: number[] = [];
    await Promise.all(Array.from({ length: 6 }, () => valve.run(() => starts.push(clock.now()))));
    await valve.pause(45_000);
    await valve.setRules({ limit: 4, interval: '2m', algorithm: 'fixed-window' });
    for (let i = 0; i < 10; i++) valve.run(() => starts.push(clock.now())).catch(() => {});
    await clock.tickAsync(100_000);
    expect(starts.filter((t) => t < t0 + 120_000).length).toBe(6);
    await clock.tickAsync(40_000);
    // The next window: the new limit.
    expect(starts.filter((t) => t >= t0 + 120_000).length).toBe(4);
    await valve.close({ drain: false }).catch(() => {});
  });

  it('the call that asks for the conversion goes alone: nothing is pipelined behind it until it is answered', async () => {
    const t0 = 1_700_000_000_000;
    const clock = new FakeClock(t0);
    const { valve, store } = setup(
      { rules: { limit: 1000, interval: 1000, algorithm: 'fixed-window' } },
      clock,
    );
    store.async = { delay: 1 };
    const starts: number[] = [];
    for (let i = 0; i < 40; i++) valve.run(() => starts.push(clock.now())).catch(() => {});
    await clock.tickAsync(10);
    expect(starts.length).toBe(40);
    await valve.setRules({ limit: 900, interval: 1000, algorithm: 'fixed-window' });
    for (let i = 0; i < 200; i++) valve.run(() => starts.push(clock.now())).catch(() => {});
    await clock.tickAsync(500);
    expect(starts.length).toBe(240);
    const requests = store.calls.filter((c) => c.op === 'acquire').map((c) => c.args[0] as AcquireRequest);
    const asking = requests.findIndex((r) => r.convert === true);
    expect(requests.filter((r) => r.convert === true).length).toBe(1);
    // No other call was sent while it was in flight...
    const conversion = store.acquires[asking]!;
    const during = store.acquires.filter(
      (a) => a !== conversion && a.at >= conversion.at && a.at < conversion.repliedAt!,
    );
    expect(during).toEqual([]);
    // ...and pipelining resumed once it was answered.
    expect(store.maxInFlight).toBe(2);
    await valve.close({ drain: false }).catch(() => {});
  });

  it('a conversion call that fails does not let a call pipelined behind it spend the new rules unconverted', async () => {
    // Fixed window 1 per 1 s, one unit at 1 ms; cut to a sliding 1 per 10 s at 999 ms: the unit
    // counts for 10 s, whatever happens to the call that asks for the conversion.
    const clock = new FakeClock(1_700_000_000_000);
    const t0 = clock.now();
    const { valve, store } = setup({ rules: { limit: 1, interval: 1000, algorithm: 'fixed-window' } }, clock);
    store.async = { delay: 1 };
    valve.on('store-error', () => {});
    const starts: number[] = [];
    const run = () => valve.run(() => starts.push(clock.now() - t0)).catch(() => {});
    const first = run();
    await clock.tickAsync(999);
    await valve.setRules({ limit: 1, interval: 10_000, algorithm: 'sliding-window' });
    store.fail.acquire = new Error('down'); // the call that asks fails...
    const a = run();
    await flushMicrotasks();
    delete store.fail.acquire; // ...one sent behind it would succeed
    const b = run();
    await flushMicrotasks();
    await clock.tickAsync(30_000);
    await Promise.all([first, a, b]);
    const requests = store.calls.filter((c) => c.op === 'acquire').map((c) => c.args[0] as AcquireRequest);
    // Every call of the change that was answered before the conversion was, asked for it.
    const firstAnswered = requests.findIndex(
      (r, i) => r.convert === true && store.acquires[i]!.granted !== undefined,
    );
    for (let i = 0; i < firstAnswered; i++) {
      if (requests[i]!.previous !== undefined) expect(store.acquires[i]!.granted).toBeUndefined();
    }
    expect(starts.length).toBe(3);
    expect(starts[1]).toBeGreaterThanOrEqual(10_001);
    expect(starts[2]! - starts[1]!).toBeGreaterThanOrEqual(10_000);
  });

  it('a conversion call that failed is followed by another that asks', async () => {
    const t0 = 1_700_000_000_000;
    const clock = new FakeClock(t0);
    const { valve, store } = setup(
      { rules: { limit: 10, interval: 1000, algorithm: 'fixed-window' } },
      clock,
    );
    const starts: number[] = [];
    await Promise.all(Array.from({ length: 6 }, () => valve.run(() => starts.push(clock.now()))));
    valve.on('store-error', () => {});
    await valve.setRules({ limit: 4, interval: 1000, algorithm: 'fixed-window' });
    store.fail.acquire = new Error('down');
    for (let i = 0; i < 4; i++) valve.run(() => starts.push(clock.now())).catch(() => {});
    await flushMicrotasks();
    store.fail = {};
    for (let i = 0; i < 9; i++) {
      clock.advance(100);
      await flushMicrotasks();
    }
    const requests = store.calls.filter((c) => c.op === 'acquire').map((c) => c.args[0] as AcquireRequest);
    const after = requests.filter((r) => r.previous !== undefined);
    expect(after.length).toBeGreaterThanOrEqual(2);
    expect(after[0]!.convert).toBe(true);
    expect(after[1]!.convert).toBe(true);
    expect(starts.filter((t) => t < t0 + 1000).length).toBe(6);
    await valve.close({ drain: false }).catch(() => {});
  });

  it("a job costing more than an old rule's burst starts when the transition ends, not (cost − burst) emission intervals later", async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const t0 = clock.now();
    const valve = createValve({
      id: 'x',
      store: memoryStore({ clock }),
      clock,
      rules: { limit: 10, interval: '1m' }, // GCRA, burst 1: one per 6 s
    });
    await valve.run(() => {});
    await valve.setRules({ limit: 100, interval: '1m', burst: 100 });
    let bigAt = Number.NaN;
    let smallAt = Number.NaN;
    valve.run(() => (bigAt = clock.now() - t0), { cost: 50 }).catch(() => {});
    valve.run(() => (smallAt = clock.now() - t0)).catch(() => {});
    await clock.tickAsync(15 * 60_000);
    // The old rule binds until one of its intervals (60 s) after the change.
    expect(bigAt).toBeGreaterThanOrEqual(60_000);
    expect(bigAt).toBeLessThanOrEqual(61_000);
    expect(smallAt).toBeLessThanOrEqual(61_000);
    await valve.close({ drain: false }).catch(() => {});
  });
});

describe('setRules() twice within one interval', () => {
  it('100 per 10 s, then 1 per second, then 100 per minute: no minute holds more than 100 + burst − 1', async () => {
    // The 1/s rule the first change introduced has counted grants for a second only: it cannot
    // bound the minute before, so the second change takes the first rule's state alone.
    const clock = new FakeClock(1_700_000_000_000);
    const t0 = clock.now();
    const { valve } = setup({ rules: { limit: 100, interval: 10_000, burst: 100 } }, clock);
    const starts: number[] = [];
    const run = () => valve.run(() => starts.push(clock.now() - t0)).catch(() => {});
    const jobs = Array.from({ length: 100 }, run);
    await clock.tickAsync(500);
    await valve.setRules({ limit: 1, interval: 1_000 });
    jobs.push(run());
    await clock.tickAsync(1_000);
    await valve.setRules({ limit: 100, interval: 60_000, burst: 100 });
    for (let i = 0; i < 300; i++) jobs.push(run());
    await clock.tickAsync(130_000);
    await valve.close();
    await Promise.all(jobs);
    expect(starts.filter((t) => t < 1_000).length).toBe(100);
    for (const from of starts) {
      const inMinute = starts.filter((t) => t >= from && t < from + 60_000).length;
      expect(inMinute, `the minute from ${from} ms`).toBeLessThanOrEqual(199);
    }
  });
});

describe('setRules() again before the last change was converted', () => {
  it('the same rules twice before the next job: they are converted once, the old spend counts', async () => {
    // 10 per 10 s, all 10 spent; cut to 5 per minute twice (a limit re-applied): the minute
    // holding the 10 admits nothing more.
    const clock = new FakeClock(1_700_000_000_000);
    const t0 = clock.now();
    const { valve } = setup({ rules: { limit: 10, interval: 10_000, algorithm: 'sliding-window' } }, clock);
    const starts: number[] = [];
    const job = () => starts.push(clock.now() - t0);
    await Promise.all(Array.from({ length: 10 }, () => valve.run(job)));
    const cut = { limit: 5, interval: 60_000, algorithm: 'sliding-window' as const };
    await valve.setRules(cut);
    await valve.setRules(cut);
    for (let i = 0; i < 5; i++) valve.run(job).catch(() => {});
    await clock.tickAsync(20_000);
    expect(starts.filter((t) => t < 60_000)).toHaveLength(10);
    await valve.close({ drain: false }).catch(() => {});
  });

  it('rules set twice are not barred for good as evidence: a raise two hours later starts at once', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const hourly = (limit: number) => ({ limit, interval: 3_600_000, algorithm: 'sliding-window' as const });
    const { valve } = setup({ rules: hourly(5000) }, clock);
    await valve.run(() => 0);
    await valve.setRules(hourly(4000));
    await valve.setRules(hourly(4000));
    await valve.run(() => 0);
    await clock.tickAsync(2 * 3_600_000);
    await valve.run(() => 0);
    await valve.setRules(hourly(5000));
    const raised = track(valve.run(() => 0));
    await clock.tickAsync(1_000);
    expect(raised.ok).toBe(true);
    await valve.close();
  });
});

describe("setRules(): a job an old rule can never admit waits for the transition's end, no longer", () => {
  const H = 3_600_000;
  const D = 24 * H;
  const cases = [
    { name: 'GCRA 1 per 7 d (burst 1), cost 2', rules: { limit: 1, interval: '7d' }, cost: 2 },
    { name: 'GCRA 1 per 7 d (burst 1), cost 3', rules: { limit: 1, interval: '7d' }, cost: 3 },
    {
      name: 'fixed window 2 per 7 d, cost 3',
      rules: { limit: 2, interval: '7d', algorithm: 'fixed-window' },
      cost: 3,
    },
    {
      name: 'sliding window 2 per 7 d, cost 3',
      rules: { limit: 2, interval: '7d', algorithm: 'sliding-window' },
      cost: 3,
    },
  ] as const;
  for (const { name, rules, cost } of cases) {
    it(`${name}: starts when the transition ends (one old interval after the conversion)`, async () => {
      const clock = new FakeClock(1_700_000_000_000);
      const valve = createValve({ id: 't', clock, store: memoryStore({ clock }), rules });
      await valve.run(() => {}); // one unit spent at t0
      const t0 = clock.now();
      await clock.tickAsync(H);
      await valve.setRules({ limit: 5, interval: '7d', burst: 5 });
      const job = track(valve.run(() => clock.now() - t0, { cost }));
      await clock.tickAsync(7 * D - 1);
      expect(job.done).toBe(false);
      await clock.tickAsync(1);
      // The conversion was answered at t0 + 1 h: the old rules are dropped 7 d later, and the
      // wait the old rule told (14 d, or the next fixed window at 8 d) is cut there.
      expect(job.value).toBe(7 * D + H);
      await valve.close({ drain: false }).catch(() => {});
    });
  }
});

describe('setRules(): a wait the new rules set is followed', () => {
  it("a refusal by the stricter new rules is not cut at the transition's end", async () => {
    // It was: the valve asked again at the old interval's end (10 s) and was refused once more.
    const clock = new FakeClock(1_700_000_000_000);
    const store = spyStore(memoryStore({ clock }), clock);
    const valve = createValve({ id: 'follow', clock, store, rules: { limit: 1, interval: '10s' } });
    await valve.run(() => 1);
    valve.setRules({ limit: 1, interval: '1h' });
    const job = track(valve.run(() => 2));
    await clock.tickAsync(1);
    const first = store.acquires.at(-1)!;
    expect(first.blocked).toBe('rate');
    // The old spend counts in the new rule (converted): 2 h.
    expect(first.retryAfter).toBe(7_200_000);
    const calls = store.acquires.length;
    await clock.tickAsync(60_000);
    expect(store.acquires.length).toBe(calls);
    await clock.tickAsync(first.retryAfter!);
    expect(job).toMatchObject({ done: true, value: 2 });
    await valve.close();
  });
});

describe("'rule-mismatch'", () => {
  it('two valves on one id with different rules each get it once, with both rule sets', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'x', rules: { limit: 10, interval: '1s' }, store, clock });
    const b = createValve({
      id: 'x',
      rules: { limit: 20, interval: '1s', algorithm: 'fixed-window' },
      store,
      clock,
    });
    const seenA: unknown[] = [];
    const seenB: unknown[] = [];
    a.on('rule-mismatch', (e) => seenA.push(e));
    b.on('rule-mismatch', (e) => seenB.push(e));
    for (let i = 0; i < 3; i++) {
      await settle(
        clock,
        a.run(() => {}),
      );
      await settle(
        clock,
        b.run(() => {}),
      );
    }
    expect(seenB).toEqual([
      {
        id: 'x',
        rules: [{ limit: 20, interval: 1000, algorithm: 'fixed-window' }],
        recorded: [{ limit: 10, interval: 1000, algorithm: 'gcra', burst: 1 }],
      },
    ]);
    expect(seenA).toEqual([
      {
        id: 'x',
        rules: [{ limit: 10, interval: 1000, algorithm: 'gcra', burst: 1 }],
        recorded: [{ limit: 20, interval: 1000, algorithm: 'fixed-window' }],
      },
    ]);
    // Once a's rules change to b's, nothing more is reported.
    await a.setRules({ limit: 20, interval: '1s', algorithm: 'fixed-window' });
    for (let i = 0; i < 3; i++) {
      await settle(
        clock,
        a.run(() => {}),
      );
      await settle(
        clock,
        b.run(() => {}),
      );
    }
    expect(seenA.length + seenB.length).toBe(2);
    await a.close();
    await b.close();
  });

  it('is not emitted for valves with the same rules, nor for one valve alone', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({
      id: 'y',
      rules: [
        { limit: 10, interval: '1s' },
        { limit: 100, interval: '1m' },
      ],
      store,
      clock,
    });
    const b = createValve({
      id: 'y',
      rules: [
        { limit: 100, interval: '1m' },
        { limit: 10, interval: '1s' },
      ],
      store,
      clock,
    });
    let seen = 0;
    a.on('rule-mismatch', () => seen++);
    b.on('rule-mismatch', () => seen++);
    await settle(
      clock,
      a.run(() => {}),
    );
    await settle(
      clock,
      b.run(() => {}),
    );
    await a.setRules([
      { limit: 10, interval: '1s' },
      { limit: 100, interval: '1m' },
    ]);
    await settle(
      clock,
      a.run(() => {}),
    );
    expect(seen).toBe(0);
    await a.close();
    await b.close();
  });
});

describe("a valve group's keys and their rule-set record", () => {
  it('carry it on the first call, then once per quarter of idleTimeout (at most a minute): a mismatch reaches the earlier process then', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const store = memoryStore({ clock });
    const sent: (string | undefined)[] = [];
    const spy = Object.create(store) as typeof store;
    spy.acquire = (request: AcquireRequest) => {
      sent.push(request.record);
      return store.acquire(request);
    };
    const { createValveGroup } = await import('../../src/group.js');
    const a = createValveGroup({ rules: { limit: 10, interval: '1s' }, store: spy, clock });
    const b = createValveGroup({
      rules: { limit: 20, interval: '1s', algorithm: 'fixed-window' },
      store: spy,
      clock,
    });
    const seenA: unknown[] = [];
    const seenB: unknown[] = [];
    a.on('rule-mismatch', (e) => seenA.push(e));
    b.on('rule-mismatch', (e) => seenB.push(e));
    await settle(
      clock,
      a.run('k', () => {}),
    );
    await settle(
      clock,
      b.run('k', () => {}),
    );
    expect(seenB).toHaveLength(1);
    // Within 15 s a's calls carry no record: it has not heard of b's rules yet.
    await settle(
      clock,
      a.run('k', () => {}),
    );
    expect(sent.slice(0, 2).map((r) => r !== undefined)).toEqual([true, true]);
    expect(sent.slice(2).every((r) => r === undefined)).toBe(true);
    expect(seenA).toEqual([]);
    const before = sent.length;
    clock.advance(15_000);
    await settle(
      clock,
      b.run('k', () => {}),
    );
    await settle(
      clock,
      a.run('k', () => {}),
    );
    expect(sent.slice(before).filter((r) => r !== undefined)).toHaveLength(2);
    expect(seenA).toEqual([
      {
        id: 'k',
        rules: [{ limit: 10, interval: 1000, algorithm: 'gcra', burst: 1 }],
        recorded: [{ limit: 20, interval: 1000, algorithm: 'fixed-window' }],
      },
    ]);
    expect(seenB).toHaveLength(1);
    await Promise.all([a.close(), b.close()]);
  });
});
