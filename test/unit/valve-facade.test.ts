/**
 * The façade (src/valve.ts, src/run-options.ts): run() and its per-call checks, wrap(), close(),
 * events and stats, the default store.
 */
import { describe, expect, it, vi } from 'vitest';
import { isValveError, ValveError } from '../../src/errors.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { count } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, setup, track } from './harness.js';

describe('run()', () => {
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

  it('a sliding window: a cost above its limit rejects at once naming the rule; up to the limit starts at once', async () => {
    const { valve, clock } = setup({
      rules: [{ limit: 3, interval: '1s', algorithm: 'sliding-window' }],
    });
    const err = await valve.run(() => 1, { cost: 4 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RangeError);
    expect((err as Error).message).toMatch(/`rules\[0\]`, 3 per 1000ms \(sliding-window\)/);
    expect((err as Error).message).toMatch(/got 4/);
    const t0 = clock.now();
    const starts: number[] = [];
    const all = [3, 1, 2].map((cost) => valve.run(() => starts.push(clock.now() - t0), { cost }));
    await clock.tickAsync(2000);
    await Promise.all(all);
    // 3 at once; the 1 and the 2 together, exactly when the 3 units leave the window.
    expect(starts).toEqual([0, 1000, 1000]);
  });

  it('refuses fractional costs: cost units are whole (a RangeError quoting the value, nothing spent)', async () => {
    const { valve, store } = setup({ rules: { limit: 1, interval: 1000 } });
    // wrap() checks its options when it wraps (a programming error, thrown at once).
    expect(() => valve.wrap(() => 1, { cost: 1.5 })).toThrow(
      new RangeError('Expected `cost` to be a positive integer, got 1.5'),
    );
    for (const [call, value] of [
      [() => valve.run(() => 1, { cost: 0.5 }), '0.5'],
      [() => valve.run(() => 1, { cost: 1 + 2 ** -52 }), String(1 + 2 ** -52)],
      [() => valve.run(() => 1, { cost: 2 ** 53 }), String(2 ** 53)],
    ] as const) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RangeError);
      expect((error as Error).message).toBe(`Expected \`cost\` to be a positive integer, got ${value}`);
    }
    expect(count(store, 'acquire')).toBe(0);
    expect(valve.stats()).toMatchObject({ started: 0, rejected: 3 });
  });

  it('a job result whose `then` cannot be read rejects the job with that error; close() still resolves', async () => {
    const { valve, clock } = setup({ rules: { limit: 100, interval: '1s' } });
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const boom = new Error('then getter');
    const hostile = {
      // biome-ignore lint/suspicious/noThenProperty: a hostile thenable on purpose
      get then() {
        throw boom;
      },
    };
    // A `then` that is no function: a plain value.
    const plain = Object.fromEntries([['then', 5]]);
    const a = track(valve.run(() => proxy));
    const b = track(valve.run(() => hostile));
    const c = track(valve.run(() => plain));
    await clock.tickAsync(100);
    expect(a.error).toBeInstanceOf(TypeError);
    expect(b.error).toBe(boom);
    expect(c.value).toBe(plain);
    expect(valve.stats()).toMatchObject({ running: 0, failed: 2, succeeded: 1 });
    const closed = track(valve.close());
    await flushMicrotasks();
    expect(closed.done).toBe(true);
  });

  it('options whose reading throws (a getter, a revoked Proxy) reject: run() never throws', async () => {
    const { valve } = setup({ rules: { limit: 100, interval: '1s' } });
    const getter = new Error('getter');
    const options = {
      get cost(): number {
        throw getter;
      },
    };
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    let run!: Promise<unknown>;
    expect(() => {
      run = valve.run(() => 1, options);
    }).not.toThrow();
    await expect(run).rejects.toBe(getter);
    await expect(valve.run(() => 1, proxy as never)).rejects.toThrow(TypeError);
    expect(valve.stats()).toMatchObject({ started: 0, rejected: 2 });
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

describe('close()', () => {
  it('resolves after the handlers of every job it ended: queued (CLOSED), running, and in a race', async () => {
    const { valve, clock } = setup({ rules: { limit: 1, interval: '1h' } });
    await clock.tickAsync(0);
    const log: string[] = [];
    await valve.run(() => 1);
    valve.run(() => 2).catch(() => log.push('queued job'));
    valve
      .run(() => 3)
      .then(
        () => log.push('never'),
        () => log.push('second queued job'),
      );
    const raced = valve
      .run(() => 4)
      .then(
        () => 'job',
        () => 'job',
      );
    const running = createValve({ id: 'running', clock, rules: { limit: 10, interval: '1s' } });
    running
      .run(
        (ctx) =>
          new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))),
      )
      .catch(() => log.push('running job'));
    await clock.tickAsync(0);
    const first = Promise.race([raced, valve.close().then(() => 'close')]);
    await running.close();
    log.push('running closed');
    expect(await first).toBe('job');
    log.push('closed');
    expect(log).toEqual(['queued job', 'second queued job', 'running job', 'running closed', 'closed']);
  });

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

  it("emits 'idle' when close() rejects the queued jobs and nothing runs", async () => {
    // No round of admission followed close(): the valve went idle without saying so.
    const { valve, clock } = setup({ rules: { limit: 1, interval: '1h' } });
    const idle = vi.fn();
    valve.on('idle', idle);
    await valve.run(() => 1);
    await flushMicrotasks();
    expect(idle).toHaveBeenCalledTimes(1);
    const queued = track(valve.run(() => 2));
    await clock.tickAsync(10);
    expect(idle).toHaveBeenCalledTimes(1);
    await valve.close();
    await flushMicrotasks();
    expect(queued).toMatchObject({ done: true, ok: false });
    expect(idle).toHaveBeenCalledTimes(2);
    // A valve closed with nothing queued or running since its last 'idle' does not repeat it.
    const { valve: quiet } = setup({});
    const quietIdle = vi.fn();
    quiet.on('idle', quietIdle);
    await quiet.run(() => 1);
    await flushMicrotasks();
    await quiet.close();
    await flushMicrotasks();
    expect(quietIdle).toHaveBeenCalledTimes(1);
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

  it('checks its options when it wraps, as docs/errors.md says, not at each call', () => {
    const { valve } = setup({ rules: { limit: 1, interval: 100 } });
    const fn = () => 1;
    expect(() => valve.wrap(fn, { cost: -1 })).toThrow(RangeError);
    expect(() => valve.wrap(fn, { cost: -1 })).toThrow(/`cost`.*got -1/);
    expect(() => valve.wrap(fn, { priority: '1' as never })).toThrow(TypeError);
    expect(() => valve.wrap(fn, { maxWait: 'soon' as never })).toThrow(/`maxWait`/);
    expect(() => valve.wrap(fn, { coast: 1 } as never)).toThrow(/Unknown option `coast`/);
    expect(() => valve.wrap(fn, null as never)).toThrow(TypeError);
    expect(typeof valve.wrap(fn, { cost: 1, priority: 2, maxWait: '1s' })).toBe('function');
  });

  it("throws run()'s RangeError for a cost the current rules can never admit; setRules() later is checked per call", async () => {
    // It returned a function whose every call rejected.
    const { valve } = setup({ rules: { limit: 10, interval: '1s' } }); // burst 1
    const fn = () => 'ran';
    expect(() => valve.wrap(fn, { cost: 5 })).toThrow(RangeError);
    expect(() => valve.wrap(fn, { cost: 5 })).toThrow(/at most 1 .*got 5/);
    const wrapped = valve.wrap(fn, { cost: 1 });
    await expect(wrapped()).resolves.toBe('ran');
    // Wrapped under rules that admit it, then refused per call once the rules change.
    await valve.setRules({ limit: 10, interval: '1s', burst: 5 });
    const five = valve.wrap(fn, { cost: 5 });
    await valve.setRules({ limit: 10, interval: '1s' });
    await expect(five()).rejects.toThrow(RangeError);
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
