import type { Attributes, BatchObservableCallback, Meter } from '@opentelemetry/api';
import { describe } from '../duration.js';
import type { Instruments } from './instruments.js';
import type { Series } from './valves.js';

/*
 * The one batch callback of a meter's valve instruments: at each collection it reports every
 * series (counts, and the queue sizes and pauses of its valves and of its group's dropped keys).
 *
 * A reader keeps at most `cardinalityLimit` attribute sets per instrument (2,000 by default) and
 * folds the rest into one set, { 'otel.metric.overflow': true }. For an observable instrument it
 * keeps only the last folded reading, not their sum: the folded keys' jobs would be undercounted
 * and the overflow could fall between two collections. So the callback folds first: per
 * instrument, the first limit − 1 attribute sets it reports keep their own series, for good, and
 * the later ones are reported as one summed reading with those same attributes, for good (a
 * counter so stays monotonic; the reader never has to fold).
 */

/** The attributes of a reader's overflow series: what valve folds merges with it. */
export const OVERFLOW: Attributes = Object.freeze({ 'otel.metric.overflow': true });

/** The SDK's default cardinality limit per instrument (MetricReader's cardinalitySelector). */
export const DEFAULT_CARDINALITY_LIMIT = 2000;

/** Calls `visit` with a series and a pause source for each dropped key of a group still paused. */
export type DroppedPauses = (visit: (s: Series, source: string) => void) => void;

/** A meter's instruments and its series, by canonical attributes. */
export interface Registry {
  readonly instruments: Instruments;
  readonly series: Map<string, Series>;
  /** Attribute sets per instrument a reader keeps: the lowest `cardinalityLimit` given on this meter. */
  limit: number;
  /** The instrumented groups' dropped keys still paused. */
  readonly dropped: Set<DroppedPauses>;
}

/**
 * One instrument's attribute sets in the order first reported: the first limit − 1 keep their
 * own series, every later one folds into OVERFLOW (decided once per set: a lower limit given
 * later applies to the sets reported from then on).
 */
class Cap {
  private own = 0;
  private readonly decided = new WeakMap<Attributes, boolean>();
  constructor(private readonly registry: Registry) {}

  owns(attributes: Attributes): boolean {
    let owns = this.decided.get(attributes);
    if (owns === undefined) {
      owns = this.own < this.registry.limit - 1;
      if (owns) this.own++;
      this.decided.set(attributes, owns);
    }
    return owns;
  }
}

/** Adds 1 to `source` of `s` in a per-series count. */
function bump(into: Map<Series, Map<string, number>>, s: Series, source: string): void {
  let bySource = into.get(s);
  if (bySource === undefined) {
    bySource = new Map();
    into.set(s, bySource);
  }
  bySource.set(source, (bySource.get(source) ?? 0) + 1);
}

/** Registers the registry's batch callback on `meter`. */
export function addCollector(meter: Meter, registry: Registry): void {
  const i = registry.instruments;
  // started, queued and running report the same attribute set per series: one decision serves the three.
  const perSeries = new Cap(registry);
  const rejected = new Cap(registry);
  const paused = new Cap(registry);
  const callback: BatchObservableCallback = (result) => {
    const pausedBy = new Map<Series, Map<string, number>>();
    for (const read of registry.dropped) read((s, source) => bump(pausedBy, s, source));
    let folded = false;
    let started = 0;
    let queuedSum = 0;
    let runningSum = 0;
    let rejectedFolded = -1; // -1: nothing folded
    let pausedFolded = -1;
    for (const s of registry.series.values()) {
      let queued = 0;
      let running = 0;
      for (const valve of s.valves) {
        const stats = valve.stats();
        queued += stats.queued;
        running += stats.running;
        if (stats.pausedBy !== null) bump(pausedBy, s, stats.pausedBy.source);
      }
      if (perSeries.owns(s.attributes)) {
        result.observe(i.started, s.started, s.attributes);
        result.observe(i.queued, queued, s.attributes);
        result.observe(i.running, running, s.attributes);
      } else {
        folded = true;
        started += s.started;
        queuedSum += queued;
        runningSum += running;
      }
      for (const [type, n] of s.rejected) {
        const attributes = s.with('error.type', type);
        if (rejected.owns(attributes)) result.observe(i.rejected, n, attributes);
        else rejectedFolded = Math.max(rejectedFolded, 0) + n;
      }
      // A source reported once is reported from then on (0 when no valve is paused by it):
      // the SDK would repeat its last value otherwise.
      const sources = pausedBy.get(s);
      if (sources !== undefined) for (const source of sources.keys()) s.pauseSources.add(source);
      for (const source of s.pauseSources) {
        const attributes = s.with('valve.pause.source', source);
        const n = sources?.get(source) ?? 0;
        if (paused.owns(attributes)) result.observe(i.paused, n, attributes);
        else pausedFolded = Math.max(pausedFolded, 0) + n;
      }
    }
    // Once a set folded, the overflow is reported at every collection (its sets stay folded).
    if (folded) {
      result.observe(i.started, started, OVERFLOW);
      result.observe(i.queued, queuedSum, OVERFLOW);
      result.observe(i.running, runningSum, OVERFLOW);
    }
    if (rejectedFolded >= 0) result.observe(i.rejected, rejectedFolded, OVERFLOW);
    if (pausedFolded >= 0) result.observe(i.paused, pausedFolded, OVERFLOW);
  };
  meter.addBatchObservableCallback(callback, [i.started, i.rejected, i.queued, i.running, i.paused]);
}

/** instrument()'s `cardinalityLimit`, checked: an integer ≥ 1 (default 2,000). */
export function checkCardinalityLimit(value: unknown): number {
  if (value === undefined) return DEFAULT_CARDINALITY_LIMIT;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new (typeof value === 'number' ? RangeError : TypeError)(
      `Expected \`cardinalityLimit\` to be a positive integer (your metric reader's cardinality limit, 2000 by default), got ${describe(value)}`,
    );
  }
  return value;
}
