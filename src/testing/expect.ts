import { AssertionError } from 'node:assert';

/**
 * The few matchers the conformance cases use, on node:assert's AssertionError (so that every
 * runner shows actual and expected), with no test-runner import: the suite runs under vitest,
 * node:test, jest or mocha alike.
 */
export interface Expectation {
  toBe(expected: unknown): void;
  toEqual(expected: unknown): void;
  toMatchObject(expected: Record<string, unknown>): void;
  toBeNull(): void;
  toBeUndefined(): void;
  toHaveLength(length: number): void;
  toBeGreaterThan(bound: number): void;
  toBeGreaterThanOrEqual(bound: number): void;
  toBeLessThan(bound: number): void;
  toBeLessThanOrEqual(bound: number): void;
  readonly not: { toBe(unexpected: unknown): void; toContain(item: unknown): void };
}

const show = (value: unknown): string => {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value !== 'object' || value === null) return String(value);
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
};

/** Structural equality: arrays item by item, objects by own keys (a key holding undefined counts as absent). */
function equal(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((item, i) => equal(item, b[i]));
  }
  const ra = a as Record<string, unknown>;
  const rb = b as Record<string, unknown>;
  const keys = new Set([...Object.keys(ra), ...Object.keys(rb)]);
  for (const key of keys) if (!equal(ra[key], rb[key])) return false;
  return true;
}

/** Fails the case with `message` (an AssertionError, as every runner shows it). */
export function fail(message: string): never {
  throw new AssertionError({ message });
}

export function expect(actual: unknown, label?: string): Expectation {
  const fail = (operator: string, expected: unknown, text: string): never => {
    throw new AssertionError({
      message: `${label ? `${label}: ` : ''}expected ${show(actual)} ${text}`,
      actual,
      expected,
      operator,
    });
  };
  const number = (operator: string, bound: number, holds: (n: number) => boolean, text: string) => {
    if (typeof actual !== 'number' || !holds(actual)) fail(operator, bound, `${text} ${bound}`);
  };
  return {
    toBe: (expected) => {
      if (!Object.is(actual, expected)) fail('toBe', expected, `to be ${show(expected)}`);
    },
    toEqual: (expected) => {
      if (!equal(actual, expected)) fail('toEqual', expected, `to equal ${show(expected)}`);
    },
    toMatchObject: (expected) => {
      const record = actual as Record<string, unknown> | null;
      const ok =
        typeof record === 'object' &&
        record !== null &&
        Object.keys(expected).every((key) => equal(record[key], expected[key]));
      if (!ok) fail('toMatchObject', expected, `to match ${show(expected)}`);
    },
    toBeNull: () => {
      if (actual !== null) fail('toBeNull', null, 'to be null');
    },
    toBeUndefined: () => {
      if (actual !== undefined) fail('toBeUndefined', undefined, 'to be undefined');
    },
    toHaveLength: (length) => {
      const size = (actual as { length?: unknown } | null | undefined)?.length;
      if (size !== length) fail('toHaveLength', length, `to have length ${length}`);
    },
    toBeGreaterThan: (bound) => number('>', bound, (n) => n > bound, 'to be >'),
    toBeGreaterThanOrEqual: (bound) => number('>=', bound, (n) => n >= bound, 'to be >='),
    toBeLessThan: (bound) => number('<', bound, (n) => n < bound, 'to be <'),
    toBeLessThanOrEqual: (bound) => number('<=', bound, (n) => n <= bound, 'to be <='),
    not: {
      toBe: (unexpected) => {
        if (Object.is(actual, unexpected)) fail('notToBe', unexpected, `not to be ${show(unexpected)}`);
      },
      toContain: (item) => {
        if (!Array.isArray(actual) || actual.includes(item)) {
          fail('notToContain', item, `not to contain ${show(item)}`);
        }
      },
    },
  };
}
