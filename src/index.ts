export type { Clock } from './clock.js';
export { systemClock } from './clock.js';
export type { ValveErrorCode } from './errors.js';
export { isValveError, ValveError } from './errors.js';
export type { Rule, StoreRule } from './rules/rule.js';
export { memoryStore } from './stores/memory.js';
export { type RedisStoreOptions, RedisStoreTimeoutError, redisStore } from './stores/redis/index.js';
export type {
  AcquireRequest,
  AcquireResult,
  BlockReason,
  Lease,
  LeaseRequest,
  MaybePromise,
  Store,
  WakeEvent,
} from './stores/store.js';
