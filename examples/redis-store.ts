/**
 * The code of docs/redis.md around the set-ups: redisStore()'s options, a limit rolled out
 * with setRules(), and the 'rule-mismatch' event. test/acceptance/docs-examples.test.ts runs
 * each against the suite's Redis.
 */
import { type RedisStoreOptions, redisStore, type Valve } from '../src/index.js';

export function storeWithOptions(
  client: RedisStoreOptions['client'],
  subscriber: RedisStoreOptions['subscriber'],
  pubsub: RedisStoreOptions['pubsub'],
) {
  // #region options
  const store = redisStore({
    client, // required: ioredis / iovalkey Redis or Cluster, or node-redis client or cluster
    subscriber, // optional: a second connection for pub/sub wake-ups
    prefix: 'valve', // key prefix: stores share state only with the same server and prefix
    timeout: 2000, // valve's own deadline per store call, ms
    pubsub, // 'classic' | 'sharded'; default: 'sharded' on a cluster client, else 'classic'
  });
  // #endregion options
  return store;
}

/** A limit change pushed to a running valve. */
export async function raiseLimit(valve: Valve) {
  // #region set-rules
  // e.g. on a config push, in every process
  await valve.setRules({ limit: 15_000, interval: '1h', algorithm: 'fixed-window' });
  // #endregion set-rules
}

export interface Log {
  warn(fields: object, message: string): void;
}

export function logMismatch(valve: Valve, log: Log) {
  // #region rule-mismatch
  valve.on('rule-mismatch', ({ id, rules, recorded }) =>
    log.warn({ id, rules, recorded }, 'another process uses other rules for this id'),
  );
  // #endregion rule-mismatch
}
