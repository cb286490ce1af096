/*
 * 'rule-mismatch' after setRules(): the conversion finding the valve's own earlier rule set
 * recorded is no mismatch; another process's rules still are.
 */
import { describe, expect, it } from 'vitest';
import type { RuleMismatchEvent } from '../../src/events.js';
import { createValveGroup } from '../../src/group.js';
import { normalizeRules } from '../../src/options.js';
import { RuleSet } from '../../src/rulesets.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { Valve } from '../../src/types.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, track } from './harness.js';

// Hourly windows: every rule state, and so the record, outlives the test.
const rule = (limit: number) => ({ limit, interval: '1h', algorithm: 'fixed-window' as const });
const R1 = rule(100);
const R2 = rule(200);
const R3 = rule(300);
const out = (limit: number) => [{ limit, interval: 3_600_000, algorithm: 'fixed-window' }];

async function runOne(clock: FakeClock, valve: Valve): Promise<void> {
  const r = track(valve.run(() => 0));
  await clock.tickAsync(100);
  expect(r.ok).toBe(true);
}

describe("'rule-mismatch' after setRules()", () => {
  for (const grouped of [false, true]) {
    it(`is not emitted for a valve alone, against its own earlier rules (${grouped ? 'a group key' : 'a valve'})`, async () => {
      const clock = new FakeClock();
      const store = memoryStore({ clock });
      const v = grouped
        ? createValveGroup({ rules: R1, store, clock }).valve('A')
        : createValve({ id: 'A', rules: R1, store, clock });
      const seen: RuleMismatchEvent[] = [];
      v.on('rule-mismatch', (e) => seen.push(e));
      await runOne(clock, v);
      await v.setRules(R2);
      await runOne(clock, v);
      // A change during another: the store may hold either earlier set.
      await v.setRules(R3);
      await v.setRules(R1);
      await runOne(clock, v);
      await clock.tickAsync(60_000);
      await runOne(clock, v);
      expect(seen).toEqual([]);
      await v.close();
    });
  }

  it('is emitted when the conversion finds a third set, another process’s', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'A', rules: R1, store, clock });
    const other = createValve({ id: 'A', rules: R3, store, clock });
    const seen: RuleMismatchEvent[] = [];
    a.on('rule-mismatch', (e) => seen.push(e));
    other.on('rule-mismatch', () => {});
    await runOne(clock, a);
    await runOne(clock, other);
    expect(seen).toEqual([]); // a has not called since other wrote R3
    await a.setRules(R2);
    await runOne(clock, a);
    expect(seen).toEqual([{ id: 'A', rules: out(200), recorded: out(300) }]);
    await Promise.all([a.close(), other.close()]);
  });

  it('is emitted at the next call when a process still uses the old rules after the change', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'A', rules: R1, store, clock });
    const old = createValve({ id: 'A', rules: R1, store, clock });
    const seen: RuleMismatchEvent[] = [];
    const seenOld: RuleMismatchEvent[] = [];
    a.on('rule-mismatch', (e) => seen.push(e));
    old.on('rule-mismatch', (e) => seenOld.push(e));
    await runOne(clock, a);
    await runOne(clock, old);
    await a.setRules(R2);
    await runOne(clock, a); // the conversion: R1 recorded, a's own (and old's)
    expect(seen).toEqual([]);
    await runOne(clock, old); // finds R2, writes R1 back
    await runOne(clock, a); // finds R1 again: old's
    expect(seenOld).toEqual([{ id: 'A', rules: out(100), recorded: out(200) }]);
    expect(seen).toEqual([{ id: 'A', rules: out(200), recorded: out(100) }]);
    await Promise.all([a.close(), old.close()]);
  });
});

describe('the records a valve remembers as its own during a change', () => {
  it('stay few however often setRules() is called within one change (each once, the latest 8)', () => {
    const ruleSet = new RuleSet(normalizeRules(R1).rules, undefined, new FakeClock());
    // A limit learnt from every answer: alternating sets, and many distinct ones, with no call
    // answered in between (the change never ends).
    for (let i = 0; i < 5000; i++) ruleSet.set(normalizeRules(i % 2 === 0 ? R2 : R3).rules);
    const records = (ruleSet as unknown as { previousRecords: string[] }).previousRecords;
    expect(new Set(records).size).toBe(records.length);
    expect(records.length).toBeLessThanOrEqual(3);
    for (let i = 0; i < 100; i++) ruleSet.set(normalizeRules(rule(1000 + i)).rules);
    expect((ruleSet as unknown as { previousRecords: string[] }).previousRecords).toHaveLength(8);
  });
});
