/**
 * `valve/otel`: OpenTelemetry metrics for valves, valve groups and stores, through
 * `@opentelemetry/api` (an optional peer dependency: only this subpath imports it; the package
 * root never does). See docs/metrics.md.
 *
 * ```ts
 * import { instrument, instrumentStore } from 'valve/otel';
 *
 * const valve = createValve({ id: 'github:app-42', rules, store: instrumentStore(redisStore({ client })) });
 * instrument(valve);
 * ```
 *
 * With no meter provider registered, instrument() and instrumentStore() do nothing: the valve is
 * left untouched, the store is returned as it is.
 */
export type { MetricsOptions } from './otel/instruments.js';
export { METER_NAME, STORE_BUCKETS, WAIT_BUCKETS } from './otel/instruments.js';
export type { InstrumentStoreOptions } from './otel/store.js';
export { instrumentStore } from './otel/store.js';
export type { Instrumentation, InstrumentOptions } from './otel/valves.js';
export { instrument } from './otel/valves.js';
