/**
 * With no meter provider registered, valve/otel does nothing at all: instrument() leaves the
 * valve (and the group) without an observer, so a job costs what it costs without it;
 * instrumentStore() returns the store itself; nothing is recorded, nothing throws or warns. A
 * provider registered later sees nothing of a valve instrumented before (OpenTelemetry's
 * metrics API has no proxy meter: the SDK must be set up first, as docs/metrics.md says).
 */
import { metrics } from '@opentelemetry/api';
import { afterAll, describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import { memoryStore } from '../../src/index.js';
import { type GroupWatcher, OBSERVE, type ValveObserver } from '../../src/observer.js';
import { instrument, instrumentStore } from '../../src/otel.js';
import { createValve } from '../../src/valve.js';
import { collect, meterSetup } from './reader.js';

const observer = (target: object): ValveObserver | GroupWatcher | null => {
  const t = target as { [OBSERVE](o: null): ValveObserver | GroupWatcher | null };
  const current = t[OBSERVE](null);
  (t as { [OBSERVE](o: unknown): unknown })[OBSERVE](current);
  return current;
};

afterAll(() => metrics.disable());

describe('valve/otel without a meter provider', () => {
  it('instrument() and instrumentStore() attach nothing; jobs, pauses and store failures run as usual', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const inner = memoryStore();
      const store = instrumentStore(inner, { attributes: { a: 'b' } });
      expect(store).toBe(inner);
      const valve = createValve({ id: 'api', rules: { limit: 100, interval: '1s' }, store, maxQueue: 5 });
      const group = createValveGroup({ store });
      const handles = [instrument(valve, { includeId: true }), instrument(group)];
      expect(observer(valve)).toBeNull();
      expect(observer(group)).toBeNull();
      // Calling again is no error either (nothing was attached).
      expect(() => instrument(valve)).not.toThrow();
      await Promise.all([valve.run(() => 1), group.run('k', () => 2)]);
      expect(observer(group.valve('k'))).toBeNull();
      await valve.pause(10);
      await expect(valve.run(() => 1, { cost: 0 })).rejects.toBeInstanceOf(RangeError);
      for (const h of handles) h.stop();
      await Promise.all([valve.close(), group.close()]);
      expect(valve.stats()).toMatchObject({ started: 1, rejected: 1 });

      // A provider registered afterwards has nothing of them.
      const { reader, provider } = meterSetup();
      expect(metrics.setGlobalMeterProvider(provider)).toBe(true);
      const m = await collect(reader);
      expect(m.names()).toEqual([]);
      // …while a valve instrumented now is recorded through it (the global provider's 'valve' meter).
      const later = createValve({ id: 'later' });
      instrument(later);
      await later.run(() => 1);
      expect((await collect(reader)).value('valve.job.started')).toBe(1);
      await later.close();
      await provider.shutdown();
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).toEqual([]);
  });
});
