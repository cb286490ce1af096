import { describe, expect, it, vi } from 'vitest';
import { isValveError, ValveError } from '../../src/errors.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { count } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, setup, track } from './harness.js';

describe('run()', () => {
  it("resolves with the job's result and rejects with the job's error", async () => {
    const { valve } = setup({ rules: [] });
    await expect(valve.run(() => 42)).resolves.toBe(42);
    await expect(valve.run(async () => 'x')).resolves.toBe('x');
    const boom = new Error('boom');
    await expect(
      valve.run(() => {
        throw boom;
      }),
    ).rejects.toBe(boom);
    await expect(valve.run(() => Promise.reject(boom))).rejects.toBe(boom);
    expect(valve.stats()).toMatchObject({ started: 4, succeeded: 2, failed: 2, rejected: 0 });
  });

  it('gives the job a ctx with an AbortSignal (no lease without global concurrency)', async () => {
    const { valve } = setup({});
    const ctx = await valve.run((c) => c);
    expect(ctx.signal).toBeInstanceOf(AbortSignal);
    expect(ctx.signal.aborted).toBe(false);
    expect(ctx.lease).toBeUndefined();
  });

  it('never starts a job synchronously inside run(); admission happens once for a synchronous burst', async () => {
    const { valve, store } = setup({ rules: { limit: 1000, interval: '1s', burst: 1000 } });
    const started: number[] = [];
    const all = Array.from({ length: 100 }, (_, i) => valve.run(() => started.push(i)));
    expect(started).toEqual([]);
    expect(count(store, 'acquire')).toBe(0);
    await Promise.all(all);
    expect(started).toEqual(Array.from({ length: 100 }, (_, i) => i));
    // batch 32: 100 jobs in 4 store calls
    expect(store.acquires.map((a) => a.count)).toEqual([32, 32, 32, 4]);
  });

  it('asks for min(batch, free local slots) jobs', async () => {
    const { valve, store } = setup({ concurrency: 3, batch: 2 });
    const gates: (() => void)[] = [];
    const all = Array.from({ length: 6 }, () => valve.run(() => new Promise<void>((r) => gates.push(r))));
    await flushMicrotasks();
    expect(store.acquires.map((a) => a.count)).toEqual([2, 1]);
    expect(valve.stats()).toMatchObject({ running: 3, queued: 3 });
    gates.shift()!();
    await flushMicrotasks();
    expect(store.acquires.map((a) => a.count)).toEqual([2, 1, 1]);
    for (let i = 0; i < 6; i++) {
      gates.shift()?.();
      await flushMicrotasks();
    }
    await Promise.all(all);
  });

  it('spaces GCRA starts interval/limit apart, sleeping on the store hint with one timer', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 4, interval: 1000 } });
    const t0 = clock.now();
    const starts: number[] = [];
    const all = Array.from({ length: 5 }, () => valve.run(() => starts.push(clock.now() - t0)));
    await clock.tickAsync(1000);
    await Promise.all(all);
    expect(starts).toEqual([0, 250, 500, 750, 1000]);
    expect(clock.requested.filter((d) => d > 0)).toEqual([250, 250, 250, 250]);
    expect(count(store, 'acquire')).toBe(5);
    expect(clock.pending).toBe(0);
  });

  it('never catches up after late timers', async () => {
    const { valve, clock } = setup({ rules: { limit: 10, interval: 1000 } });
    clock.lateness = 37;
    const starts: number[] = [];
    const all = Array.from({ length: 6 }, () => valve.run(() => starts.push(clock.now())));
    await clock.tickAsync(2000);
    await Promise.all(all);
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(100);
    expect(starts[5]! - starts[0]!).toBeGreaterThanOrEqual(5 * 137);
  });

  it('respects local concurrency', async () => {
    const { valve, clock } = setup({ concurrency: 2 });
    let running = 0;
    let peak = 0;
    const all = Array.from({ length: 10 }, () =>
      valve.run(async () => {
        running++;
        peak = Math.max(peak, running);
        await new Promise<void>((r) => clock.setTimeout(r, 10));
        running--;
      }),
    );
    await clock.runAllAsync();
    await Promise.all(all);
    expect(peak).toBe(2);
  });

  it('rejects a cost no rule can ever admit at once, with a RangeError naming the rule', async () => {
    const { valve, store } = setup({
      rules: [
        { limit: 10, interval: '1s', burst: 5 },
        { limit: 3, interval: '1m', algorithm: 'fixed-window' },
      ],
    });
    const err = await valve.run(() => 1, { cost: 4 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RangeError);
    expect((err as Error).message).toMatch(/3 per 60000ms \(fixed-window\)/);
    expect((err as Error).message).toMatch(/got 4/);
    await expect(valve.run(() => 1, { cost: 3 })).resolves.toBe(1);
    expect(count(store, 'acquire')).toBe(1);
    expect(valve.stats().rejected).toBe(1);
  });

  it('refuses fractional costs: cost units are whole (a RangeError quoting the value, nothing spent)', async () => {
    const { valve, store } = setup({ rules: { limit: 1, interval: 1000 } });
    const wrapped = valve.wrap(() => 1, { cost: 1.5 });
    for (const [call, value] of [
      [() => valve.run(() => 1, { cost: 0.5 }), '0.5'],
      [() => valve.run(() => 1, { cost: 1 + 2 ** -52 }), String(1 + 2 ** -52)],
      [() => valve.run(() => 1, { cost: 2 ** 53 }), String(2 ** 53)],
      [() => wrapped(), '1.5'],
    ] as const) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RangeError);
      expect((error as Error).message).toBe(`Expected \`cost\` to be a positive integer, got ${value}`);
    }
    expect(count(store, 'acquire')).toBe(0);
    expect(valve.stats()).toMatchObject({ started: 0, rejected: 4 });
  });

  describe('bad per-call arguments reject (never throw) with TypeError/RangeError', () => {
    const cases: [string, () => Promise<unknown>, ErrorConstructor, RegExp][] = [];
    const { valve } = setup({ rules: { limit: 10, interval: '1s' } });
    cases.push(['job not a function', () => valve.run(42 as never), TypeError, /`job`.*got 42/]);
    cases.push(['cost 0', () => valve.run(() => 1, { cost: 0 }), RangeError, /`cost`.*got 0/]);
    cases.push(['cost -1', () => valve.run(() => 1, { cost: -1 }), RangeError, /`cost`.*got -1/]);
    cases.push(['cost NaN', () => valve.run(() => 1, { cost: Number.NaN }), RangeError, /`cost`.*NaN/]);
    cases.push(['cost Infinity', () => valve.run(() => 1, { cost: Infinity }), RangeError, /`cost`/]);
    cases.push(['cost string', () => valve.run(() => 1, { cost: '1' as never }), TypeError, /`cost`.*"1"/]);
    cases.push([
      'priority NaN',
      () => valve.run(() => 1, { priority: Number.NaN }),
      RangeError,
      /`priority`/,
    ]);
    cases.push([
      'priority string',
      () => valve.run(() => 1, { priority: 'hi' as never }),
      TypeError,
      /`priority`/,
    ]);
    cases.push(['signal', () => valve.run(() => 1, { signal: {} as never }), TypeError, /`signal`/]);
    cases.push(['maxWait 0', () => valve.run(() => 1, { maxWait: 0 }), RangeError, /`maxWait`.*got 0/]);
    cases.push(['maxWait -5', () => valve.run(() => 1, { maxWait: -5 }), RangeError, /`maxWait`/]);
    cases.push([
      'maxWait object',
      () => valve.run(() => 1, { maxWait: {} as never }),
      TypeError,
      /`maxWait`/,
    ]);
    cases.push(['unknown option', () => valve.run(() => 1, { prority: 1 } as never), TypeError, /prority/]);
    cases.push(['options not an object', () => valve.run(() => 1, 5 as never), TypeError, /options/]);
    for (const [name, call, type, message] of cases) {
      it(name, async () => {
        let promise: Promise<unknown> | undefined;
        expect(() => {
          promise = call();
        }).not.toThrow();
        const err = await promise!.catch((e: unknown) => e);
        expect(err).toBeInstanceOf(type);
        expect(isValveError(err)).toBe(false);
        expect((err as Error).message).toMatch(message);
      });
    }
  });
});

describe('ordering', () => {
  it('starts higher priorities first and keeps call order within a priority', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 100 } });
    const order: string[] = [];
    const jobs = [
      ['a', 0],
      ['b', 5],
      ['c', 0],
      ['d', 5],
      ['e', -1],
      ['f', 10],
      ['g', 0],
    ] as const;
    // The first job takes the only token; the others wait together.
    const first = valve.run(() => order.push('first'));
    await flushMicrotasks();
    const all = jobs.map(([name, priority]) => valve.run(() => order.push(name), { priority }));
    await clock.tickAsync(1000);
    await Promise.all([first, ...all]);
    expect(order).toEqual(['first', 'f', 'b', 'd', 'a', 'c', 'g', 'e']);
  });

  it('a refused batch goes back at its original positions, ahead of later arrivals', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 2, interval: 1000, burst: 2 } });
    const order: number[] = [];
    const all = [0, 1, 2, 3].map((i) => valve.run(() => order.push(i)));
    await flushMicrotasks();
    expect(order).toEqual([0, 1]);
    expect(store.acquires[0]!.count).toBe(4);
    all.push(valve.run(() => order.push(4)));
    await clock.tickAsync(2000);
    await Promise.all(all);
    expect(order).toEqual([0, 1, 2, 3, 4]);
  });

  it('a job arriving later with a higher priority goes ahead of refused ones', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 } });
    const order: string[] = [];
    const all = ['a', 'b', 'c'].map((n) => valve.run(() => order.push(n)));
    await flushMicrotasks();
    all.push(valve.run(() => order.push('vip'), { priority: 1 }));
    await clock.tickAsync(3000);
    await Promise.all(all);
    expect(order).toEqual(['a', 'vip', 'b', 'c']);
  });
});

describe('maxQueue and maxWait', () => {
  it('rejects QUEUE_FULL beyond maxQueue queued jobs', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 }, maxQueue: 2 });
    const a = valve.run(() => 'a');
    const b = valve.run(() => 'b');
    const c = valve.run(() => 'c');
    await expect(c).rejects.toSatisfy((e: unknown) => isValveError(e, 'QUEUE_FULL'));
    await flushMicrotasks();
    // 'a' started, so there is room again.
    const d = valve.run(() => 'd');
    await clock.tickAsync(2000);
    expect(await Promise.all([a, b, d])).toEqual(['a', 'b', 'd']);
    expect(valve.stats().rejected).toBe(1);
  });

  it('rejects MAX_WAIT when a job cannot start in time (valve default and per-job override)', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 }, maxWait: 1500 });
    const t0 = clock.now();
    const a = track(valve.run(() => 'a'));
    const b = track(valve.run(() => 'b'));
    const c = track(valve.run(() => 'c'));
    const d = track(valve.run(() => 'd', { maxWait: 500 }));
    const e = track(valve.run(() => 'e', { maxWait: Infinity }));
    await clock.tickAsync(499);
    expect(d.done).toBe(false);
    await clock.tickAsync(1);
    expect(d.done).toBe(true);
    expect(isValveError(d.error, 'MAX_WAIT')).toBe(true);
    await clock.tickAsync(1000);
    expect(c.done && isValveError(c.error, 'MAX_WAIT')).toBe(true);
    await clock.tickAsync(2000);
    expect([a.value, b.value, e.value]).toEqual(['a', 'b', 'e']);
    expect(clock.now() - t0).toBe(3500);
    expect(valve.stats()).toMatchObject({ rejected: 2, started: 3 });
  });

  it('expired and aborted jobs of a blocked queue do not stay in memory until they reach its head', async () => {
    const { valve, clock } = setup({});
    await valve.pause(3_600_000);
    const ac = new AbortController();
    const jobs = Array.from({ length: 10_000 }, (_, i) =>
      track(valve.run(() => i, i % 2 === 0 ? { maxWait: 100 } : { signal: ac.signal })),
    );
    const keeper = track(valve.run(() => 'kept'));
    await clock.tickAsync(50);
    ac.abort();
    await clock.tickAsync(50);
    expect(jobs.every((j) => j.done && !j.ok)).toBe(true);
    expect((valve as unknown as { waiting: { queue: { size: number } } }).waiting.queue.size).toBeLessThan(
      100,
    );
    expect(valve.stats().queued).toBe(1);
    await valve.resume();
    await clock.tickAsync(0);
    expect(keeper.value).toBe('kept');
  });

  it('accepts maxWait as a duration string', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 }, maxWait: '1s' });
    valve.run(() => 1);
    const late = track(valve.run(() => 2, { maxWait: '0.2s' }));
    await clock.tickAsync(200);
    expect(isValveError(late.error, 'MAX_WAIT')).toBe(true);
  });
});

describe('cancellation', () => {
  it('an already aborted signal rejects with its reason and never runs', async () => {
    const { valve, store } = setup({});
    const reason = new Error('stop');
    const job = vi.fn();
    await expect(valve.run(job, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    await flushMicrotasks();
    expect(job).not.toHaveBeenCalled();
    expect(count(store, 'acquire')).toBe(0);
    expect(valve.stats().rejected).toBe(1);
  });

  it('aborting while queued rejects at once with the reason and skips the job', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 } });
    const ac = new AbortController();
    const ran: string[] = [];
    const a = valve.run(() => ran.push('a'));
    const b = track(valve.run(() => ran.push('b'), { signal: ac.signal }));
    const c = valve.run(() => ran.push('c'));
    await flushMicrotasks();
    ac.abort('why');
    await flushMicrotasks();
    expect(b).toMatchObject({ done: true, ok: false, error: 'why' });
    expect(valve.stats().queued).toBe(1);
    await clock.tickAsync(1000);
    await Promise.all([a, c]);
    expect(ran).toEqual(['a', 'c']);
  });

  it('aborting while its acquisition is in flight: rejects at once, never runs, the grant stays spent', async () => {
    const { valve, clock, store } = setup({ rules: { limit: 1, interval: 1000 } });
    store.async = { delay: 10 };
    const ac = new AbortController();
    const job = vi.fn();
    const a = track(valve.run(job, { signal: ac.signal }));
    await flushMicrotasks();
    expect(count(store, 'acquire')).toBe(1);
    ac.abort(new Error('gone'));
    await flushMicrotasks();
    expect(a.done).toBe(true);
    expect((a.error as Error).message).toBe('gone');
    await clock.tickAsync(10);
    expect(job).not.toHaveBeenCalled();
    // The grant was spent: the next job waits for the next emission.
    const t0 = clock.now();
    let started = 0;
    const b = valve.run(() => {
      started = clock.now();
    });
    await clock.tickAsync(2000);
    await b;
    expect(started - t0).toBeGreaterThanOrEqual(980);
  });

  it("after the start, the caller's signal aborts ctx.signal and the job decides", async () => {
    const { valve, clock } = setup({});
    const ac = new AbortController();
    let seen: unknown;
    const p = valve.run(
      ({ signal }) =>
        new Promise((resolve) => {
          signal.addEventListener('abort', () => {
            seen = signal.reason;
            resolve('handled');
          });
        }),
      { signal: ac.signal },
    );
    await clock.tickAsync(5);
    ac.abort('late');
    await expect(p).resolves.toBe('handled');
    expect(seen).toBe('late');
  });

  it('a ctx.signal read after the abort is already aborted', async () => {
    const { valve } = setup({});
    const ac = new AbortController();
    let resolveGate!: () => void;
    const gate = new Promise<void>((r) => {
      resolveGate = r;
    });
    const p = valve.run(
      async (ctx) => {
        await gate;
        return ctx.signal.aborted;
      },
      { signal: ac.signal },
    );
    await flushMicrotasks();
    ac.abort();
    resolveGate();
    await expect(p).resolves.toBe(true);
  });
});

describe('close()', () => {
  it('rejects queued jobs with CLOSED, aborts running ones, and resolves when they settle', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 } });
    let reason: unknown;
    const a = valve.run(
      ({ signal }) =>
        new Promise((resolve) => {
          signal.addEventListener('abort', () => {
            reason = signal.reason;
            clock.setTimeout(() => resolve('a done'), 50);
          });
        }),
    );
    const b = track(valve.run(() => 'b'));
    await flushMicrotasks();
    const closed = track(valve.close());
    await flushMicrotasks();
    expect(isValveError(b.error, 'CLOSED')).toBe(true);
    expect(isValveError(reason, 'CLOSED')).toBe(true);
    expect(closed.done).toBe(false);
    await clock.tickAsync(50);
    expect(closed.done).toBe(true);
    await expect(a).resolves.toBe('a done');
    await expect(valve.run(() => 1)).rejects.toSatisfy((e: unknown) => isValveError(e, 'CLOSED'));
    expect(clock.pending).toBe(0);
  });

  it('with drain, queued jobs run first', async () => {
    const { valve, clock } = setup({ rules: { limit: 2, interval: 1000 } });
    const ran: number[] = [];
    const all = [0, 1, 2, 3].map((i) => valve.run(() => ran.push(i)));
    await flushMicrotasks();
    const closed = track(valve.close({ drain: true }));
    await expect(valve.run(() => 9)).rejects.toSatisfy((e: unknown) => isValveError(e, 'CLOSED'));
    await clock.tickAsync(1000);
    expect(closed.done).toBe(false);
    await clock.tickAsync(500);
    expect(closed.done).toBe(true);
    await Promise.all(all);
    expect(ran).toEqual([0, 1, 2, 3]);
  });

  it('a second close() without drain cuts a draining close short; close() is idempotent', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 1000 } });
    const all = [0, 1, 2].map((i) => track(valve.run(() => i)));
    await flushMicrotasks();
    const first = valve.close({ drain: true });
    const second = valve.close();
    expect(second).toBe(first);
    await clock.tickAsync(1);
    await first;
    expect(all.map((s) => s.ok)).toEqual([true, false, false]);
    expect(isValveError(all[1]!.error, 'CLOSED')).toBe(true);
  });

  it('rejects bad close() options', async () => {
    const { valve } = setup({});
    await expect(valve.close({ drain: 'yes' } as never)).rejects.toBeInstanceOf(TypeError);
    await expect(valve.close(3 as never)).rejects.toBeInstanceOf(TypeError);
  });
});

describe('events and stats', () => {
  it("emits 'idle' when the queue is empty and nothing runs", async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 100 } });
    const idle = vi.fn();
    valve.on('idle', idle);
    const all = [1, 2, 3].map((i) => valve.run(() => i));
    await clock.tickAsync(100);
    expect(idle).not.toHaveBeenCalled();
    await clock.tickAsync(100);
    await Promise.all(all);
    expect(idle).toHaveBeenCalledTimes(1);
    const last = valve.run(() => 4);
    await clock.tickAsync(100);
    await last;
    expect(idle).toHaveBeenCalledTimes(2);
  });

  it('a throwing listener does not break the scheduler (reported as a process warning)', async () => {
    const { valve } = setup({});
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const after = vi.fn();
    valve.on('pause', () => {
      throw new Error('listener bug');
    });
    valve.on('pause', after);
    await valve.pause(1);
    expect(after).toHaveBeenCalledTimes(1);
    expect(warn).toHaveBeenCalledTimes(1);
    expect((warn.mock.calls[0]![0] as Error).cause).toMatchObject({ message: 'listener bug' });
    warn.mockRestore();
  });

  it('once() listens once; off() removes on and once listeners', async () => {
    const { valve } = setup({});
    const a = vi.fn();
    const b = vi.fn();
    const c = vi.fn();
    valve.once('pause', a).on('pause', b).once('pause', c);
    valve.off('pause', c);
    await valve.pause(1);
    await valve.pause(2);
    valve.off('pause', b);
    await valve.pause(3);
    expect(a).toHaveBeenCalledTimes(1);
    expect(b).toHaveBeenCalledTimes(2);
    expect(c).not.toHaveBeenCalled();
  });

  it("has no 'error' event and validates names and listeners", () => {
    const { valve } = setup({});
    expect(() => valve.on('error' as never, () => {})).toThrow(/no 'error' event/);
    expect(() => valve.on('pause', 5 as never)).toThrow(TypeError);
  });

  it('counters only grow', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 100 }, maxQueue: 3 });
    const snapshots = [valve.stats()];
    const all = [1, 2, 3, 4].map((i) => track(valve.run(() => (i === 2 ? Promise.reject(new Error()) : i))));
    for (let i = 0; i < 5; i++) {
      await clock.tickAsync(100);
      snapshots.push(valve.stats());
    }
    for (let i = 1; i < snapshots.length; i++) {
      for (const key of ['started', 'succeeded', 'failed', 'rejected'] as const) {
        expect(snapshots[i]![key]).toBeGreaterThanOrEqual(snapshots[i - 1]![key]);
      }
    }
    expect(snapshots.at(-1)).toMatchObject({
      started: 3,
      succeeded: 2,
      failed: 1,
      rejected: 1,
      queued: 0,
      running: 0,
    });
    expect(all.every((s) => s.done)).toBe(true);
  });
});

describe('wrap()', () => {
  it('sends each call through run()', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: 100 } });
    const add = valve.wrap((a: number, b: number) => a + b, { priority: 1 });
    const results = [add(1, 2), add(3, 4)];
    await clock.tickAsync(100);
    expect(await Promise.all(results)).toEqual([3, 7]);
    expect(valve.stats().started).toBe(2);
    expect(() => valve.wrap(5 as never)).toThrow(TypeError);
  });
});

describe('default store', () => {
  it('each valve without a store gets a private memory store on its clock', async () => {
    const clock = new FakeClock();
    const a = createValve({ id: 'same', rules: { limit: 1, interval: 1000 }, clock });
    const b = createValve({ id: 'same', rules: { limit: 1, interval: 1000 }, clock });
    const both = [track(a.run(() => 1)), track(b.run(() => 2))];
    await flushMicrotasks();
    expect(both.map((s) => s.done)).toEqual([true, true]);
  });

  it('valves sharing a store instance and id share the budget', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'same', rules: { limit: 1, interval: 1000 }, clock, store });
    const b = createValve({ id: 'same', rules: { limit: 1, interval: 1000 }, clock, store });
    const first = track(a.run(() => 1));
    await flushMicrotasks();
    const second = track(b.run(() => 2));
    await clock.tickAsync(999);
    expect([first.done, second.done]).toEqual([true, false]);
    await clock.tickAsync(1);
    expect(second.done).toBe(true);
  });
});

it('ValveError is exported and branded', () => {
  expect(new ValveError('CLOSED', 'x')).toBeInstanceOf(Error);
});
