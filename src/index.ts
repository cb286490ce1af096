export type { Clock } from './clock.js';
export { systemClock } from './clock.js';
export type { ValveErrorCode } from './errors.js';
export { isValveError, ValveError } from './errors.js';
export type {
  LeaseLostEvent,
  PauseEvent,
  ResumeEvent,
  StoreErrorContext,
  StoreOperation,
  ValveEventName,
  ValveEvents,
  ValveListener,
} from './events.js';
export type { FetchLike, FetchRetryEvent, WrapFetchOptions } from './feedback/fetch.js';
export type { FeedbackIgnored, FeedbackReading, IgnoredReason } from './feedback/observe.js';
export type { PauseSource } from './internal.js';
export type {
  ConcurrencyOption,
  FeedbackOptions,
  StoreErrorMode,
  ValveOptions,
} from './options.js';
export type { Rule, StoreRule } from './rules/rule.js';
export type { MemoryStoreOptions } from './stores/memory.js';
export { memoryStore } from './stores/memory.js';
export type { RedisStoreOptions } from './stores/redis/index.js';
export { RedisStoreTimeoutError, redisStore } from './stores/redis/index.js';
export type {
  AcquireRequest,
  AcquireResult,
  BlockReason,
  Lease,
  LeaseRequest,
  MaybePromise,
  Store,
  WakeEvent,
  WakeStatus,
} from './stores/store.js';
export type { JobContext, JobLease, RunOptions, Valve, ValveStats } from './valve.js';
export { createValve } from './valve.js';
