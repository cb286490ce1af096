import { type Attributes, type Meter, ROOT_CONTEXT } from '@opentelemetry/api';
import { describe } from '../duration.js';
import type { LeaseLostEvent, PauseEvent, PauseSource, StoreErrorContext } from '../events.js';
import type { ValveGroup } from '../group-types.js';
import { type GroupWatcher, OBSERVE, PAUSED_KEYS, type ValveObserver } from '../observer.js';
import type { Valve } from '../types.js';
import { addCollector, checkCardinalityLimit, type DroppedPauses, type Registry } from './collect.js';
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
 *
 * One meter has one batch callback and one series per attribute set (a registry): every
 * instrument() call whose data points carry the same attributes counts into the same series,
 * so its observable counters add up as the histogram and the event counters do (the SDK keeps
 * one observation per attribute set and callback; two callbacks would overwrite each other).
 */

/** What instrument() returns. */
export interface Instrumentation {
  /**
   * Stops recording: the valve (or group) forgets the instrumentation. Its series keep their
   * totals (counters no longer move) and report nothing queued or running from then on. A
   * valve or group that closes stops its instrumentation by itself.
   */
  stop(): void;
}

/** The options of instrument(). */
export interface InstrumentOptions extends MetricsOptions {
  /**
   * Your metric reader's cardinality limit per instrument (2,000 by default, as the SDK's):
   * beyond it, valve folds its own series into one summed series marked
   * `otel.metric.overflow: true` (see collect.ts). The lowest given on one meter applies.
   */
  cardinalityLimit?: number | undefined;
}

const noop = () => {};

/** One set of attributes on one meter and its counts: every valve reporting with these attributes. */
export class Series {
  /** Jobs started (only grows). */
  started = 0;
  /** error.type → jobs rejected with it (only grows). */
  readonly rejected = new Map<string, number>();
  /** Attribute objects made once: per error.type, per pause source, per store error. */
  private readonly derived = new Map<string, Attributes>();
  /** Every pause source valve.paused has reported for this series (at most the five sources). */
  readonly pauseSources = new Set<string>();
  /** Live valves reporting into this series (their queue sizes and pauses are read at collection). */
  readonly valves = new Set<Valve>();
  /** What the group valves of this series call at each start and rejection (a valve of its own gets a copy that also hears its close). */
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
      // A group valve's close: the group tells its instrumentation (GroupWatcher.removed).
      closed: noop,
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

const registries = new WeakMap<Meter, Registry>();

/**
 * The registry of `meter`, made (with its one batch callback) on first use. The series stay as
 * long as the meter: a series' counts never go back (cumulative counters), whoever reported them.
 */
function registryOf(meter: Meter, limit: number): Registry {
  let found = registries.get(meter);
  if (found === undefined) {
    found = { instruments: valveInstruments(meter), series: new Map(), limit, dropped: new Set() };
    addCollector(meter, found);
    registries.set(meter, found);
  } else if (limit < found.limit) {
    found.limit = limit;
  }
  return found;
}

/** The series of `attributes` on a registry: equal attribute sets (any key order) share one. */
function seriesFor(registry: Registry, attributes: Attributes): Series {
  const key = JSON.stringify(
    Object.keys(attributes)
      .sort()
      .map((k) => [k, typeof attributes[k], String(attributes[k])]),
  );
  let s = registry.series.get(key);
  if (s === undefined) {
    s = new Series(attributes, registry.instruments);
    registry.series.set(key, s);
  }
  return s;
}

type Observable = { [OBSERVE](observer: ValveObserver | null): ValveObserver | null };
type WatchedGroup = {
  [OBSERVE](watcher: GroupWatcher | null): GroupWatcher | null;
  [PAUSED_KEYS]?(visit: (key: string, source: PauseSource) => void): void;
};

/** The valve's observer now (null: none). */
function observerOf(valve: Valve): ValveObserver | null {
  const v = valve as Valve & Observable;
  const current = v[OBSERVE](null);
  if (current !== null) v[OBSERVE](current);
  return current;
}

/** Removes `observer` from a valve, leaving another one in place. */
function detach(valve: Valve, observer: ValveObserver): void {
  const v = valve as Valve & Observable;
  const current = v[OBSERVE](null);
  if (current !== observer) v[OBSERVE](current);
}

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
 * registered (and no `meter` given), or a valve or group already closed, it does nothing at all:
 * the target is left untouched and a job costs what it costs without it. Throws TypeError for a
 * bad target or option, or a valve that is already instrumented.
 */
export function instrument(target: Valve | ValveGroup, options?: InstrumentOptions): Instrumentation {
  const group = isGroup(target);
  if (!group && !isValve(target)) {
    throw new TypeError(
      `Expected instrument()'s first argument to be a valve (createValve()) or a valve group (createValveGroup()), got ${describe(target)}`,
    );
  }
  const o = checkOptions(options, 'instrument()', ['cardinalityLimit']);
  const limit = checkCardinalityLimit((options as InstrumentOptions | undefined)?.cardinalityLimit);
  // A closed target would never tell its close (it happened): nothing to attach.
  if (o.meter === null || target.stats().closed) return STOPPED;
  const registry = registryOf(o.meter, limit);
  return group
    ? instrumentGroup(target, registry, o.attributes, o.includeId)
    : instrumentValve(target as Valve & Observable, registry, o.attributes, o.includeId);
}

/** The counters of rare events (pauses, lost leases, store errors), into a series. */
const count = {
  pause: (i: Instruments, s: Series, e: PauseEvent) =>
    i.pauses.add(1, s.with('valve.pause.source', e.source)),
  leaseLost: (i: Instruments, s: Series, e: LeaseLostEvent) =>
    i.leaseLost.add(1, s.with('valve.lease.lost.reason', e.reason)),
  storeError: (i: Instruments, s: Series, err: unknown, context: StoreErrorContext) =>
    i.storeErrors.add(
      1,
      s.with('valve.store.operation.name', context.operation, 'error.type', errorType(err)),
    ),
};

/** Counts a valve's rare events into a series, heard on the valve itself; returns what stops it. */
function listenTo(valve: Valve, i: Instruments, s: Series): () => void {
  const pause = (e: PauseEvent) => count.pause(i, s, e);
  const lost = (e: LeaseLostEvent) => count.leaseLost(i, s, e);
  const error = (err: unknown, context: StoreErrorContext) => count.storeError(i, s, err, context);
  valve.on('pause', pause).on('lease-lost', lost).on('store-error', error);
  return () => void valve.off('pause', pause).off('lease-lost', lost).off('store-error', error);
}

/**
 * A group instrumentation that left a valve out because the valve had its own: called when that
 * one stops, so that the group's takes the valve back (see instrumentGroup's `adopt`).
 */
const waitingGroups = new WeakMap<Valve, () => void>();

function instrumentValve(
  valve: Valve & Observable,
  registry: Registry,
  base: Attributes,
  includeId: boolean,
): Instrumentation {
  if (observerOf(valve) !== null) {
    throw new TypeError(
      `The valve '${valve.id}' is already instrumented: stop() the first instrumentation first`,
    );
  }
  const s = seriesFor(registry, includeId ? { ...base, 'valve.id': valve.id } : base);
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    detach(valve, observer);
    unlisten();
    // The series keeps its counts; the valve is no longer read (nor held: it may be collected).
    s.valves.delete(valve);
    // A group instrumentation that left the valve out for this one takes it back.
    const adopt = waitingGroups.get(valve);
    if (adopt !== undefined) {
      waitingGroups.delete(valve);
      adopt();
    }
  };
  // The series' own functions (nothing more per job), and the valve's close stops the instrumentation.
  const observer: ValveObserver = {
    started: s.observer.started,
    rejected: s.observer.rejected,
    closed: stop,
  };
  valve[OBSERVE](observer);
  s.valves.add(valve);
  const unlisten = listenTo(valve, registry.instruments, s);
  return { stop };
}

function instrumentGroup(
  group: ValveGroup & WatchedGroup,
  registry: Registry,
  base: Attributes,
  includeId: boolean,
): Instrumentation {
  const previous = group[OBSERVE](null);
  if (previous !== null) {
    group[OBSERVE](previous);
    throw new TypeError('The valve group is already instrumented: stop() the first instrumentation first');
  }
  const i = registry.instruments;
  // Without includeId every valve reports into one series; with it, one series per key.
  const shared = includeId ? null : seriesFor(registry, base);
  // A refusal of the group with no valid key carries no valve.id.
  const seriesOf = (key: string | undefined): Series =>
    shared ?? seriesFor(registry, key === undefined ? base : { ...base, 'valve.id': key });
  /** Key → its valve, when the valve's observer is ours. */
  const ours = new Map<string, Valve>();
  /**
   * Key → its valve, when the valve was instrumented on its own: left out, events included. A
   * dropped one stays until its own instrumentation stops (its close() resolved): a lease
   * release may still fail meanwhile, and that store error is its own instrumentation's.
   */
  const foreign = new Map<string, Valve>();
  /**
   * Key → what stops the listeners on its newer valves, made while its dropped valve left out
   * still closes: the key's events heard through the group are skipped, theirs are heard on them.
   */
  const direct = new Map<string, (() => void)[]>();
  /** The key's valve left out is gone: the group's events of the key count again. */
  const forget = (key: string) => {
    const valve = foreign.get(key);
    if (valve !== undefined) waitingGroups.delete(valve);
    foreign.delete(key);
    for (const unlisten of direct.get(key) ?? []) unlisten();
    direct.delete(key);
  };
  const watcher: GroupWatcher = {
    added(key, valve) {
      // Checked before the series is made: a key left out gets no (empty) series of its own.
      // Its own instrumentation's stop() hands it back (a valve closed meanwhile is not taken).
      if (observerOf(valve) !== null) {
        forget(key);
        foreign.set(key, valve);
        waitingGroups.set(valve, () => {
          if (foreign.get(key) !== valve || stopped) return;
          forget(key);
          if (!valve.stats().closed) watcher.added(key, valve);
        });
        return;
      }
      const s = seriesOf(key);
      (valve as Valve & Observable)[OBSERVE](s.observer);
      ours.set(key, valve);
      s.valves.add(valve);
      // The key's dropped valve left out still closes (its own instrumentation is on).
      const old = foreign.get(key);
      if (old !== undefined && observerOf(old) === null) forget(key);
      else if (old !== undefined) direct.set(key, [...(direct.get(key) ?? []), listenTo(valve, i, s)]);
    },
    removed(key, valve) {
      if (ours.get(key) === valve) {
        ours.delete(key);
        const s = seriesOf(key);
        s.valves.delete(valve);
        detach(valve, s.observer);
        // The series stays (includeId: the key's): its counts never go back, and with no valve
        // it reports nothing queued or running (the SDK would repeat a series' last value).
      } else if (foreign.get(key) === valve && observerOf(valve) === null) {
        forget(key);
      }
    },
    rejected(key, reason) {
      // Counted where the key's valve counts the calls it refuses: its own instrumentation, if any.
      const own = key === undefined || ours.has(key) ? undefined : foreign.get(key);
      const observer = own === undefined ? null : observerOf(own);
      if (observer !== null) observer.rejected(reason);
      else seriesOf(key).observer.rejected(reason);
    },
    closed: () => stop(),
  };
  // The keys the group dropped while their pause lasts still count in valve.paused.
  const dropped: DroppedPauses = (visit) =>
    group[PAUSED_KEYS]?.((key, source) => {
      if (!foreign.has(key)) visit(seriesOf(key), source);
    });
  // The group's events carry the key: each goes to its key's series, unless the key is left out.
  const on = {
    pause: (e: PauseEvent, key: string) => {
      if (!foreign.has(key)) count.pause(i, seriesOf(key), e);
    },
    'lease-lost': (e: LeaseLostEvent, key: string) => {
      if (!foreign.has(key)) count.leaseLost(i, seriesOf(key), e);
    },
    'store-error': (err: unknown, context: StoreErrorContext, key: string) => {
      if (!foreign.has(key)) count.storeError(i, seriesOf(key), err, context);
    },
  };
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    const current = group[OBSERVE](null);
    if (current !== watcher) group[OBSERVE](current);
    for (const [key, valve] of ours) {
      const s = seriesOf(key);
      s.valves.delete(valve);
      detach(valve, s.observer);
    }
    ours.clear();
    for (const key of [...foreign.keys()]) forget(key);
    registry.dropped.delete(dropped);
    group.off('pause', on.pause).off('lease-lost', on['lease-lost']).off('store-error', on['store-error']);
  };
  group.on('pause', on.pause).on('lease-lost', on['lease-lost']).on('store-error', on['store-error']);
  group[OBSERVE](watcher);
  registry.dropped.add(dropped);
  return { stop };
}
