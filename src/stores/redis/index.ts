export type { RedisStoreOptions } from './store.js';
export { RedisStoreTimeoutError, redisStore } from './store.js';
