/**
 * The code of docs/errors.md: handling a ValveError by its code, counting Redis timeouts, and
 * logging store errors. test/acceptance/docs-examples.test.ts runs each: a full queue answered
 * with a 503, and a Redis store whose server never answers.
 */
import type { Valve } from '../src/index.js';
// #region valve-error
import { isValveError, ValveError } from '../src/index.js';
// #endregion valve-error

export interface Logger {
  warn(fields: object, message: string): void;
}

/** Runs a job; a full queue becomes a 503 for your own caller, other ValveErrors are logged. */
export async function handle<T>(
  valve: Valve,
  job: () => Promise<T>,
  reply: (status: number, body: string) => T,
  logger: Logger,
): Promise<T> {
  // #region valve-error
  try {
    return await valve.run(job);
  } catch (err) {
    if (isValveError(err, 'QUEUE_FULL')) return reply(503, 'busy, try again');
    if (isValveError(err)) logger.warn({ code: err.code, cause: err.cause }, err.message);
    throw err;
  }
  // #endregion valve-error
}

/** Whether an error is a ValveError, as `instanceof` (which also holds across package copies). */
export const isValveErrorInstance = (err: unknown): boolean => err instanceof ValveError;

export interface Metrics {
  increment(name: string): void;
}

export function countTimeouts(valve: Valve, metrics: Metrics) {
  // #region timeout
  valve.on('store-error', (error) => {
    if (isValveError(error, 'VALVE_REDIS_TIMEOUT')) metrics.increment('redis.timeout');
    // the same: error instanceof RedisStoreTimeoutError, or error.code === 'VALVE_REDIS_TIMEOUT'
  });
  // #endregion timeout
}

export function logStoreErrors(valve: Valve, logger: Logger) {
  // #region store-error
  valve.on('store-error', (error, { operation, id, action }) => {
    // operation: 'acquire' | 'pause' | 'resume' | 'renew' | 'release' | 'subscribe' | 'window'
    // action: what valve does about it: 'wait' | 'throw' | 'open' | 'lease-lost' | 'none'
    logger.warn({ err: error, operation, id, action }, 'valve store error');
  });
  // #endregion store-error
}
