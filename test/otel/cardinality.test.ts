/*
 * valve/otel beyond a reader's cardinality limit (2,000 attribute sets per instrument by
 * default): valve folds its own series into one summed series marked otel.metric.overflow, so
 * sums over every series stay right and counters never go back between two collections.
 */
import type { Attributes } from '@opentelemetry/api';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { afterEach, describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import { instrument } from '../../src/otel.js';
import { createValve } from '../../src/valve.js';
import { type Collected, collect, meterSetup, TestReader } from './reader.js';

const OVERFLOW = { 'otel.metric.overflow': true };

let cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.reverse()) await fn();
  cleanup = [];
});

const sum = (m: Collected, name: string) => m.points(name).reduce((n, p) => n + (p.value as number), 0);
const overflowOf = (m: Collected, name: string, extra: Attributes = {}) =>
  m.value(name, { ...OVERFLOW, ...extra });
const tick = () => new Promise((r) => setTimeout(r, 10));

describe('instrument() with includeId beyond the cardinality limit', () => {
  it('a group of 2,100 keys: 1,999 series of their own and one summed overflow, counters only grow', async () => {
    const { reader, provider, meter } = meterSetup();
    cleanup.push(() => provider.shutdown());
    const group = createValveGroup({ rules: { limit: 1, interval: '1h' }, idleTimeout: Infinity });
    instrument(group, { meter, includeId: true });
    const aborted = AbortSignal.abort();
    const queued: Promise<unknown>[] = [];
    const cancel = new AbortController();
    const use = async (from: number, to: number) => {
      for (let i = from; i < to; i++) {
        await group.run(`k${i}`, () => i);
        queued.push(group.run(`k${i}`, () => i, { signal: cancel.signal }).catch(() => {}));
        await group.run(`k${i}`, () => i, { signal: aborted }).catch(() => {});
      }
    };
    cleanup.push(async () => {
      cancel.abort();
      await Promise.all(queued);
      await group.close();
    });
    await use(0, 2100);
    await tick();
    const m1 = await collect(reader);
    expect(m1.points('valve.job.started')).toHaveLength(2000);
    expect(sum(m1, 'valve.job.started')).toBe(2100);
    expect(overflowOf(m1, 'valve.job.started')).toBe(101);
    expect(sum(m1, 'valve.job.queued')).toBe(2100);
    expect(overflowOf(m1, 'valve.job.queued')).toBe(101);
    expect(sum(m1, 'valve.job.rejected')).toBe(2100);
    expect(overflowOf(m1, 'valve.job.rejected')).toBe(101);
    // The first keys keep their series; the later ones are in the overflow.
    expect(m1.value('valve.job.started', { 'valve.id': 'k0' })).toBe(1);
    expect(m1.value('valve.job.started', { 'valve.id': 'k2099' })).toBeUndefined();

    // More keys, all folded: the overflow counter grows by their jobs.
    await use(2100, 2150);
    await tick();
    const m2 = await collect(reader);
    expect(m2.points('valve.job.started')).toHaveLength(2000);
    expect(sum(m2, 'valve.job.started')).toBe(2150);
    expect(overflowOf(m2, 'valve.job.started')).toBe(151);
    expect(overflowOf(m2, 'valve.job.queued')).toBe(151);
    expect(overflowOf(m2, 'valve.job.rejected')).toBe(151);

    // Every key paused: valve.paused folds too; once the queued jobs end the queue sums to 0.
    await Promise.all(Array.from({ length: 2150 }, (_, i) => group.valve(`k${i}`).pause('1h')));
    cancel.abort();
    await Promise.all(queued);
    const m3 = await collect(reader);
    expect(sum(m3, 'valve.paused')).toBe(2150);
    expect(overflowOf(m3, 'valve.paused')).toBe(151);
    expect(sum(m3, 'valve.job.queued')).toBe(0);
    expect(overflowOf(m3, 'valve.job.queued')).toBe(0);
    expect(overflowOf(m3, 'valve.job.started')).toBe(151);
    expect(sum(m3, 'valve.job.rejected')).toBe(2150 + 2150); // the queued jobs aborted
  });

  it("cardinalityLimit: valve folds at your reader's limit", async () => {
    const reader = new TestReader({ cardinalitySelector: () => 10 });
    const provider = new MeterProvider({ readers: [reader] });
    cleanup.push(() => provider.shutdown());
    const meter = provider.getMeter('valve');
    for (let i = 0; i < 25; i++) {
      const valve = createValve({ id: `v${i}` });
      cleanup.push(() => valve.close());
      instrument(valve, { meter, includeId: true, cardinalityLimit: 10 });
      await valve.run(() => i);
      await valve.run(() => i);
    }
    const m = await collect(reader);
    expect(m.points('valve.job.started')).toHaveLength(10);
    expect(sum(m, 'valve.job.started')).toBe(50);
    expect(overflowOf(m, 'valve.job.started')).toBe(32);
  });

  it('a bad cardinalityLimit is a RangeError or TypeError naming it', () => {
    const { meter } = meterSetup();
    const valve = createValve({ id: 'bad-limit' });
    cleanup.push(() => valve.close());
    expect(() => instrument(valve, { meter, cardinalityLimit: 0 })).toThrow(RangeError);
    expect(() => instrument(valve, { meter, cardinalityLimit: 0 })).toThrow(/`cardinalityLimit`.*got 0/);
    expect(() => instrument(valve, { meter, cardinalityLimit: 1.5 })).toThrow(RangeError);
    expect(() => instrument(valve, { meter, cardinalityLimit: '2000' as never })).toThrow(TypeError);
  });
});
