import { type Attributes, type BatchObservableCallback, type Meter, ROOT_CONTEXT } from '@opentelemetry/api';
import { describe } from '../duration.js';
import type { LeaseLostEvent, PauseEvent, StoreErrorContext } from '../events.js';
import type { ValveGroup } from '../group-types.js';
import { type GroupWatcher, OBSERVE, type ValveObserver } from '../observer.js';
import type { Valve } from '../types.js';
import {
  checkOptions,
  errorType,
  type Instruments,
  type MetricsOptions,
  valveInstruments,
} from './instruments.js';

/*
 * instrument(): a valve's or a group's metrics. Per job it costs one call of a ValveObserver
 * (a counter += 1, and a histogram record for the wait); counts, queue sizes and pauses are read
 * when the meter collects (observable instruments), so nothing else happens per job.
 */

/** What instrument() returns. */
export interface Instrumentation {
  /**
   * Stops recording: the valve (or group) forgets the instrumentation and its callbacks leave
   * the meter. (An OpenTelemetry SDK keeps exporting the last values it collected.)
   */
  stop(): void;
}

/** The options of instrument(). */
export type InstrumentOptions = MetricsOptions;

/** One set of attributes and its counts (one per instrument() call, or per id with includeId). */
class Series {
  /** Jobs started (only grows). */
  started = 0;
  /** error.type → jobs rejected with it (only grows). */
  readonly rejected = new Map<string, number>();
  /** Attribute objects made once: per error.type, per pause source, per store error. */
  private readonly derived = new Map<string, Attributes>();
  /** Every pause source valve.paused has reported for this series (at most the five sources). */
  readonly pauseSources = new Set<string>();
  /** Valves reporting into this series (their queue sizes and pauses are read at collection). */
  readonly valves = new Set<Valve>();
  /** What the valves of this series call at each start and rejection. */
  readonly observer: ValveObserver;

  constructor(
    readonly attributes: Attributes,
    instruments: Instruments,
  ) {
    const wait = instruments.wait;
    // Called from the scheduler: nothing here may throw into it (a meter of your own might).
    this.observer = {
      started: (queuedAt, now) => {
        this.started++;
        // queuedAt is -1 for a job queued before the observer was set: counted, its wait unknown.
        if (queuedAt < 0) return;
        try {
          wait.record(now > queuedAt ? (now - queuedAt) / 1000 : 0, attributes, ROOT_CONTEXT);
        } catch {}
      },
      rejected: (reason) => {
        const type = errorType(reason);
        this.rejected.set(type, (this.rejected.get(type) ?? 0) + 1);
      },
    };
  }

  /** The series' attributes plus one or two more (cached: the same few values recur). */
  with(name: string, value: string, name2?: string, value2?: string): Attributes {
    const cacheKey = `${name}\0${value}\0${name2 ?? ''}\0${value2 ?? ''}`;
    let found = this.derived.get(cacheKey);
    if (found === undefined) {
      found = { ...this.attributes, [name]: value };
      if (name2 !== undefined) found[name2] = value2!;
      this.derived.set(cacheKey, found);
    }
    return found;
  }
}

/** Sets `observer` on a valve unless another one is there; true when set. */
function attach(valve: Valve & Observable, observer: ValveObserver): boolean {
  const previous = valve[OBSERVE](observer);
  if (previous === null) return true;
  valve[OBSERVE](previous);
  return false;
}

/** Removes `observer` from a valve, leaving another one in place. */
function detach(valve: Valve & Observable, observer: ValveObserver): void {
  const current = valve[OBSERVE](null);
  if (current !== observer) valve[OBSERVE](current);
}

type Observable = { [OBSERVE](observer: ValveObserver | null): ValveObserver | null };
type WatchedGroup = { [OBSERVE](watcher: GroupWatcher | null): GroupWatcher | null };

function isGroup(target: unknown): target is ValveGroup & WatchedGroup {
  return (
    typeof target === 'object' &&
    target !== null &&
    typeof (target as { valve?: unknown }).valve === 'function' &&
    typeof (target as Partial<WatchedGroup>)[OBSERVE] === 'function'
  );
}

function isValve(target: unknown): target is Valve & Observable {
  return (
    typeof target === 'object' &&
    target !== null &&
    typeof (target as { run?: unknown }).run === 'function' &&
    typeof (target as Partial<Observable>)[OBSERVE] === 'function'
  );
}

const STOPPED: Instrumentation = Object.freeze({ stop() {} });

/**
 * Records a valve's or a valve group's metrics with OpenTelemetry. With no meter provider
 * registered (and no `meter` given) it does nothing at all: the valve is left untouched and
 * a job costs what it costs without it. Throws TypeError for a bad target or option, or a valve
 * that is already instrumented.
 */
export function instrument(target: Valve | ValveGroup, options?: InstrumentOptions): Instrumentation {
  const group = isGroup(target);
  if (!group && !isValve(target)) {
    throw new TypeError(
      `Expected instrument()'s first argument to be a valve (createValve()) or a valve group (createValveGroup()), got ${describe(target)}`,
    );
  }
  const o = checkOptions(options, 'instrument()');
  if (o.meter === null) return STOPPED;
  return group
    ? instrumentGroup(target, o.meter, o.attributes, o.includeId)
    : instrumentValve(target as Valve & Observable, o.meter, o.attributes, o.includeId);
}

/** Reports every series at collection: counts, and the queue sizes and pauses of their valves. */
function collector(instruments: Instruments, series: () => Iterable<Series>): BatchObservableCallback {
  return (result) => {
    for (const s of series()) {
      result.observe(instruments.started, s.started, s.attributes);
      for (const [type, n] of s.rejected) result.observe(instruments.rejected, n, s.with('error.type', type));
      let queued = 0;
      let running = 0;
      let paused: Map<string, number> | undefined;
      for (const valve of s.valves) {
        const stats = valve.stats();
        queued += stats.queued;
        running += stats.running;
        if (stats.pausedBy !== null) {
          paused ??= new Map();
          paused.set(stats.pausedBy.source, (paused.get(stats.pausedBy.source) ?? 0) + 1);
        }
      }
      result.observe(instruments.queued, queued, s.attributes);
      result.observe(instruments.running, running, s.attributes);
      // A source reported once is reported from then on (0 when no valve is paused by it):
      // the SDK would repeat its last value otherwise.
      if (paused !== undefined) for (const source of paused.keys()) s.pauseSources.add(source);
      for (const source of s.pauseSources) {
        result.observe(instruments.paused, paused?.get(source) ?? 0, s.with('valve.pause.source', source));
      }
    }
  };
}

function observables(i: Instruments) {
  return [i.started, i.rejected, i.queued, i.running, i.paused];
}

/** The event listeners of one series (counters of rare events: pauses, lost leases, store errors). */
function listeners(s: Series, i: Instruments) {
  return {
    pause: (e: PauseEvent) => i.pauses.add(1, s.with('valve.pause.source', e.source)),
    'lease-lost': (e: LeaseLostEvent) => i.leaseLost.add(1, s.with('valve.lease.lost.reason', e.reason)),
    'store-error': (err: unknown, context: StoreErrorContext) =>
      i.storeErrors.add(
        1,
        s.with('valve.store.operation.name', context.operation, 'error.type', errorType(err)),
      ),
  };
}

function instrumentValve(
  valve: Valve & Observable,
  meter: Meter,
  base: Attributes,
  includeId: boolean,
): Instrumentation {
  const instruments = valveInstruments(meter);
  const series = new Series(includeId ? { ...base, 'valve.id': valve.id } : base, instruments);
  if (!attach(valve, series.observer)) {
    throw new TypeError(
      `The valve '${valve.id}' is already instrumented: stop() the first instrumentation first`,
    );
  }
  series.valves.add(valve);
  const on = listeners(series, instruments);
  valve.on('pause', on.pause).on('lease-lost', on['lease-lost']).on('store-error', on['store-error']);
  const callback = collector(instruments, () => [series]);
  meter.addBatchObservableCallback(callback, observables(instruments));
  let stopped = false;
  return {
    stop() {
      if (stopped) return;
      stopped = true;
      detach(valve, series.observer);
      valve.off('pause', on.pause).off('lease-lost', on['lease-lost']).off('store-error', on['store-error']);
      meter.removeBatchObservableCallback(callback, observables(instruments));
    },
  };
}

function instrumentGroup(
  group: ValveGroup & WatchedGroup,
  meter: Meter,
  base: Attributes,
  includeId: boolean,
): Instrumentation {
  const instruments = valveInstruments(meter);
  // Without includeId every valve reports into one series; with it, one series per key while its valve lives.
  const shared = includeId ? null : new Series(base, instruments);
  const byKey = new Map<string, Series>();
  const seriesOf = (key: string): Series => {
    if (shared !== null) return shared;
    let s = byKey.get(key);
    if (s === undefined) {
      s = new Series({ ...base, 'valve.id': key }, instruments);
      byKey.set(key, s);
    }
    return s;
  };
  /** Valves whose observer is ours, with that observer (a valve instrumented on its own keeps its own). */
  const ours = new Map<Valve, ValveObserver>();
  const watcher: GroupWatcher = {
    added(key, valve) {
      const s = seriesOf(key);
      if (!attach(valve as Valve & Observable, s.observer)) return;
      ours.set(valve, s.observer);
      s.valves.add(valve);
    },
    removed(key, valve) {
      if (!ours.delete(valve)) return;
      const s = seriesOf(key);
      s.valves.delete(valve);
      detach(valve as Valve & Observable, s.observer);
      // The series stays (includeId: the key's): its counts never go back, and with no valve
      // it reports nothing queued or running (the SDK would repeat a series' last value).
    },
  };
  const previous = group[OBSERVE](watcher);
  if (previous !== null) {
    group[OBSERVE](previous);
    throw new TypeError('The valve group is already instrumented: stop() the first instrumentation first');
  }
  // The group's events carry the key: each goes to its key's series.
  const on = {
    pause: (e: PauseEvent, key: string) => listeners(seriesOf(key), instruments).pause(e),
    'lease-lost': (e: LeaseLostEvent, key: string) => listeners(seriesOf(key), instruments)['lease-lost'](e),
    'store-error': (err: unknown, context: StoreErrorContext, key: string) =>
      listeners(seriesOf(key), instruments)['store-error'](err, context),
  };
  group.on('pause', on.pause).on('lease-lost', on['lease-lost']).on('store-error', on['store-error']);
  const callback = collector(instruments, () => (shared !== null ? [shared] : byKey.values()));
  meter.addBatchObservableCallback(callback, observables(instruments));
  let stopped = false;
  return {
    stop() {
      if (stopped) return;
      stopped = true;
      const current = group[OBSERVE](null);
      if (current !== watcher) group[OBSERVE](current);
      for (const [valve, observer] of ours) detach(valve as Valve & Observable, observer);
      ours.clear();
      group.off('pause', on.pause).off('lease-lost', on['lease-lost']).off('store-error', on['store-error']);
      meter.removeBatchObservableCallback(callback, observables(instruments));
    },
  };
}
