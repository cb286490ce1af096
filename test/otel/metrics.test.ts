/**
 * valve/otel end to end through the OpenTelemetry SDK: a run of known jobs, rejections, pauses
 * and store failures on a FakeClock gives the expected counts and histogram sums, for a valve
 * and for a valve group (one series, or one per key with includeId).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { createValveGroup } from '../../src/group.js';
import { OBSERVE, type ValveObserver } from '../../src/observer.js';
import { errorType } from '../../src/otel/instruments.js';
import { instrument, instrumentStore } from '../../src/otel.js';
import { memoryStore } from '../../src/stores/memory.js';
import { ACQUIRE_WITH, type AcquireRequest, type AcquireWith, type Store } from '../../src/stores/store.js';
import type { Valve } from '../../src/types.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';
import { count, type SpyStore, spyMemoryStore } from '../helpers/spy-store.js';
import { collect, type Histogram, meterSetup } from './reader.js';

class StoreDown extends Error {
  override name = 'StoreDown';
}

const quiet = () => {};
const observerOf = (valve: Valve): ValveObserver | null => {
  const v = valve as unknown as { [OBSERVE](o: ValveObserver | null): ValveObserver | null };
  const current = v[OBSERVE](null);
  v[OBSERVE](current);
  return current;
};

let cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.reverse()) await fn();
  cleanup = [];
});

describe('instrument(valve): a known run', () => {
  it('counts starts, rejections by error.type, pauses by source, store calls and failures; the wait histogram sums the waits', async () => {
    const { reader, meter, provider } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const clock = new FakeClock();
    const spy = spyMemoryStore(clock);
    // Pauses and resumes take 20 ms of the store's time: their durations are known exactly.
    spy.timing.pause = { delay: 20 };
    spy.timing.resume = { delay: 20 };
    const store = instrumentStore(spy, { meter, clock });
    const valve = createValve({
      id: 'api',
      rules: { limit: 1, interval: '1s' },
      store,
      clock,
      maxQueue: 3,
      onStoreError: 'throw',
    });
    valve.on('store-error', quiet);
    const handle = instrument(valve, { meter, attributes: { 'service.component': 'github' } });
    const base = { 'service.component': 'github' };

    // Three jobs at once under 1/s: they start after 0, 1 and 2 s. A fourth is refused (maxQueue 3).
    const results: unknown[] = [];
    for (let i = 0; i < 3; i++) void valve.run(() => results.push(i));
    const full = valve.run(() => 'never');
    await expect(full).rejects.toMatchObject({ code: 'QUEUE_FULL' });
    await flushMicrotasks();
    let m = await collect(reader);
    expect(m.value('valve.job.started', base)).toBe(1);
    expect(m.value('valve.job.queued', base)).toBe(2);
    expect(m.value('valve.job.running', base)).toBe(0);
    await clock.tickAsync(2000);
    expect(results).toEqual([0, 1, 2]);

    // A job that cannot start within its maxWait, one with an aborted signal, one with a bad cost.
    const late = valve.run(() => 'late', { maxWait: 500 });
    await expect(valve.run(() => 1, { signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: 'AbortError',
    });
    await expect(valve.run(() => 1, { cost: 0 })).rejects.toBeInstanceOf(RangeError);
    await clock.tickAsync(500);
    await expect(late).rejects.toMatchObject({ code: 'MAX_WAIT' });

    // A job that runs until the test lets it finish: counted as running.
    let finish!: () => void;
    const long = valve.run(() => new Promise<void>((resolve) => (finish = resolve)));
    await clock.tickAsync(1000);
    m = await collect(reader);
    expect(m.value('valve.job.running', base)).toBe(1);
    finish();
    await long;

    // A manual pause, then a 429 read by observe(): pauses by source, and the valve is paused (by retry-after).
    const pausing = valve.pause(5000);
    await clock.tickAsync(20);
    await pausing;
    valve.observe({ status: 429, headers: { 'retry-after': '10' } });
    await clock.tickAsync(20);
    m = await collect(reader);
    expect(m.value('valve.pauses', { ...base, 'valve.pause.source': 'manual' })).toBe(1);
    expect(m.value('valve.pauses', { ...base, 'valve.pause.source': 'retry-after' })).toBe(1);
    expect(m.points('valve.paused')).toHaveLength(1);
    expect(m.value('valve.paused', { ...base, 'valve.pause.source': 'retry-after' })).toBe(1);

    // A job queued during the pause, then the store fails (onStoreError: 'throw'): STORE_UNAVAILABLE.
    const blocked = valve.run(() => 'blocked');
    const resuming = valve.resume();
    await clock.tickAsync(20);
    await resuming;
    m = await collect(reader);
    expect(m.value('valve.paused', { ...base, 'valve.pause.source': 'retry-after' })).toBe(0);
    spy.fail.acquire = new StoreDown('store down');
    await clock.tickAsync(1000);
    await expect(blocked).rejects.toSatisfy((e) => isValveError(e, 'STORE_UNAVAILABLE'));
    spy.fail.acquire = undefined;

    // Closed with a job still queued: CLOSED.
    const pausing2 = valve.pause(60_000);
    await clock.tickAsync(20);
    await pausing2;
    const queuedAtClose = valve.run(() => 'closed');
    await clock.tickAsync(20);
    const closing = valve.close();
    await expect(queuedAtClose).rejects.toMatchObject({ code: 'CLOSED' });
    await clock.tickAsync(20);
    await closing;

    m = await collect(reader);
    expect(m.value('valve.job.started', base)).toBe(4);
    const wait = m.value<Histogram>('valve.job.wait.duration', base)!;
    expect(wait.count).toBe(4);
    // 0 + 1 + 2 s for the first three, 1 s for the long job (queued right after the maxWait one expired: the
    // next slot after 2 s is 3 s; it was queued at 2.5 s, started at 3 s: 0.5 s).
    expect(wait.sum).toBeCloseTo(0 + 1 + 2 + 0.5, 6);
    expect(wait.min).toBe(0);
    expect(wait.max).toBeCloseTo(2, 6);
    const rejected = Object.fromEntries(
      m.points('valve.job.rejected').map((p) => [p.attributes['error.type'], p.value]),
    );
    expect(rejected).toEqual({
      QUEUE_FULL: 1,
      MAX_WAIT: 1,
      AbortError: 1,
      RangeError: 1,
      STORE_UNAVAILABLE: 1,
      CLOSED: 1,
    });
    expect(valve.stats().rejected).toBe(6);
    expect(
      m.value('valve.store.errors', {
        ...base,
        'valve.store.operation.name': 'acquire',
        'error.type': 'StoreDown',
      }),
    ).toBe(1);

    // Store calls: one data point per operation (and per error.type), counted as the spy saw them.
    const storeCalls = (operation: string, error?: string) =>
      m.value<Histogram>('valve.store.operation.duration', {
        'valve.store.operation.name': operation,
        ...(error ? { 'error.type': error } : {}),
      });
    expect(storeCalls('acquire', 'StoreDown')!.count).toBe(1);
    expect(storeCalls('acquire')!.count).toBe(count(spy, 'acquire') - 1);
    expect(storeCalls('acquire')!.sum).toBe(0); // a synchronous store on a clock that does not move
    expect(storeCalls('pause')).toMatchObject({
      count: count(spy, 'pause'),
      sum: expect.closeTo(count(spy, 'pause') * 0.02, 9),
    });
    expect(count(spy, 'pause')).toBe(3);
    expect(storeCalls('resume')).toMatchObject({ count: 1, sum: expect.closeTo(0.02, 9) });
    // The kinds and units OpenTelemetry's conventions give such things.
    const kinds = Object.fromEntries(m.names().map((name) => [name, m.descriptor(name)]));
    expect(kinds).toMatchObject({
      'valve.job.wait.duration': { unit: 's', kind: 'HISTOGRAM' },
      'valve.store.operation.duration': { unit: 's', kind: 'HISTOGRAM' },
      'valve.job.started': { unit: '{job}', kind: 'SUM', monotonic: true },
      'valve.job.rejected': { unit: '{job}', kind: 'SUM', monotonic: true },
      'valve.job.queued': { unit: '{job}', kind: 'SUM', monotonic: false },
      'valve.job.running': { unit: '{job}', kind: 'SUM', monotonic: false },
      'valve.paused': { unit: '{valve}', kind: 'SUM', monotonic: false },
      'valve.pauses': { unit: '{pause}', kind: 'SUM', monotonic: true },
      'valve.store.errors': { unit: '{error}', kind: 'SUM', monotonic: true },
    });
    handle.stop();
  });

  it('stop() detaches: later jobs are not counted; the valve may be instrumented again', async () => {
    const { reader, meter, provider } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const valve = createValve({ id: 'api' });
    cleanup.push(() => valve.close());
    const handle = instrument(valve, { meter, includeId: true });
    expect(() => instrument(valve, { meter })).toThrow(/already instrumented/);
    await valve.run(() => 1);
    expect((await collect(reader)).value('valve.job.started', { 'valve.id': 'api' })).toBe(1);
    handle.stop();
    handle.stop();
    expect(observerOf(valve)).toBeNull();
    await valve.run(() => 1);
    // The series keeps its count, which no longer moves.
    expect((await collect(reader)).value('valve.job.started', { 'valve.id': 'api' })).toBe(1);
    const again = instrument(valve, { meter });
    await valve.run(() => 1);
    await valve.run(() => 1);
    expect((await collect(reader)).value('valve.job.started')).toBe(2);
    again.stop();
  });

  it('a job queued before instrument() is counted when it starts, without a wait (unknown)', async () => {
    const { reader, meter, provider } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const clock = new FakeClock();
    const valve = createValve({ id: 'api', rules: { limit: 1, interval: '1s' }, clock });
    cleanup.push(() => valve.close());
    void valve.run(() => 1);
    const second = valve.run(() => 2);
    await flushMicrotasks();
    instrument(valve, { meter });
    await clock.tickAsync(1000);
    await second;
    const m = await collect(reader);
    expect(m.value('valve.job.started')).toBe(1);
    expect(m.points('valve.job.wait.duration')).toEqual([]);
  });

  it('leases lost are counted by reason', async () => {
    const { reader, meter, provider } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const clock = new FakeClock();
    const spy = spyMemoryStore(clock);
    const valve = createValve({
      id: 'api',
      clock,
      store: spy,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 3000 },
    });
    instrument(valve, { meter });
    let finish!: () => void;
    const job = valve.run(() => new Promise<void>((resolve) => (finish = resolve)));
    await clock.tickAsync(0);
    // The store forgets the lease: the next renewal (after ttl / 3) says it is not held.
    spy.renew = () => [false];
    await clock.tickAsync(1000);
    finish();
    await expect(job).rejects.toMatchObject({ code: 'LEASE_LOST' });
    const m = await collect(reader);
    expect(m.value('valve.lease.lost', { 'valve.lease.lost.reason': 'not-held' })).toBe(1);
    expect(m.value('valve.job.started')).toBe(1);
    await valve.close();
  });
});

describe('instrument(group)', () => {
  const run = async (includeId: boolean) => {
    const { reader, meter, provider } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const clock = new FakeClock();
    const group = createValveGroup({ rules: { limit: 1, interval: '1s' }, clock, idleTimeout: '10s' });
    const handle = instrument(group, { meter, includeId });
    // Two jobs for 'a' (the second waits 1 s), one for 'b'.
    const jobs = [group.run('a', () => 'a1'), group.run('a', () => 'a2'), group.run('b', () => 'b1')];
    await flushMicrotasks();
    const early = await collect(reader);
    await clock.tickAsync(1000);
    await Promise.all(jobs);
    await group.valve('b').pause(2000);
    const m = await collect(reader);
    return { reader, clock, group, handle, early, m };
  };

  it('without includeId, every key reports into one series', async () => {
    const { reader, clock, group, handle, early, m } = await run(false);
    expect(early.value('valve.job.queued')).toBe(1);
    expect(m.value('valve.job.started')).toBe(3);
    expect(m.value<Histogram>('valve.job.wait.duration')).toMatchObject({
      count: 3,
      sum: expect.closeTo(1, 6),
    });
    expect(m.value('valve.pauses', { 'valve.pause.source': 'manual' })).toBe(1);
    expect(m.value('valve.paused', { 'valve.pause.source': 'manual' })).toBe(1);
    expect(m.points('valve.job.started').every((p) => !('valve.id' in p.attributes))).toBe(true);
    // The valves are evicted after idleTimeout: their counts stay in the series.
    await clock.tickAsync(15_000);
    expect(group.size).toBe(0);
    await group.run('c', () => 'c1');
    const after = await collect(reader);
    expect(after.value('valve.job.started')).toBe(4);
    expect(observerOf(group.valve('c'))).not.toBeNull();
    handle.stop();
    // Detached from the live valves and from the group (a new key's valve gets no observer).
    expect(observerOf(group.valve('c'))).toBeNull();
    expect(observerOf(group.valve('d'))).toBeNull();
    await group.close();
  });

  it('with includeId, one series per key (valve.id); a dropped key keeps its counts and reports nothing queued', async () => {
    const { reader, clock, group, handle, m } = await run(true);
    expect(m.value('valve.job.started', { 'valve.id': 'a' })).toBe(2);
    expect(m.value('valve.job.started', { 'valve.id': 'b' })).toBe(1);
    expect(m.value<Histogram>('valve.job.wait.duration', { 'valve.id': 'a' })).toMatchObject({
      count: 2,
      sum: expect.closeTo(1, 6),
    });
    expect(m.value('valve.pauses', { 'valve.id': 'b', 'valve.pause.source': 'manual' })).toBe(1);
    await clock.tickAsync(15_000);
    expect(group.size).toBe(0);
    await group.run('c', () => 'c1');
    const after = await collect(reader);
    const started = after.points('valve.job.started').map((p) => [p.attributes['valve.id'], p.value]);
    expect(Object.fromEntries(started)).toEqual({ a: 2, b: 1, c: 1 });
    expect(after.value('valve.job.queued', { 'valve.id': 'a' })).toBe(0);
    expect(after.value('valve.paused', { 'valve.id': 'b', 'valve.pause.source': 'manual' })).toBe(0);
    expect(() => instrument(group)).not.toThrow(); // no meter provider registered: does nothing
    expect(() => instrument(group, { meter: meterSetup().meter })).toThrow(/already instrumented/);
    handle.stop();
    await group.close();
  });

  it('a valve instrumented on its own keeps its own instrumentation', async () => {
    const own = meterSetup();
    const shared = meterSetup();
    cleanup.push(
      () => own.provider.shutdown(),
      () => shared.provider.shutdown(),
    );
    const group = createValveGroup({});
    instrument(group.valve('solo'), { meter: own.meter });
    instrument(group, { meter: shared.meter });
    await group.run('solo', () => 1);
    await group.run('other', () => 1);
    expect((await collect(own.reader)).value('valve.job.started')).toBe(1);
    expect((await collect(shared.reader)).value('valve.job.started')).toBe(1);
    // The other way round (documented): the group's instrumentation already counts it.
    expect(() => instrument(group.valve('other'), { meter: own.meter })).toThrow(
      /The valve 'other' is already instrumented: stop\(\) the first instrumentation first/,
    );
    await group.close();
  });
});

describe('instrumentStore() of a store with a callback form of acquire (the Redis store)', () => {
  it('keeps that form: the valve calls it through the wrapper, each call timed, failures with error.type', async () => {
    const { reader, meter, provider } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const inner = memoryStore();
    const calls = { promise: 0, callback: 0 };
    let failNext = 0;
    const acquire = (request: AcquireRequest) => {
      calls.promise++;
      return inner.acquire(request);
    };
    const acquireWith: AcquireWith = (request, onAnswer, onFail) => {
      calls.callback++;
      if (failNext > 0) {
        failNext--;
        queueMicrotask(() => onFail(new StoreDown('down')));
        return;
      }
      Promise.resolve(inner.acquire(request)).then(onAnswer, onFail);
    };
    Object.defineProperty(acquire, ACQUIRE_WITH, { value: acquireWith });
    const withBoth: Store = {
      acquire,
      pause: (id, ms) => inner.pause(id, ms),
      resume: (id) => inner.resume(id),
      renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
      release: (id, tokens) => inner.release(id, tokens),
    };
    const store = instrumentStore(withBoth, { meter });
    expect(typeof (store.acquire as { [ACQUIRE_WITH]?: unknown })[ACQUIRE_WITH]).toBe('function');
    const valve = createValve({
      id: 'cb',
      rules: { limit: 1000, interval: '1s', burst: 1000 },
      store,
      onStoreError: 'throw',
    });
    cleanup.push(() => valve.close());
    valve.on('store-error', quiet);
    for (let i = 0; i < 5; i++) await valve.run(() => i);
    failNext = 1;
    await expect(valve.run(() => 'x')).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(calls.promise).toBe(0);
    expect(calls.callback).toBe(6);
    const m = await collect(reader);
    const op = { 'valve.store.operation.name': 'acquire' };
    expect(m.value<Histogram>('valve.store.operation.duration', op)).toMatchObject({ count: 5 });
    expect(
      m.value<Histogram>('valve.store.operation.duration', { ...op, 'error.type': 'StoreDown' }),
    ).toMatchObject({ count: 1 });
  });
});

describe('instrumentStore() keeps what the store offers besides the timed calls', () => {
  it("passes pause's `by` on, and keeps the fleet window (windowSend, windowReport)", async () => {
    const { meter, provider } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const inner = memoryStore();
    const pauses: unknown[][] = [];
    const spied: Store = {
      acquire: (r) => inner.acquire(r),
      pause: (...args) => {
        pauses.push(args);
        return inner.pause(...args);
      },
      resume: (id) => inner.resume(id),
      renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
      release: (id, tokens) => inner.release(id, tokens),
      windowSend: (id, probeTtl) => inner.windowSend!(id, probeTtl),
      windowReport: (id, seq, remaining, resetMs) => inner.windowReport!(id, seq, remaining, resetMs),
    };
    const store = instrumentStore(spied, { meter });
    const valve = createValve({ id: 'by', store });
    cleanup.push(() => valve.close());
    await valve.pause('1m');
    expect(pauses).toEqual([['by', 60_000, 'manual']]);
    expect(typeof store.windowSend).toBe('function');
    expect(typeof store.windowReport).toBe('function');
    const ticket = await store.windowSend!('w', 1000);
    expect(ticket).toMatchObject({ seq: expect.any(Number), probe: expect.any(Boolean) });
    // Without both, neither (wrapFetch uses the window only when a store has both).
    const { windowSend: _s, windowReport: _r, ...plain } = spied;
    const bare = instrumentStore(plain, { meter });
    expect(bare.windowSend).toBeUndefined();
    expect(bare.windowReport).toBeUndefined();
  });
});

describe('options and error.type', () => {
  it('rejects bad targets and options with a TypeError naming them', () => {
    const { meter } = meterSetup();
    const valve = createValve({ id: 'x' });
    expect(() => instrument({} as Valve, { meter })).toThrow(/valve \(createValve\(\)\) or a valve group/);
    expect(() => instrument(valve, { meter, includeId: 'yes' as never })).toThrow(
      /`includeId` to be a boolean, got "yes"/,
    );
    expect(() => instrument(valve, { meter, attributes: { a: {} as never } })).toThrow(/`attributes\["a"\]`/);
    expect(() => instrument(valve, { meter, idAttribute: true } as never)).toThrow(
      /Unknown option `idAttribute`/,
    );
    expect(() => instrument(valve, { meter: {} as never })).toThrow(/`meter` to be an OpenTelemetry Meter/);
    expect(() => instrumentStore({} as never, { meter })).toThrow(/to be a Store/);
    expect(() =>
      instrumentStore(spyMemoryStore(new FakeClock()) as SpyStore, { meter, clock: 1 as never }),
    ).toThrow(/`clock` to be an object with now\(\)/);
  });

  it('error.type: a string code, else the error name, else _OTHER', () => {
    expect(errorType(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBe('ECONNREFUSED');
    expect(errorType(new TypeError('x'))).toBe('TypeError');
    expect(errorType(new DOMException('x', 'AbortError'))).toBe('AbortError');
    expect(errorType('a string reason')).toBe('_OTHER');
    expect(errorType({ name: 'has spaces in it' })).toBe('_OTHER');
    expect(errorType(undefined)).toBe('_OTHER');
  });
});

describe('a meter that throws', () => {
  it('never reaches the scheduler or the store: jobs run, rejections and store answers are unchanged', async () => {
    const { meter, provider } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const broken = new Proxy(meter, {
      get(target, key, receiver) {
        if (key !== 'createHistogram') return Reflect.get(target, key, receiver);
        return () => ({
          record() {
            throw new Error('meter bug');
          },
        });
      },
    });
    const clock = new FakeClock();
    const spy = spyMemoryStore(clock);
    const valve = createValve({
      id: 'api',
      clock,
      store: instrumentStore(spy, { meter: broken, clock }),
      maxQueue: 1,
    });
    instrument(valve, { meter: broken });
    const first = valve.run(() => 'ran');
    // A reason whose getters throw: error.type is _OTHER, the rejection is the reason itself.
    const hostile = new Proxy(
      {},
      {
        get() {
          throw new Error('getter bug');
        },
      },
    );
    const controller = new AbortController();
    controller.abort(hostile);
    await expect(valve.run(() => 1, { signal: controller.signal })).rejects.toBe(hostile);
    await clock.tickAsync(0);
    await expect(first).resolves.toBe('ran');
    await expect(valve.pause(10)).resolves.toBeUndefined();
    await valve.close();
  });
});
