/**
 * valve/otel's series on one meter: instrument() calls whose data points have the same
 * attributes add up (F1); a valve or group that closes ends its instrumentation and is let go
 * (F2); a group key instrumented on its own is left out of the group's instrumentation, events
 * included (F3).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import type { ValveGroup } from '../../src/group-types.js';
import { type GroupWatcher, OBSERVE, type ValveObserver } from '../../src/observer.js';
import { instrument } from '../../src/otel.js';
import type { Valve } from '../../src/types.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { spyMemoryStore } from '../helpers/spy-store.js';
import { collect, type Histogram, meterSetup } from './reader.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const observerOf = (valve: Valve): ValveObserver | null => {
  const v = valve as unknown as { [OBSERVE](o: ValveObserver | null): ValveObserver | null };
  const current = v[OBSERVE](null);
  v[OBSERVE](current);
  return current;
};
const watcherOf = (group: ValveGroup): GroupWatcher | null => {
  const g = group as unknown as { [OBSERVE](w: GroupWatcher | null): GroupWatcher | null };
  const current = g[OBSERVE](null);
  g[OBSERVE](current);
  return current;
};

async function collectGarbage() {
  for (let i = 0; i < 5; i++) {
    await new Promise((r) => setTimeout(r, 5));
    gc();
  }
}

class StoreDown extends Error {
  override name = 'StoreDown';
}

let cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.reverse()) await fn();
  cleanup = [];
});

function setup() {
  const s = meterSetup();
  cleanup.push(() => s.provider.shutdown());
  return s;
}

describe('instrument() calls with the same attributes on one meter', () => {
  it('add up: started, rejected, queued, running and paused count every valve, as the histogram does', async () => {
    const { reader, meter } = setup();
    const a = createValve({ id: 'a', rules: { limit: 1, interval: '1h' }, maxQueue: 2 });
    const b = createValve({ id: 'b' });
    cleanup.push(
      () => a.close(),
      () => b.close(),
    );
    instrument(a, { meter });
    instrument(b, { meter });
    await a.run(() => 1);
    await b.run(() => 1);
    await b.run(() => 1);
    // a: two queued behind its limit, a third refused; b: one running, paused by hand.
    void a.run(() => 1).catch(() => {});
    void a.run(() => 1).catch(() => {});
    await expect(a.run(() => 1)).rejects.toMatchObject({ code: 'QUEUE_FULL' });
    await expect(b.run(() => 1, { cost: 0 })).rejects.toBeInstanceOf(RangeError);
    let finish = () => {};
    const long = b.run(() => new Promise<void>((resolve) => (finish = resolve)));
    cleanup.push(() => finish());
    await new Promise((r) => setTimeout(r, 5));
    await a.pause(60_000);
    await b.pause(60_000);
    const m = await collect(reader);
    expect(m.value<Histogram>('valve.job.wait.duration')!.count).toBe(4);
    expect(m.points('valve.job.started')).toHaveLength(1);
    expect(m.value('valve.job.started')).toBe(4);
    expect(m.value('valve.job.rejected', { 'error.type': 'QUEUE_FULL' })).toBe(1);
    expect(m.value('valve.job.rejected', { 'error.type': 'RangeError' })).toBe(1);
    expect(m.value('valve.job.queued')).toBe(2);
    expect(m.value('valve.job.running')).toBe(1);
    expect(m.value('valve.paused', { 'valve.pause.source': 'manual' })).toBe(2);
    expect(m.value('valve.pauses', { 'valve.pause.source': 'manual' })).toBe(2);
    finish();
    await long;
  });

  it('add up whatever the order of their keys; a value of another type is another series', async () => {
    const { reader, meter } = setup();
    const a = createValve({ id: 'a' });
    const b = createValve({ id: 'b' });
    const c = createValve({ id: 'c' });
    instrument(a, { meter, attributes: { x: 1, y: 'k' } });
    instrument(b, { meter, attributes: { y: 'k', x: 1 } });
    instrument(c, { meter, attributes: { x: '1', y: 'k' } });
    for (const v of [a, b, c]) await v.run(() => 1);
    const m = await collect(reader);
    expect(m.value('valve.job.started', { x: 1, y: 'k' })).toBe(2);
    expect(m.value('valve.job.started', { x: '1', y: 'k' })).toBe(1);
  });

  it('instrument(group.valve(k)) then instrument(group), no attributes: every job counted once', async () => {
    const { reader, meter } = setup();
    const group = createValveGroup({});
    cleanup.push(() => group.close());
    instrument(group.valve('solo'), { meter });
    instrument(group, { meter });
    await group.run('solo', () => 1);
    await group.run('solo', () => 1);
    await group.run('other', () => 1);
    const m = await collect(reader);
    expect(m.value<Histogram>('valve.job.wait.duration')!.count).toBe(3);
    expect(m.value('valve.job.started')).toBe(3);
  });

  it('a stopped instrumentation keeps its counts in the series; a new one on the same attributes goes on from them', async () => {
    const { reader, meter } = setup();
    const valve = createValve({ id: 'api' });
    cleanup.push(() => valve.close());
    const first = instrument(valve, { meter });
    await valve.run(() => 1);
    first.stop();
    await valve.run(() => 1);
    expect((await collect(reader)).value('valve.job.started')).toBe(1);
    instrument(valve, { meter });
    await valve.run(() => 1);
    expect((await collect(reader)).value('valve.job.started')).toBe(2);
  });
});

describe('instrument() and close()', () => {
  it('a closed valve ends its instrumentation: not read at collection any more, counts kept, nothing queued or running', async () => {
    const { reader, meter } = setup();
    const valve = createValve({ id: 'closing', rules: { limit: 1, interval: '1h' } });
    instrument(valve, { meter, includeId: true });
    await valve.run(() => 1);
    const queued = valve.run(() => 2);
    expect((await collect(reader)).value('valve.job.queued', { 'valve.id': 'closing' })).toBe(1);
    await valve.close();
    await expect(queued).rejects.toMatchObject({ code: 'CLOSED' });
    expect(observerOf(valve)).toBeNull();
    let reads = 0;
    const stats = valve.stats.bind(valve);
    (valve as { stats: () => unknown }).stats = () => {
      reads++;
      return stats();
    };
    const m = await collect(reader);
    expect(reads).toBe(0);
    expect(m.value('valve.job.started', { 'valve.id': 'closing' })).toBe(1);
    expect(m.value('valve.job.rejected', { 'valve.id': 'closing', 'error.type': 'CLOSED' })).toBe(1);
    expect(m.value('valve.job.queued', { 'valve.id': 'closing' })).toBe(0);
    expect(m.value('valve.job.running', { 'valve.id': 'closing' })).toBe(0);
  });

  it('a draining close counts the jobs it lets run, then ends the instrumentation', async () => {
    const { reader, meter } = setup();
    const clock = new FakeClock();
    const valve = createValve({ id: 'drain', rules: { limit: 1, interval: '1s' }, clock });
    instrument(valve, { meter });
    const jobs = [valve.run(() => 1), valve.run(() => 2)];
    const closing = valve.close({ drain: true });
    expect(observerOf(valve)).not.toBeNull();
    await clock.tickAsync(1000);
    await Promise.all(jobs);
    await closing;
    expect(observerOf(valve)).toBeNull();
    expect((await collect(reader)).value('valve.job.started')).toBe(2);
  });

  it('a closed, dropped, instrumented valve is garbage-collected', async () => {
    const { reader, meter } = setup();
    let ref!: WeakRef<object>;
    await (async () => {
      const valve = createValve({ id: 'dropped' });
      instrument(valve, { meter });
      await valve.run(() => 1);
      await valve.close();
      ref = new WeakRef(valve);
    })();
    await collect(reader);
    await collectGarbage();
    expect(ref.deref()).toBeUndefined();
    expect((await collect(reader)).value('valve.job.started')).toBe(1);
  });

  it('a closed group ends its instrumentation, and once dropped is garbage-collected', async () => {
    const { reader, meter } = setup();
    let ref!: WeakRef<object>;
    await (async () => {
      const group = createValveGroup({});
      instrument(group, { meter });
      await group.run('k', () => 1);
      const valve = group.valve('k');
      await group.close();
      expect(watcherOf(group)).toBeNull();
      expect(observerOf(valve)).toBeNull();
      ref = new WeakRef(group);
    })();
    await collect(reader);
    await collectGarbage();
    expect(ref.deref()).toBeUndefined();
    const m = await collect(reader);
    expect(m.value('valve.job.started')).toBe(1);
    expect(m.value('valve.job.queued')).toBe(0);
  });

  it('a group valve instrumented on its own ends its instrumentation when the group evicts it', async () => {
    const { meter } = setup();
    const clock = new FakeClock();
    const group = createValveGroup({ clock, idleTimeout: '10s' });
    cleanup.push(() => group.close());
    const solo = group.valve('solo');
    instrument(solo, { meter });
    await group.run('solo', () => 1);
    expect(observerOf(solo)).not.toBeNull();
    await clock.tickAsync(15_000);
    expect(group.size).toBe(0);
    expect(observerOf(solo)).toBeNull();
  });

  it("a group key's own instrumentation stopped: the group's takes the valve back (jobs and pauses counted there)", async () => {
    const { reader, meter } = setup();
    const group = createValveGroup({});
    cleanup.push(() => group.close());
    const solo = instrument(group.valve('solo'), { meter, attributes: { by: 'solo' } });
    instrument(group, { meter, attributes: { by: 'group' } });
    await group.run('solo', () => 1);
    solo.stop();
    await group.run('solo', () => 1);
    await group.run('solo', () => 1);
    await group.valve('solo').pause(1000);
    const m = await collect(reader);
    expect(m.value('valve.job.started', { by: 'solo' })).toBe(1);
    expect(m.value('valve.job.started', { by: 'group' })).toBe(2);
    expect(m.value('valve.pauses', { by: 'group', 'valve.pause.source': 'manual' })).toBe(1);
    await group.valve('solo').resume();
  });

  it('instrument() of a closed valve or group attaches nothing', async () => {
    const { reader, meter } = setup();
    const valve = createValve({ id: 'was-closed' });
    await valve.close();
    const group = createValveGroup({});
    await group.close();
    const handles = [instrument(valve, { meter }), instrument(group, { meter })];
    expect(observerOf(valve)).toBeNull();
    expect(watcherOf(group)).toBeNull();
    for (const h of handles) expect(() => h.stop()).not.toThrow();
    expect((await collect(reader)).names()).toEqual([]);
  });
});

describe("a group key instrumented on its own is left out of the group's instrumentation", () => {
  it('its pauses and store errors too', async () => {
    const own = setup();
    const shared = setup();
    const clock = new FakeClock();
    const spy = spyMemoryStore(clock);
    const group = createValveGroup({ clock, store: spy, onStoreError: 'throw' });
    cleanup.push(() => group.close());
    group.on('store-error', () => {});
    instrument(group.valve('solo'), { meter: own.meter });
    instrument(group, { meter: shared.meter });
    spy.fail.acquire = new StoreDown('down');
    const failed = group.run('solo', () => 1);
    await clock.tickAsync(0);
    await expect(failed).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    spy.fail.acquire = undefined;
    const pausing = group.valve('solo').pause(60_000);
    await clock.tickAsync(0);
    await pausing;
    const o = await collect(own.reader);
    const s = await collect(shared.reader);
    expect(o.value('valve.pauses', { 'valve.pause.source': 'manual' })).toBe(1);
    const storeError = { 'valve.store.operation.name': 'acquire', 'error.type': 'StoreDown' };
    expect(o.value('valve.store.errors', storeError)).toBe(1);
    expect(s.value('valve.paused', { 'valve.pause.source': 'manual' })).toBeUndefined();
    expect(s.value('valve.pauses', { 'valve.pause.source': 'manual' })).toBeUndefined();
    expect(s.value('valve.store.errors', storeError)).toBeUndefined();
    // Another key's events are the group's.
    const other = group.valve('other').pause(1000);
    await clock.tickAsync(0);
    await other;
    expect((await collect(shared.reader)).value('valve.pauses', { 'valve.pause.source': 'manual' })).toBe(1);
  });

  it('with includeId the group makes no series for that key (on its meter, or hiding the real one on the same meter)', async () => {
    const { reader, meter } = setup();
    const other = setup();
    const group = createValveGroup({});
    cleanup.push(() => group.close());
    instrument(group.valve('solo'), { meter, includeId: true });
    instrument(group, { meter, includeId: true });
    const group2 = createValveGroup({});
    cleanup.push(() => group2.close());
    instrument(group2.valve('solo'), { meter, attributes: { g: 2 }, includeId: true });
    instrument(group2, { meter: other.meter, includeId: true });
    await group.run('solo', () => 1);
    await group.run('solo', () => 1);
    await group2.run('solo', () => 1);
    const m = await collect(reader);
    const solo = m.points('valve.job.started').filter((p) => p.attributes['valve.id'] === 'solo');
    expect(solo.map((p) => [p.attributes.g ?? null, p.value])).toEqual([
      [null, 2],
      [2, 1],
    ]);
    expect((await collect(other.reader)).points('valve.job.started')).toEqual([]);
  });
});
