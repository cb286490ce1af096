export type { Clock } from './clock.js';
export { systemClock } from './clock.js';
export type { ValveErrorCode } from './errors.js';
export { isValveError, ValveError } from './errors.js';
export type {
  FeedbackIgnored,
  FeedbackModel,
  FetchRetryEvent,
  IgnoredReason,
  LeaseLostEvent,
  MismatchedRule,
  PauseCause,
  PauseEvent,
  PauseSource,
  ResumeEvent,
  RuleMismatchEvent,
  StoreErrorContext,
  StoreOperation,
  ValveEventName,
  ValveEvents,
  ValveListener,
} from './events.js';
export type { FetchLike, WrapFetchOptions } from './feedback/fetch.js';
export type { FeedbackReading } from './feedback/types.js';
export type {
  GroupFetchOptions,
  ValveGroup,
  ValveGroupListener,
  ValveGroupOptions,
  ValveGroupStats,
  ValveOverrides,
} from './group.js';
export { createValveGroup } from './group.js';
export type {
  ConcurrencyOption,
  FeedbackOptions,
  Precision,
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
  WindowTicket,
} from './stores/store.js';
export type { JobContext, JobLease, RunOptions, Valve, ValveStats } from './types.js';
export { createValve } from './valve.js';
