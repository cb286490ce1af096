import { describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { checkBounds, checkRules, type Grant } from '../helpers/bounds.js';

/** Self-tests of the independent bound checker used by the property, Redis and engine tests. */

const T0 = 1_700_000_000_000; // an epoch ms on a 1s (and 1h) boundary

const at = (offsets: number[], cost = 1): Grant[] => offsets.map((o) => ({ t: T0 + o, cost }));
const bounds = (grants: Grant[], rule: Parameters<typeof checkBounds>[1]) =>
  checkBounds(grants, rule).map((v) => v.bound);

describe('checkBounds: GCRA, burst 1', () => {
  const rule = { limit: 10, interval: '1s' };

  it('accepts starts exactly interval / limit apart', () => {
    expect(checkBounds(at([0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100]), rule)).toEqual([]);
  });

  it('flags a start 1 µs early (spacing)', () => {
    const v = checkBounds(at([0, 100, 199.999]), rule);
    expect(v.map((x) => x.bound)).toEqual(['spacing']);
    expect(v[0]!.rule).toBe('10 per 1000ms (gcra, burst 1)');
    expect(v[0]!.from).toBe(T0 + 100);
    expect(v[0]!.to).toBe(T0 + 199.999);
    expect(v[0]!.message).toMatch(/99999µs apart, needed 100000/);
  });

  it('flags limit + 1 units in a half-open window of one interval', () => {
    const grants = at(Array.from({ length: 11 }, (_, i) => i * 99.9));
    expect(bounds(grants, rule)).toContain('window');
  });

  it('half-open windows: a start exactly one interval later is fine', () => {
    expect(checkBounds(at([0, 1000]), { limit: 1, interval: '1s' })).toEqual([]);
    expect(bounds(at([0, 999.999]), { limit: 1, interval: '1s' })).toEqual(['window', 'spacing']);
  });

  it('a cost-2 job needs two emissions before the next start', () => {
    const r = { limit: 10, interval: '1s', burst: 2 };
    // Capacity 2 units: after a cost-2 job at 0, the next unit may start at 100.
    expect(checkBounds([...at([0], 2), ...at([100])], r)).toEqual([]);
    expect(bounds([...at([0], 2), ...at([99.999])], r)).toEqual(['spacing']);
  });

  it('costs are whole units: a fractional cost is refused, not checked against a looser bound', () => {
    const r = { limit: 1, interval: '1s' };
    // 1.5 units in [0, 1000) would break "at most limit + burst − 1" (here 1).
    expect(() => checkBounds([...at([0, 0], 0.5), ...at([500], 0.5)], r)).toThrow(RangeError);
    expect(() => checkBounds(at([0], 0), r)).toThrow(/\(positive integers\), got 0 /);
  });
});

describe('checkBounds: GCRA with burst', () => {
  const rule = { limit: 10, interval: '1s', burst: 3 };

  it('accepts a burst followed by the steady rate: limit + burst − 1 units in a window', () => {
    const grants = at([0, 0, 0, 100, 200, 300, 400, 500, 600, 700, 800, 900]); // 12 = 10 + 3 − 1
    expect(checkBounds(grants, rule)).toEqual([]);
  });

  it('flags a burst larger than burst', () => {
    expect(bounds(at([0, 0, 0, 0]), rule)).toEqual(['spacing']);
  });

  it('flags limit + burst units in a window', () => {
    const grants = at([0, 0, 0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 950]);
    expect(bounds(grants, rule)).toEqual(['window', 'spacing']);
  });
});

describe('checkBounds: fixed window', () => {
  const rule = { limit: 2, interval: '1s', algorithm: 'fixed-window' as const };

  it('accepts limit per aligned window, even 2 × limit across a boundary', () => {
    expect(checkBounds(at([999, 999.999, 1000, 1000.5]), rule)).toEqual([]);
  });

  it('flags limit + 1 in one aligned window', () => {
    const v = checkBounds(at([0, 500, 999.999]), rule);
    expect(v.map((x) => x.bound)).toEqual(['aligned-window']);
    expect(v[0]!.units).toBe(3);
    expect(v[0]!.allowed).toBe(2);
  });

  it('windows are aligned on the epoch, not on the first grant', () => {
    expect(bounds(at([500, 999, 1499]), rule)).toEqual([]);
    expect(bounds(at([1000, 1500, 1999]), rule)).toEqual(['aligned-window']);
  });
});

describe('checkBounds: sliding window', () => {
  const rule = { limit: 3, interval: '1s', algorithm: 'sliding-window' as const };

  it('accepts the whole limit at once, then a unit each time one leaves the window', () => {
    expect(checkBounds(at([0, 0, 0, 1000, 1000, 1000, 2500, 2999.999, 3000]), rule)).toEqual([]);
  });

  it('flags limit + 1 units in a window that is not aligned', () => {
    const v = checkBounds(at([400, 900, 1200, 1399.999]), rule);
    expect(v.map((x) => x.bound)).toEqual(['window']);
    expect(v[0]!.units).toBe(4);
    expect(v[0]!.allowed).toBe(3);
  });

  it('the window is half-open: a grant exactly one interval later is in the next one', () => {
    expect(bounds(at([0, 0, 0, 1000]), rule)).toEqual([]);
    expect(bounds(at([0, 0, 0, 999.999]), rule)).toEqual(['window']);
  });
});

describe('checkBounds: inputs', () => {
  it('takes grants in any order', () => {
    expect(checkBounds(at([300, 0, 200, 100]), { limit: 10, interval: '1s' })).toEqual([]);
  });

  it('takes a normalised StoreRule too', () => {
    const rule = normalizeRule({ limit: 10, interval: 1000 }, 'r');
    expect(checkBounds(at([0, 50]), rule).map((v) => v.bound)).toEqual(['spacing']);
  });

  it('checkRules: each rule on its own', () => {
    const rules = [
      { limit: 10, interval: '1s' },
      { limit: 2, interval: '1s', algorithm: 'fixed-window' as const },
    ];
    const grants = at([0, 100, 200]);
    expect(checkRules(grants, rules).map((v) => `${v.rule}: ${v.bound}`)).toEqual([
      '2 per 1000ms (fixed-window): aligned-window',
    ]);
    expect(checkRules([], rules)).toEqual([]);
  });
});
