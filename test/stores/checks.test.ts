/**
 * The checks every store shares (src/stores/checks.ts), the id rule createValve applies too,
 * and the error a Redis store call times out with. No servers.
 */
import { describe, expect, it } from 'vitest';
import { describe as describeValue } from '../../src/duration.js';
import { isValveError, RedisStoreTimeoutError, ValveError } from '../../src/errors.js';
import { createValve } from '../../src/index.js';
import { normalizeRule } from '../../src/rules/rule.js';
import { checkId, MAX_BATCH, MAX_DURATION_MS, unknownOption } from '../../src/stores/checks.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult } from '../../src/stores/store.js';

const perSecond = normalizeRule({ limit: 10, interval: '1s', burst: 5 }, 'rule');

describe('the id rule', () => {
  it('accepts 1 to 200 Unicode characters, counted as code points (not UTF-16 units)', () => {
    expect(checkId('a')).toBe('a');
    expect(checkId('a'.repeat(200))).toHaveLength(200);
    // 200 emoji are 200 characters but 400 UTF-16 units.
    expect(checkId('😀'.repeat(200))).toHaveLength(400);
    expect(() => checkId('😀'.repeat(201))).toThrow(/1 to 200 characters long, got 201 characters/);
    expect(() => checkId('a'.repeat(201))).toThrow(TypeError);
    expect(() => checkId('')).toThrow(/got 0 characters/);
  });

  it('rejects ids that are not well-formed Unicode (Redis could not keep them apart)', () => {
    // Lone surrogates become U+FFFD in UTF-8: these three would share one Redis key.
    expect(checkId('x\ufffd')).toBe('x\ufffd');
    for (const bad of ['x\ud800', 'x\udfff', '\udc00x', 'a\ud83d', '\ud83d\ud83d']) {
      expect(() => checkId(bad, 'id')).toThrow(TypeError);
      expect(() => checkId(bad, 'id')).toThrow(/`id`.*well-formed Unicode.*lone surrogate/);
    }
    expect(() => createValve({ id: 'x\ud800' })).toThrow(/`id`.*well-formed/);
    expect(() => memoryStore().pause('x\udfff', 10)).toThrow(TypeError);
    expect(() => memoryStore().acquire({ id: 'x\ud800', rules: [], costs: [1], count: 1 })).toThrow(
      /`request.id`.*well-formed/,
    );
  });

  it('rejects braces and non-strings, naming the option', () => {
    expect(() => checkId('a{b', 'request.id')).toThrow(/`request.id` to contain no '\{' or '\}'/);
    expect(() => checkId(42)).toThrow(/`id`.*got 42/);
    expect(() => checkId(Symbol('s'))).toThrow(/got a symbol/);
  });
});

describe('messages', () => {
  it('describes a value with the right article', () => {
    expect(describeValue(Symbol('x'))).toBe('a symbol');
    expect(describeValue({})).toBe('an object');
    expect(describeValue([])).toBe('an array');
    expect(describeValue(() => 1)).toBe('a function');
    expect(describeValue(null)).toBe('null');
  });

  it('writes "Unknown option" in one form', () => {
    expect(unknownOption('x', 'memoryStore()', ['clock'])).toBe(
      'Unknown option `x`; memoryStore() takes `clock`',
    );
    expect(unknownOption('r.y', 'a rule', ['a', 'b', 'c'])).toBe(
      'Unknown option `r.y`; a rule takes `a`, `b` and `c`',
    );
    expect(() => memoryStore({ clok: 1 } as never)).toThrow(
      'Unknown option `clok`; memoryStore() takes `clock`',
    );
    expect(() => normalizeRule({ limit: 1, interval: 1, x: 1 }, 'rules[0]')).toThrow(
      'Unknown option `rules[0].x`; a rule takes `limit`, `interval`, `algorithm` and `burst`',
    );
  });

  it('a sparse rules array names the missing rule', () => {
    // biome-ignore lint/suspicious/noSparseArray: the case under test
    const rules = [, { limit: 1, interval: '1s' }] as never;
    expect(() => createValve({ id: 'sparse', rules })).toThrow(TypeError);
    expect(() => createValve({ id: 'sparse', rules })).toThrow(/`rules\[0\]`.*got undefined/);
  });
});

describe('store argument bounds', () => {
  it('costs are positive integers (cost units); nothing of a refused batch is spent', () => {
    const store = memoryStore();
    for (const bad of [0.5, 1.5, 0, -1, Number.NaN, 2 ** 53]) {
      expect(() => store.acquire({ id: 'c', rules: [perSecond], costs: [1, bad], count: 2 })).toThrow(
        /`request.costs\[1\]` to be a positive integer/,
      );
    }
    expect(
      (store.acquire({ id: 'c', rules: [perSecond], costs: [5], count: 1 }) as AcquireResult).granted,
    ).toBe(1);
  });

  it(`a batch is at most ${MAX_BATCH} jobs, in createValve and in the store`, () => {
    expect(() => createValve({ id: 'b', batch: MAX_BATCH })).not.toThrow();
    expect(() => createValve({ id: 'b', batch: MAX_BATCH + 1 })).toThrow(RangeError);
    expect(() => createValve({ id: 'b', batch: MAX_BATCH + 1 })).toThrow(
      /`batch` to be at most 1000, got 1001/,
    );
    const costs = Array.from({ length: MAX_BATCH + 1 }, () => 1);
    const store = memoryStore();
    expect(() => store.acquire({ id: 'b', rules: [], costs, count: MAX_BATCH + 1 })).toThrow(
      /`request.count` to be at most 1000/,
    );
    expect((store.acquire({ id: 'b', rules: [], costs, count: MAX_BATCH }) as AcquireResult).granted).toBe(
      MAX_BATCH,
    );
  });

  it('pauses and lease TTLs are at most 365 days', () => {
    const store = memoryStore();
    expect(() => store.pause('d', MAX_DURATION_MS + 1)).toThrow(/`ms`.*up to 31536000000.*365 days/);
    expect(() => store.pause('d', Number.POSITIVE_INFINITY)).toThrow(RangeError);
    expect(store.pause('d', MAX_DURATION_MS)).toBeGreaterThan(0);
    expect(() => store.renew('d', ['t'], MAX_DURATION_MS + 1)).toThrow(/`ttl`/);
    expect(() =>
      store.acquire({ id: 'e', rules: [], costs: [1], count: 1, lease: { limit: 1, ttl: 1e300 } }),
    ).toThrow(/`request.lease.ttl`/);
  });

  it('a record TTL is a number of ms from 0 to 365 days', () => {
    const store = memoryStore();
    const request = { id: 'f', rules: [perSecond], costs: [1], count: 1, record: perSecond.digest };
    for (const bad of [-1, Number.NaN, MAX_DURATION_MS + 1, '60000']) {
      expect(() => store.acquire({ ...request, recordTtl: bad as number })).toThrow(/`request.recordTtl`/);
    }
    expect((store.acquire({ ...request, recordTtl: 60_000 }) as AcquireResult).granted).toBe(1);
  });
});

describe('RedisStoreTimeoutError', () => {
  const make = () => new RedisStoreTimeoutError('valve: Redis acquire did not answer within 5 ms');

  it('is a ValveError with code VALVE_REDIS_TIMEOUT, and keeps its name', () => {
    const err = make();
    expect(err).toBeInstanceOf(RedisStoreTimeoutError);
    expect(err).toBeInstanceOf(ValveError);
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe('RedisStoreTimeoutError');
    expect(err.code).toBe('VALVE_REDIS_TIMEOUT');
    expect(isValveError(err)).toBe(true);
    expect(isValveError(err, 'VALVE_REDIS_TIMEOUT')).toBe(true);
    expect(isValveError(err, 'STORE_UNAVAILABLE')).toBe(false);
    // With a code, isValveError narrows `code` to it (checked by the typecheck).
    const unknownError: unknown = err;
    if (isValveError(unknownError, 'VALVE_REDIS_TIMEOUT')) {
      const code: 'VALVE_REDIS_TIMEOUT' = unknownError.code;
      expect(code).toBe('VALVE_REDIS_TIMEOUT');
    }
    // Other ValveErrors are not timeouts.
    expect(new ValveError('CLOSED', 'closed')).not.toBeInstanceOf(RedisStoreTimeoutError);
    expect(new Error('x')).not.toBeInstanceOf(RedisStoreTimeoutError);
  });

  it('instanceof holds across two loaded copies of the module (ESM and CJS side by side)', async () => {
    // A second instance of the module, as a second copy of the package would load it.
    // @ts-expect-error a query import: vite loads a second instance of the module
    const copy = (await import('../../src/errors.js?copy')) as typeof import('../../src/errors.js');
    expect(copy.RedisStoreTimeoutError).not.toBe(RedisStoreTimeoutError);
    const theirs = new copy.RedisStoreTimeoutError('x');
    expect(theirs).toBeInstanceOf(RedisStoreTimeoutError);
    expect(theirs).toBeInstanceOf(ValveError);
    expect(isValveError(theirs, 'VALVE_REDIS_TIMEOUT')).toBe(true);
    expect(make()).toBeInstanceOf(copy.RedisStoreTimeoutError);
    expect(copy.isValveError(make())).toBe(true);
    expect(new copy.ValveError('CLOSED', 'c')).not.toBeInstanceOf(RedisStoreTimeoutError);
  });

  it('is what the package exports', async () => {
    const root = await import('../../src/index.js');
    expect(root.RedisStoreTimeoutError).toBe(RedisStoreTimeoutError);
  });
});
