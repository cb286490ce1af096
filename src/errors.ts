/**
 * Stable codes of operational failures. See docs/errors.md. The first five reject jobs;
 * `VALVE_REDIS_TIMEOUT` is never a job's rejection, only a store call's error (a
 * {@link RedisStoreTimeoutError}, found in `'store-error'` and as a `STORE_UNAVAILABLE` cause).
 */
export type ValveErrorCode =
  | 'QUEUE_FULL'
  | 'MAX_WAIT'
  | 'STORE_UNAVAILABLE'
  | 'LEASE_LOST'
  | 'CLOSED'
  | 'VALVE_REDIS_TIMEOUT';

const BRAND = Symbol.for('valve.ValveError');

function branded(value: unknown): value is ValveError {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
}

/**
 * The one error class for operational failures. `instanceof ValveError` holds across
 * two loaded copies of the package (ESM and CJS side by side): the check uses a
 * global symbol brand rather than the prototype chain.
 */
export class ValveError extends Error {
  override readonly name: string = 'ValveError';
  readonly code: ValveErrorCode;

  constructor(code: ValveErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    Object.defineProperty(this, BRAND, { value: true });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return branded(value);
  }
}

/**
 * A Redis store call that did not answer within the store's `timeout`: a `ValveError` with
 * code `'VALVE_REDIS_TIMEOUT'` and name `'RedisStoreTimeoutError'`. Like `ValveError`,
 * `instanceof RedisStoreTimeoutError` holds across two loaded copies of the package.
 */
export class RedisStoreTimeoutError extends ValveError {
  override readonly name: string = 'RedisStoreTimeoutError';
  declare readonly code: 'VALVE_REDIS_TIMEOUT';

  constructor(message: string) {
    super('VALVE_REDIS_TIMEOUT', message);
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return branded(value) && value.code === 'VALVE_REDIS_TIMEOUT';
  }
}

/**
 * True when `err` is a ValveError (from any copy of the package), optionally with the given
 * code; with a code, it narrows `err.code` to that code.
 */
export function isValveError<C extends ValveErrorCode = ValveErrorCode>(
  err: unknown,
  code?: C,
): err is ValveError & { readonly code: C } {
  return err instanceof ValveError && (code === undefined || err.code === code);
}
