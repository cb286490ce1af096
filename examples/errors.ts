/**
 * The code of docs/errors.md: handling a ValveError by its code, counting Redis timeouts, and
 * logging store errors. test/acceptance/docs-examples.test.ts runs each: a full queue answered
 * with a 503, and a Redis store whose server never answers; test/integrations/sdks.test.ts runs
 * complete(): a ValveError behind the OpenAI SDK's APIConnectionError.
 */
// #region sdk
import OpenAI from 'openai';
// #endregion sdk
import type {
  ChatCompletion,
  ChatCompletionCreateParamsNonStreaming,
} from 'openai/resources/chat/completions';
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

/**
 * A completion through an OpenAI client built on `valve.wrapFetch(fetch)`; a request valve never
 * sent (its maxWait passed) becomes a 503 for your own caller.
 */
export async function complete<T>(
  openai: OpenAI,
  params: ChatCompletionCreateParamsNonStreaming,
  reply: (status: number, body: string) => T,
): Promise<ChatCompletion | T> {
  // #region sdk
  try {
    return await openai.chat.completions.create(params);
  } catch (err) {
    // The SDK reports what its fetch rejected with as a connection error, the ValveError as cause.
    if (err instanceof OpenAI.APIConnectionError && isValveError(err.cause, 'MAX_WAIT')) {
      return reply(503, 'busy, try again');
    }
    throw err;
  }
  // #endregion sdk
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
