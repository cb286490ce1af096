/**
 * Valves in the store's line of turns (docs/architecture.md, "Turns"; src/pace.ts,
 * joinsLine and turnJobs): which calls carry a ticket, what they ask for at a turn.
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { Store } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type SpyStore, spyStore } from '../helpers/spy-store.js';

/** `n` valves sharing `rules` through one memory store, each through its own spy (`rtt`: asynchronous answers). */
function fleet(n: number, rules: { limit: number; interval: number; burst: number }, rtt?: number) {
  const clock = new FakeClock();
  const inner: Store = memoryStore({ clock });
  const spies: SpyStore[] = [];
  const starts: number[] = [];
  const valves = Array.from({ length: n }, () => {
    const spy = spyStore(inner, clock);
    if (rtt !== undefined) spy.timing.acquire = { delay: rtt, decideAt: rtt / 2 };
    spies.push(spy);
    return createValve({ id: 'turns', clock, store: spy, rules });
  });
  /** Keeps `depth` jobs queued in every valve until `until` (ms on the clock). */
  const saturate = (depth: number, until: number): void => {
    for (const valve of valves) {
      const next = (): void => {
        if (clock.now() >= until) return;
        valve.run(() => starts.push(clock.now())).then(next, () => {});
      };
      for (let i = 0; i < depth; i++) next();
    }
  };
  return { clock, spies, starts, valves, saturate };
}

/** The most starts in any window [t, t + interval). */
function maxInWindow(starts: readonly number[], interval: number): number {
  const s = [...starts].sort((a, b) => a - b);
  let most = 0;
  let j = 0;
  for (let i = 0; i < s.length; i++) {
    while (s[i]! - s[j]! >= interval) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}

describe('valves in the line of turns', () => {
  it('under a rule that absorbs a late turn, every call carries the ticket of its last answer, and the fleet asks about once per turn', async () => {
    // 200/s with burst 10: 45 ms of tolerance, turns of 7 jobs (35 ms). 4 s: the last turn's
    // jobs (up to 7, still in the bucket when the run ends) are under 1 % of the run's.
    const rules = { limit: 200, interval: 1000, burst: 10 };
    const f = fleet(4, rules);
    const t0 = f.clock.now();
    f.saturate(50, t0 + 4000);
    await f.clock.tickAsync(4000);
    const granted = f.starts.filter((t) => t < t0 + 4000).length;
    const calls = f.spies.reduce((sum, s) => sum + s.acquires.filter((c) => c.at < t0 + 4000).length, 0);
    let lined = 0;
    for (const spy of f.spies) {
      let held = 0;
      let fits = 0;
      for (const c of spy.acquires) {
        // A synchronous store: never a second call in flight, so every call takes part.
        expect(c.turn).toBe(held);
        if (c.turn! > 0) {
          lined++;
          // At its turn it asks for all the rule can grant by then: one job plus one per 5 ms
          // waited, at most the burst (usually the whole burst: three turns of 35 ms).
          expect(c.count).toBeGreaterThanOrEqual(fits);
        }
        held = c.held ?? 0;
        fits = held > 0 ? Math.min(10, Math.floor(c.retryAfter! / 5) + 1) : 0;
      }
    }
    expect(lined).toBeGreaterThan(100);
    // The whole limit (200/s plus the first burst) and never more, at about one call per 7 jobs.
    expect(granted).toBeGreaterThanOrEqual(0.99 * (800 + 9));
    expect(maxInWindow(f.starts, 1000)).toBeLessThanOrEqual(200 + 10 - 1);
    expect(calls / granted).toBeLessThan(0.2);
    for (const valve of f.valves) await valve.close({ drain: false });
  });

  it('without the line (a store that keeps none) the same fleet races: more calls per granted job', async () => {
    const rules = { limit: 200, interval: 1000, burst: 10 };
    const clock = new FakeClock();
    const memory = memoryStore({ clock });
    const inner: Store = { ...memory, acquire: (request) => memory.acquire({ ...request, turn: undefined }) };
    const starts: number[] = [];
    const spies = Array.from({ length: 4 }, () => spyStore(inner, clock));
    const valves = spies.map((store) => createValve({ id: 'turns', clock, store, rules }));
    const t0 = clock.now();
    for (const valve of valves) {
      const next = (): void => {
        if (clock.now() >= t0 + 2000) return;
        valve.run(() => starts.push(clock.now())).then(next, () => {});
      };
      for (let i = 0; i < 50; i++) next();
    }
    await clock.tickAsync(2000);
    const granted = starts.filter((t) => t < t0 + 2000).length;
    const calls = spies.reduce((sum, s) => sum + s.acquires.filter((c) => c.at < t0 + 2000).length, 0);
    expect(calls / granted).toBeGreaterThan(0.5);
    for (const valve of valves) await valve.close({ drain: false });
  });

  it('over an asynchronous store, at most one call in flight carries a ticket (two refusals would take two)', async () => {
    // 2000/s with burst 200, 0.2 ms round trips: a turn is 100 jobs, more than one call's 32,
    // so calls are pipelined after full grants, until a refusal sends the valve to the line.
    const f = fleet(4, { limit: 2000, interval: 1000, burst: 200 }, 0.2);
    const t0 = f.clock.now();
    f.saturate(200, t0 + 2000);
    await f.clock.tickAsync(2000);
    let unlined = 0;
    let lined = 0;
    for (const spy of f.spies) {
      const a = spy.acquires.filter((c) => c.repliedAt !== undefined);
      for (let i = 0; i < a.length; i++) {
        if (a[i]!.turn === undefined) unlined++;
        else lined++;
        for (let j = i + 1; j < a.length && a[j]!.at < a[i]!.repliedAt!; j++) {
          // Two calls in flight at once: not both in the line.
          expect(a[i]!.turn === undefined || a[j]!.turn === undefined, `calls ${i} and ${j}`).toBe(true);
        }
      }
    }
    expect(lined).toBeGreaterThan(10);
    expect(unlined).toBeGreaterThan(10);
    // The whole rate (a turn that takes less than the burst leaves the rest banked, not lost).
    const granted = f.starts.filter((t) => t < t0 + 2000).length;
    expect(granted).toBeGreaterThanOrEqual(0.99 * 4000);
    expect(maxInWindow(f.starts, 1000)).toBeLessThanOrEqual(2000 + 200 - 1);
    for (const valve of f.valves) await valve.close({ drain: false });
  });

  it('valves of one id with other rules take no turns with each other: each uses its own rule whole', async () => {
    // The same rate and burst (20 ms of tolerance), other rules (digests): two budgets, two lines.
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const t0 = clock.now();
    const starts: number[][] = [[], [], []];
    const valves = [
      createValve({ id: 'mixed', clock, store, rules: { limit: 100, interval: 1000, burst: 5 } }),
      createValve({ id: 'mixed', clock, store, rules: { limit: 100, interval: 1000, burst: 5 } }),
      createValve({ id: 'mixed', clock, store, rules: { limit: 50, interval: 500, burst: 5 } }),
    ];
    valves.forEach((valve, i) => {
      const next = (): void => {
        if (clock.now() >= t0 + 2000) return;
        valve.run(() => starts[i]!.push(clock.now())).then(next, () => {});
      };
      for (let k = 0; k < 20; k++) next();
    });
    await clock.tickAsync(2000);
    const done = (i: number) => starts[i]!.filter((t) => t < t0 + 2000).length;
    // The first two share 100/s; the third has 100/s of its own.
    expect(done(0) + done(1)).toBeGreaterThanOrEqual(0.99 * 200);
    expect(done(2)).toBeGreaterThanOrEqual(0.99 * 200);
    for (const valve of valves) await valve.close({ drain: false });
  });

  it('setRules() to a rule without the tolerance takes the valve out of the line: no ticket sent, none waited for', async () => {
    const f = fleet(2, { limit: 200, interval: 1000, burst: 10 });
    const t0 = f.clock.now();
    f.saturate(30, t0 + 2500);
    await f.clock.tickAsync(300);
    // Both hold tickets by now.
    expect(f.spies.every((s) => (s.acquires.at(-1)!.held ?? 0) > 0)).toBe(true);
    for (const valve of f.valves) valve.setRules({ limit: 200, interval: 1000 });
    const from = f.spies.map((s) => s.acquires.length);
    // The new rule starts with what the old one spent in the last second (a transition, not
    // a fresh budget): about a second without a start, then 200/s.
    await f.clock.tickAsync(2200);
    f.spies.forEach((spy, i) => {
      const later = spy.acquires.slice(from[i]!);
      expect(later.length).toBeGreaterThan(10);
      expect(later.filter((c) => c.turn !== undefined)).toEqual([]);
    });
    // burst 1 at 200/s in the last 500 ms: 100 starts, less what late wake-ups cost (none here).
    const after = f.starts.filter((t) => t >= t0 + 2000 && t < t0 + 2500).length;
    expect(after).toBeGreaterThanOrEqual(95);
    expect(after).toBeLessThanOrEqual(101);
    for (const valve of f.valves) await valve.close({ drain: false });
  });

  it('a slow rule with a large burst: queued jobs of two valves start one increment apart, not three quarters of the burst', async () => {
    // Shopify's 2 a second with a burst of 40. Once the burst is spent, each valve keeps a few
    // jobs queued: the bucket refills one every 500 ms, and the jobs take each refill as it comes
    // (uncapped turns were 30 jobs, 15 s, apart: 3 jobs started at 15.5 s, 2 more at 30.5 s).
    const f = fleet(2, { limit: 2, interval: 1000, burst: 40 });
    const t0 = f.clock.now();
    const [a, b] = f.valves;
    await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a! : b!).run(() => {})));
    const later: number[] = [];
    const jobs = Array.from({ length: 6 }, (_, i) =>
      (i % 2 === 0 ? a! : b!).run(() => later.push(f.clock.now() - t0)),
    );
    await f.clock.tickAsync(4000);
    await Promise.all(jobs);
    expect(later).toHaveLength(6);
    // One every 500 ms (plus the line's 0.1 ms pad per turn), the last by 3 s.
    for (let i = 0; i < later.length; i++) expect(later[i]!).toBeLessThanOrEqual(500 * (i + 1) + 1);
    for (let i = 1; i < later.length; i++) expect(later[i]! - later[i - 1]!).toBeGreaterThanOrEqual(500);
    for (const valve of f.valves) await valve.close({ drain: false });
  });
});
