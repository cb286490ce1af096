/**
 * valve/otel and a group's own refusals and dropped valves: a call the group refuses itself
 * (group.run(), a wrapped fetch: closed group, bad key, bad overrides) is counted once in
 * valve.job.rejected, where the key's valve counts its refusals, and in group.stats().rejected;
 * a group valve instrumented on its own and evicted with a lease release in flight keeps that
 * release's failure to itself (not counted again by the group's instrumentation).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import { instrument } from '../../src/otel.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { spyMemoryStore } from '../helpers/spy-store.js';
import { collect, meterSetup } from './reader.js';

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

/** A job that runs until its valve's close() cuts it short (ctx.signal). */
const untilAborted = ({ signal }: { signal: AbortSignal }) =>
  new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));

describe("a group's own refusals", () => {
  it('are counted once each in valve.job.rejected, as stats().rejected counts them', async () => {
    const { reader, meter } = setup();
    const group = createValveGroup({});
    instrument(group, { meter });
    const fetchFn = async (_input: string) => new Response('ok');
    const wrapped = group.wrapFetch(fetchFn, {
      key: (input) => {
        if (input === 'throws') throw new SyntaxError('no key');
        return String(input);
      },
    });
    await expect(group.run('', () => 1)).rejects.toBeInstanceOf(TypeError);
    await expect(wrapped('throws')).rejects.toBeInstanceOf(SyntaxError);
    await expect(wrapped('')).rejects.toBeInstanceOf(TypeError);
    // The valve's own refusal: counted by the valve, once.
    await expect(group.run('k', 'not a job' as never)).rejects.toBeInstanceOf(TypeError);
    let release!: () => void;
    const running = group.run('k', () => new Promise<void>((r) => (release = r)));
    await Promise.resolve();
    const closing = group.close({ drain: true });
    await expect(group.run('k', () => 1)).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(group.run('other', () => 1)).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(wrapped('k')).rejects.toMatchObject({ code: 'CLOSED' });
    const m = await collect(reader);
    expect(m.value('valve.job.rejected', { 'error.type': 'TypeError' })).toBe(3);
    expect(m.value('valve.job.rejected', { 'error.type': 'SyntaxError' })).toBe(1);
    expect(m.value('valve.job.rejected', { 'error.type': 'CLOSED' })).toBe(3);
    expect(group.stats().rejected).toBe(7);
    release();
    await running;
    await closing;
    expect(group.stats().rejected).toBe(7);
    // After close() resolved the instrumentation is over: a refusal counts in stats() only.
    await expect(group.run('k', () => 1)).rejects.toMatchObject({ code: 'CLOSED' });
    expect((await collect(reader)).value('valve.job.rejected', { 'error.type': 'CLOSED' })).toBe(3);
    expect(group.stats().rejected).toBe(8);
  });

  it("with includeId: the call's key as valve.id; a refusal with no valid key has none", async () => {
    const { reader, meter } = setup();
    const group = createValveGroup({
      options: (key) => (key === 'bad' ? { rules: { limit: 0, interval: '1s' } } : undefined),
    });
    instrument(group, { meter, includeId: true });
    await expect(group.run('', () => 1)).rejects.toBeInstanceOf(TypeError);
    await expect(group.run(42 as never, () => 1)).rejects.toBeInstanceOf(TypeError);
    await expect(group.run('bad', () => 1)).rejects.toBeInstanceOf(RangeError);
    const running = group.run('k', untilAborted);
    void running.catch(() => {});
    const closing = group.close({ drain: true });
    await expect(group.run('k', () => 1)).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(group.run('fresh', () => 1)).rejects.toMatchObject({ code: 'CLOSED' });
    const m = await collect(reader);
    const rejected = m
      .points('valve.job.rejected')
      .map((p) => [p.attributes['valve.id'] ?? null, p.attributes['error.type'], p.value]);
    expect(rejected).toEqual(
      expect.arrayContaining([
        [null, 'TypeError', 2],
        ['bad', 'RangeError', 1],
        ['k', 'CLOSED', 1],
        ['fresh', 'CLOSED', 1],
      ]),
    );
    expect(rejected).toHaveLength(4);
    void group.close();
    await closing;
  });

  it("of a key instrumented on its own count in that key's instrumentation, not the group's", async () => {
    const own = setup();
    const shared = setup();
    const group = createValveGroup({});
    instrument(group.valve('solo'), { meter: own.meter });
    instrument(group, { meter: shared.meter });
    const running = group.run('solo', untilAborted);
    void running.catch(() => {});
    const closing = group.close({ drain: true });
    await expect(group.run('solo', () => 1)).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(group.run('other', () => 1)).rejects.toMatchObject({ code: 'CLOSED' });
    expect((await collect(own.reader)).value('valve.job.rejected', { 'error.type': 'CLOSED' })).toBe(1);
    expect((await collect(shared.reader)).value('valve.job.rejected', { 'error.type': 'CLOSED' })).toBe(1);
    void group.close();
    await closing;
  });
});

describe('a group valve instrumented on its own, evicted with a lease release in flight', () => {
  function evictedWithRelease() {
    const clock = new FakeClock();
    const spy = spyMemoryStore(clock);
    const group = createValveGroup({
      clock,
      store: spy,
      idleTimeout: '10s',
      onStoreError: 'throw',
      concurrency: { limit: 2, scope: 'global', leaseTtl: '1m' },
    });
    cleanup.push(() => {
      for (const p of spy.pending.splice(0)) p.resolve();
      return group.close();
    });
    group.on('store-error', () => {});
    const { reader, meter } = setup();
    instrument(group.valve('a'), { meter, attributes: { by: 'own' } });
    instrument(group, { meter, attributes: { by: 'group' } });
    spy.timing.release = 'manual';
    return { clock, spy, group, reader };
  }
  const releaseFailed = { 'valve.store.operation.name': 'release', 'error.type': 'StoreDown' };

  it("keeps the release's failure to its own instrumentation; the key's next valve is the group's", async () => {
    const { clock, spy, group, reader } = evictedWithRelease();
    await group.run('a', () => 1);
    await clock.tickAsync(15_000);
    expect(group.size).toBe(0);
    expect(spy.pending.map((p) => p.op)).toEqual(['release']);
    spy.pending.shift()!.reject(new StoreDown('down'));
    await clock.tickAsync(0);
    let m = await collect(reader);
    expect(m.value('valve.store.errors', { by: 'own', ...releaseFailed })).toBe(1);
    expect(m.value('valve.store.errors', { by: 'group', ...releaseFailed })).toBeUndefined();
    expect(group.stats().storeErrors).toBe(1);
    // The valve closed: its key's next valve is counted by the group's instrumentation, once.
    const pausing = group.valve('a').pause(1000);
    await clock.tickAsync(0);
    await pausing;
    m = await collect(reader);
    expect(m.value('valve.pauses', { by: 'group', 'valve.pause.source': 'manual' })).toBe(1);
    expect(m.value('valve.pauses', { by: 'own', 'valve.pause.source': 'manual' })).toBeUndefined();
  });

  it("a new valve of the key while the old one still closes: each one's store errors counted once, where they belong", async () => {
    const { clock, spy, group, reader } = evictedWithRelease();
    await group.run('a', () => 1);
    await clock.tickAsync(15_000);
    expect(group.size).toBe(0);
    // The key's next valve (the group's), while the old one's release is in flight.
    spy.fail.acquire = new StoreDown('down');
    await expect(group.run('a', () => 1)).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    spy.fail.acquire = undefined;
    spy.pending.shift()!.reject(new StoreDown('down'));
    await clock.tickAsync(0);
    let m = await collect(reader);
    const acquireFailed = { 'valve.store.operation.name': 'acquire', 'error.type': 'StoreDown' };
    expect(m.value('valve.store.errors', { by: 'group', ...acquireFailed })).toBe(1);
    expect(m.value('valve.store.errors', { by: 'own', ...acquireFailed })).toBeUndefined();
    expect(m.value('valve.store.errors', { by: 'own', ...releaseFailed })).toBe(1);
    expect(m.value('valve.store.errors', { by: 'group', ...releaseFailed })).toBeUndefined();
    // The old valve closed: the new one's events now come through the group, still once.
    spy.fail.acquire = new StoreDown('down');
    await expect(group.run('a', () => 1)).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    spy.fail.acquire = undefined;
    m = await collect(reader);
    expect(m.value('valve.store.errors', { by: 'group', ...acquireFailed })).toBe(2);
    expect(group.stats().storeErrors).toBe(3);
  });
});
