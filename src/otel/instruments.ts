import {
  type Attributes,
  type AttributeValue,
  type Counter,
  createNoopMeter,
  type Histogram,
  type Meter,
  metrics,
  type ObservableCounter,
  type ObservableUpDownCounter,
  ValueType,
} from '@opentelemetry/api';
import { describe, quote } from '../duration.js';
import { checkKnownKeys } from '../stores/checks.js';

/*
 * valve/otel's instruments, named as OpenTelemetry's semantic conventions name things: a
 * `valve.` namespace, durations as histograms in seconds, failures as `error.type`, counts of
 * things that come and go as up-down counters. Created once per meter.
 */

/** The instrumentation scope name of the default meter (`metrics.getMeter('valve')`). */
export const METER_NAME = 'valve';

/** Bucket boundaries (s) of valve.job.wait.duration: from a job that never waited to an hour-long pause. */
export const WAIT_BUCKETS = [
  0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
];
/** Bucket boundaries (s) of valve.store.operation.duration: a memory store's microseconds to a slow Redis. */
export const STORE_BUCKETS = [
  0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

export interface Instruments {
  readonly wait: Histogram;
  readonly started: ObservableCounter;
  readonly rejected: ObservableCounter;
  readonly queued: ObservableUpDownCounter;
  readonly running: ObservableUpDownCounter;
  readonly paused: ObservableUpDownCounter;
  readonly pauses: Counter;
  readonly leaseLost: Counter;
  readonly storeErrors: Counter;
}

const byMeter = new WeakMap<Meter, Instruments>();

/** The valve instruments of `meter` (created on first use). */
export function valveInstruments(meter: Meter): Instruments {
  let found = byMeter.get(meter);
  if (found !== undefined) return found;
  const int = { valueType: ValueType.INT };
  found = {
    wait: meter.createHistogram('valve.job.wait.duration', {
      description: 'Time from run() to the start of a job.',
      unit: 's',
      advice: { explicitBucketBoundaries: WAIT_BUCKETS },
    }),
    started: meter.createObservableCounter('valve.job.started', {
      description: 'Jobs started.',
      unit: '{job}',
      ...int,
    }),
    rejected: meter.createObservableCounter('valve.job.rejected', {
      description: 'Jobs that ended without starting (and calls run() refused), by error.type.',
      unit: '{job}',
      ...int,
    }),
    queued: meter.createObservableUpDownCounter('valve.job.queued', {
      description: 'Jobs waiting for their start.',
      unit: '{job}',
      ...int,
    }),
    running: meter.createObservableUpDownCounter('valve.job.running', {
      description: 'Jobs started and not yet settled.',
      unit: '{job}',
      ...int,
    }),
    paused: meter.createObservableUpDownCounter('valve.paused', {
      description: 'Valves that know of a shared pause now, by valve.pause.source.',
      unit: '{valve}',
      ...int,
    }),
    pauses: meter.createCounter('valve.pauses', {
      description: "Pauses applied or extended ('pause' events), by valve.pause.source.",
      unit: '{pause}',
      ...int,
    }),
    leaseLost: meter.createCounter('valve.lease.lost', {
      description: 'Global-concurrency leases lost while their job ran, by valve.lease.lost.reason.',
      unit: '{lease}',
      ...int,
    }),
    storeErrors: meter.createCounter('valve.store.errors', {
      description:
        "Store calls that failed ('store-error' events), by valve.store.operation.name and error.type.",
      unit: '{error}',
      ...int,
    }),
  };
  byMeter.set(meter, found);
  return found;
}

/** Options shared by instrument() and instrumentStore(). */
export interface MetricsOptions {
  /** The meter to record with. Default: `metrics.getMeter('valve')` of the global meter provider at the time of the call. */
  meter?: Meter | undefined;
  /** Attributes added to every data point (e.g. `{ 'service.component': 'github' }`). Default: none. */
  attributes?: Attributes | undefined;
  /**
   * Adds the valve's id (a group's key) as the attribute `valve.id`. Default false: one series per
   * instrument() call, whatever the number of ids. Turn it on only when the ids are few.
   */
  includeId?: boolean | undefined;
}

/** The checked options: the meter (null when it is the no-op meter: nothing to record), the base attributes. */
export interface CheckedOptions {
  readonly meter: Meter | null;
  readonly attributes: Attributes;
  readonly includeId: boolean;
}

export function checkOptions(options: unknown, fn: string, extra: readonly string[] = []): CheckedOptions {
  if (options !== undefined && (typeof options !== 'object' || options === null || Array.isArray(options))) {
    throw new TypeError(
      `Expected ${fn} \`options\` to be an object like { meter, attributes, includeId }, got ${describe(options)}`,
    );
  }
  const o = (options ?? {}) as MetricsOptions;
  checkKnownKeys(o, ['meter', 'attributes', 'includeId', ...extra], `${fn}`);
  const meter = o.meter ?? metrics.getMeter(METER_NAME);
  if (
    typeof meter !== 'object' ||
    meter === null ||
    typeof meter.createHistogram !== 'function' ||
    typeof meter.addBatchObservableCallback !== 'function'
  ) {
    throw new TypeError(`Expected \`meter\` to be an OpenTelemetry Meter, got ${describe(meter)}`);
  }
  if (o.includeId !== undefined && typeof o.includeId !== 'boolean') {
    throw new TypeError(`Expected \`includeId\` to be a boolean, got ${describe(o.includeId)}`);
  }
  return {
    meter: meter === createNoopMeter() ? null : meter,
    attributes: checkAttributes(o.attributes),
    includeId: o.includeId === true,
  };
}

function checkAttributes(value: unknown): Attributes {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(
      `Expected \`attributes\` to be an object of string, number or boolean values, got ${describe(value)}`,
    );
  }
  const out: Record<string, AttributeValue> = {};
  for (const [key, v] of Object.entries(value)) {
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') {
      throw new TypeError(
        `Expected \`attributes[${quote(key)}]\` to be a string, number or boolean, got ${describe(v)}`,
      );
    }
    out[key] = v;
  }
  return out;
}

const NAME = /^[A-Za-z_][\w.-]{0,63}$/;

/**
 * The `error.type` of a failure, low in cardinality: a ValveError's code (or another error's
 * string `code`, such as ECONNREFUSED), else the error's name (TypeError, AbortError…), else `_OTHER`.
 */
export function errorType(err: unknown): string {
  if (typeof err === 'object' && err !== null) {
    try {
      const code = (err as { code?: unknown }).code;
      if (typeof code === 'string' && NAME.test(code)) return code;
      const name = (err as { name?: unknown }).name;
      if (typeof name === 'string' && NAME.test(name)) return name;
    } catch {
      // A getter that throws (a Proxy, say): the scheduler calls this and must not see it.
    }
  }
  return '_OTHER';
}
