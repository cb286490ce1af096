/**
 * The shape of a valve's acquire calls on Redis (src/stores/redis/acquire-call.ts, shapeOf): its
 * keys and rule arguments, built once and reused while the valve sends the same id, lease and
 * record. A valve group's key sends the rule-set record on its first call and then once per
 * quarter of the record's TTL: the calls in between must not rebuild the shape each time the
 * record comes or goes (at 10,000 keys that was half the client's CPU per job).
 */
import { describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { shapeOf } from '../../src/stores/redis/acquire-call.js';
import { idKeys } from '../../src/stores/redis/keys.js';
import type { AcquireRequest } from '../../src/stores/store.js';

describe('shapeOf', () => {
  const owner = {};
  const keysOf = (id: string) => idKeys('valve', id);
  const rules = [normalizeRule({ limit: 10, interval: 1000, burst: 10 }, 'rule')];
  const request = (record: string | undefined): AcquireRequest => ({
    id: 'tenant-1',
    rules,
    costs: [1],
    count: 1,
    record,
  });
  const shape = (r: AcquireRequest) => shapeOf(owner, keysOf, r, rules, 1, 1, 0);

  it('keeps one shape for the calls with the record and one for those without', () => {
    const plain = shape(request(undefined));
    const recorded = shape(request('digest'));
    expect(recorded).not.toBe(plain);
    expect(recorded.tail[0]).toBe('=digest');
    expect(plain.tail[0]).toBe('-');
    // Alternating, as a key does: each kind is reused.
    expect(shape(request(undefined))).toBe(plain);
    expect(shape(request('digest'))).toBe(recorded);
    expect(shape(request(undefined))).toBe(plain);
    // The second kind is made from the first: the same keys and rule arguments.
    expect(recorded.keys).toBe(plain.keys);
    expect(recorded.ruleArgs).toBe(plain.ruleArgs);
    expect(recorded.spec).toEqual([...plain.head, ...plain.ruleArgs, ...recorded.tail]);
    expect(recorded.specKey).toBe(recorded.spec.join(' '));
  });

  it('builds a new shape for another id, another record or another store', () => {
    const plain = shape(request(undefined));
    expect(shapeOf(owner, keysOf, { ...request(undefined), id: 'tenant-2' }, rules, 1, 1, 0)).not.toBe(plain);
    const other = shapeOf({}, keysOf, request(undefined), rules, 1, 1, 0);
    expect(other).not.toBe(plain);
    expect(other.keys).toEqual(plain.keys);
    const recorded = shape(request('digest'));
    expect(shape(request('other digest'))).not.toBe(recorded);
  });
});
