/** Stable codes of operational failures. See docs/errors.md. */
export type ValveErrorCode = 'QUEUE_FULL' | 'MAX_WAIT' | 'STORE_UNAVAILABLE' | 'LEASE_LOST' | 'CLOSED';

const BRAND = Symbol.for('valve.ValveError');

/**
 * The one error class for operational failures. `instanceof ValveError` holds across
 * two loaded copies of the package (ESM and CJS side by side): the check uses a
 * global symbol brand rather than the prototype chain.
 */
export class ValveError extends Error {
  override readonly name = 'ValveError';
  readonly code: ValveErrorCode;

  constructor(code: ValveErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    Object.defineProperty(this, BRAND, { value: true });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }
}

/** True when `err` is a ValveError (from any copy of the package), optionally with the given code. */
export function isValveError(err: unknown, code?: ValveErrorCode): err is ValveError {
  return err instanceof ValveError && (code === undefined || err.code === code);
}
