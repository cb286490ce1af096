import type { Attributes } from '@opentelemetry/api';
import {
  type DataPoint,
  DataPointType,
  type Histogram,
  MeterProvider,
  MetricReader,
  type ResourceMetrics,
} from '@opentelemetry/sdk-metrics';

/** A reader the test collects from when it wants (OpenTelemetry's pull model, in memory). */
export class TestReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

/** A meter provider with one TestReader, and the 'valve' meter of it. */
export function meterSetup() {
  const reader = new TestReader();
  const provider = new MeterProvider({ readers: [reader] });
  return { reader, provider, meter: provider.getMeter('valve') };
}

export interface Collected {
  /** The data points of one metric (none when the metric was not reported). */
  points<T = number>(name: string): DataPoint<T>[];
  /** The value of the data point of `name` whose attributes are exactly `attributes`; undefined when none. */
  value<T = number>(name: string, attributes?: Attributes): T | undefined;
  /** Every metric name reported. */
  names(): string[];
  /** A metric's unit and description, its kind of data points, and for sums whether it is monotonic. */
  descriptor(
    name: string,
  ): { unit: string; description: string; kind: string; monotonic: boolean | undefined } | undefined;
}

function same(a: Attributes, b: Attributes): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => a[k] === b[k]);
}

/** Collects once, failing on collection errors. */
export async function collect(reader: MetricReader): Promise<Collected> {
  const { resourceMetrics, errors } = await reader.collect();
  if (errors.length > 0) throw new AggregateError(errors, 'metric collection failed');
  return collected(resourceMetrics);
}

function collected(rm: ResourceMetrics): Collected {
  const metrics = rm.scopeMetrics.flatMap((s) => s.metrics);
  const find = (name: string) => metrics.filter((m) => m.descriptor.name === name);
  return {
    points: <T>(name: string) => find(name).flatMap((m) => m.dataPoints as DataPoint<T>[]),
    value: <T>(name: string, attributes: Attributes = {}) =>
      find(name)
        .flatMap((m) => m.dataPoints as DataPoint<T>[])
        .find((p) => same(p.attributes, attributes))?.value,
    names: () => [...new Set(metrics.filter((m) => m.dataPoints.length > 0).map((m) => m.descriptor.name))],
    descriptor: (name) => {
      const m = find(name)[0];
      if (m === undefined) return undefined;
      return {
        unit: m.descriptor.unit,
        description: m.descriptor.description,
        kind: DataPointType[m.dataPointType],
        monotonic: m.dataPointType === DataPointType.SUM ? m.isMonotonic : undefined,
      };
    },
  };
}

export type { Histogram };
