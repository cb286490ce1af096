/*
 * A rule change during another (src/rulesets.ts): the old rules go with the store times from
 * which their states count every grant (AcquireRequest.previousSince), so a later conversion
 * takes no source too young to tell what its new window held (docs/guarantees.md, "Rule
 * changes").
 */
import { describe, expect, it } from 'vitest';
import { normalizeRule, type Rule } from '../../src/rules/rule.js';
import { RuleSet, type RulesRequest } from '../../src/rulesets.js';
import type { AcquireResult } from '../../src/stores/store.js';
import { FakeClock } from './harness.js';

const norm = (r: Rule) => [normalizeRule(r, 'rule')];
const A = norm({ limit: 100, interval: 10_000 });
const B = norm({ limit: 1, interval: 1_000 });
const C = norm({ limit: 100, interval: 60_000 });
const D = norm({ limit: 50, interval: 60_000 });

function request(): RulesRequest {
  return {
    rules: [],
    previous: undefined,
    previousSince: undefined,
    convert: undefined,
    record: undefined,
    recordTtl: undefined,
  };
}
const answer = (now: number): AcquireResult => ({
  granted: 1,
  retryAfter: 0,
  blocked: null,
  pausedUntil: 0,
  now,
});

describe('RuleSet: previousSince', () => {
  it("a valve's first rules count every grant; a rule a change introduced counts from its conversion's store time", () => {
    const clock = new FakeClock(1_000);
    const set = new RuleSet(A, undefined, clock);
    const r0 = request();
    set.fill(r0, clock.now());
    expect(r0.previous).toBeUndefined();
    expect(r0.previousSince).toBeUndefined();

    set.set(B);
    const r1 = request();
    set.fill(r1, clock.now());
    expect(r1.previous).toEqual(A);
    expect(r1.previousSince).toEqual([Number.NEGATIVE_INFINITY]);
    expect(r1.convert).toBe(true);
    set.answered(r1, answer(5_000.25), 'id');

    // Within A's transition: C's old rules are B (from 5000.25 on the store's clock) and A.
    clock.advance(1_000);
    set.set(C);
    const r2 = request();
    set.fill(r2, clock.now());
    expect(r2.previous).toEqual([...B, ...A]);
    expect(r2.previousSince).toEqual([5_000.25, Number.NEGATIVE_INFINITY]);
    set.answered(r2, answer(6_000), 'id');

    // Long after: D's old rule is C alone, from C's conversion.
    clock.advance(120_000);
    const r3 = request();
    set.fill(r3, clock.now());
    expect(r3.previous).toBeUndefined();
    set.set(D);
    const r4 = request();
    set.fill(r4, clock.now());
    expect(r4.previous).toEqual(C);
    expect(r4.previousSince).toEqual([6_000]);
  });

  it('rules whose conversion no answer confirmed are no old rules of the next change; those it keeps are converted', () => {
    const clock = new FakeClock(1_000);
    const set = new RuleSet(A, undefined, clock);
    set.set(B);
    const r1 = request();
    set.fill(r1, clock.now());
    expect(r1.convert).toBe(true);
    // r1 failed (the store may have converted it all the same); the rules change again.
    set.set(C);
    const r2 = request();
    set.fill(r2, clock.now());
    expect(r2.previous).toEqual(A);
    expect(r2.previousSince).toEqual([Number.NEGATIVE_INFINITY]);
    // A late answer of r1 changes nothing of C's change.
    set.answered(r1, answer(2_000), 'id');
    const r3 = request();
    set.fill(r3, clock.now());
    expect(r3.previous).toEqual(A);
    expect(r3.convert).toBe(true);
    // B set again before any answer, and kept: B is a new rule (converted), not an old one.
    set.set([...B, ...D]);
    const r4 = request();
    set.fill(r4, clock.now());
    expect(r4.previous).toEqual(A);
    set.set(B);
    const r5 = request();
    set.fill(r5, clock.now());
    expect(r5.previous).toEqual(A);
    set.answered(r5, answer(3_000), 'id');
    // Converted now: from 3000 on.
    set.set(C);
    const r6 = request();
    set.fill(r6, clock.now());
    expect(r6.previous).toEqual([...B, ...A]);
    expect(r6.previousSince).toEqual([3_000, Number.NEGATIVE_INFINITY]);
  });

  it('a rule kept across changes keeps its time', () => {
    const clock = new FakeClock(1_000);
    const set = new RuleSet(A, undefined, clock);
    set.set([...A, ...B]);
    const r1 = request();
    set.fill(r1, clock.now());
    set.answered(r1, answer(3_000), 'id');
    set.set([...B, ...C]);
    const r2 = request();
    set.fill(r2, clock.now());
    // A (the first rules) counts every grant, B from 3000.
    expect(r2.previous).toEqual([...A, ...B]);
    expect(r2.previousSince).toEqual([Number.NEGATIVE_INFINITY, 3_000]);
    set.answered(r2, answer(4_000), 'id');
    set.set(D);
    const r3 = request();
    set.fill(r3, clock.now());
    expect(r3.previous).toEqual([...B, ...C, ...A]);
    expect(r3.previousSince).toEqual([3_000, 4_000, Number.NEGATIVE_INFINITY]);
  });
});
