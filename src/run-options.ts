import { describe } from './duration.js';
import { waitOption } from './options.js';
import { checkKnownKeys, unknownOption } from './stores/checks.js';
import type { RunOptions } from './types.js';

const RUN_OPTIONS = ['cost', 'priority', 'signal', 'maxWait'] as const;

/** run()'s options once checked. One record per valve, refilled by each call: no allocation per job. */
export class RunArgs {
  /** Cost units: a positive safe integer. */
  cost = 1;
  /** Finite, never -0. */
  priority = 0;
  /** The caller's signal, not yet aborted when read; cleared after each read. */
  signal: AbortSignal | null = null;
  /** Milliseconds, or Infinity. */
  maxWait = 0;
}

/**
 * Checks run()'s `options` (an object: the caller handles undefined). Returns the error the job
 * rejects with, or undefined after filling `out` (`maxWait` defaults to the valve's). `out` is
 * written only at the end, so a getter that calls run() again cannot mix two calls' values.
 */
export function readRunOptions(options: RunOptions, maxWaitDefault: number, out: RunArgs): Error | undefined {
  if (typeof options !== 'object' || options === null) {
    return new TypeError(
      `Expected run() options to be an object like { cost: 1, priority: 0 }, got ${describe(options)}`,
    );
  }
  for (const key in options) {
    if (key !== 'cost' && key !== 'priority' && key !== 'signal' && key !== 'maxWait') {
      return new TypeError(unknownOption(key, 'run()', RUN_OPTIONS));
    }
  }
  let cost = 1;
  let priority = 0;
  let signal: AbortSignal | null = null;
  let maxWait = maxWaitDefault;
  if (options.cost !== undefined) {
    cost = options.cost;
    if (typeof cost !== 'number') {
      return new TypeError(`Expected \`cost\` to be a positive integer, got ${describe(cost)}`);
    }
    // Cost units are whole: a fractional cost would let a GCRA window hold up to
    // limit + burst − ε units instead of limit + burst − 1.
    if (!Number.isSafeInteger(cost) || cost < 1) {
      return new RangeError(`Expected \`cost\` to be a positive integer, got ${String(cost)}`);
    }
  }
  if (options.priority !== undefined) {
    priority = options.priority;
    if (typeof priority !== 'number') {
      return new TypeError(`Expected \`priority\` to be a finite number, got ${describe(priority)}`);
    }
    if (!Number.isFinite(priority)) {
      return new RangeError(`Expected \`priority\` to be a finite number, got ${String(priority)}`);
    }
    priority += 0; // -0 → 0
  }
  if (options.signal !== undefined) {
    const s = options.signal as unknown;
    if (
      typeof s !== 'object' ||
      s === null ||
      typeof (s as AbortSignal).addEventListener !== 'function' ||
      typeof (s as AbortSignal).removeEventListener !== 'function' ||
      typeof (s as AbortSignal).aborted !== 'boolean'
    ) {
      return new TypeError(`Expected \`signal\` to be an AbortSignal, got ${describe(s)}`);
    }
    signal = s as AbortSignal;
  }
  if (options.maxWait !== undefined) {
    try {
      maxWait = waitOption(options.maxWait, 'maxWait');
    } catch (err) {
      return err as Error;
    }
  }
  out.cost = cost;
  out.priority = priority;
  out.signal = signal;
  out.maxWait = maxWait;
  return undefined;
}

/**
 * Checks close()'s options (a valve's and a group's): returns whether to drain, or the
 * TypeError the call rejects with.
 */
export function readCloseOptions(options: unknown): boolean | TypeError {
  if (options === undefined) return false;
  if (typeof options !== 'object' || options === null) {
    return new TypeError(
      `Expected close() options to be an object like { drain: true }, got ${describe(options)}`,
    );
  }
  try {
    checkKnownKeys(options as Record<string, unknown>, ['drain'], 'close()');
  } catch (err) {
    return err as TypeError;
  }
  const drain = (options as { drain?: unknown }).drain;
  if (drain !== undefined && typeof drain !== 'boolean') {
    return new TypeError(`Expected \`drain\` to be a boolean, got ${describe(drain)}`);
  }
  return drain === true;
}
