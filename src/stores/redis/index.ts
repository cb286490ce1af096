export { RedisStoreTimeoutError } from '../../errors.js';
export type { RedisStoreOptions } from './store.js';
export { redisStore } from './store.js';
