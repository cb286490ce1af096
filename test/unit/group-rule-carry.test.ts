/*
 * A valve group's key evicted during or after a rule change (valve.setRules() on the member):
 * the key's next valve goes on from where the evicted one stopped (RuleSet.carry()): a
 * conversion still to be asked for is asked for, a transition in progress keeps spending the
 * old rules, and the times from which the changed rules count go with them.
 */
import { describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import { memoryStore } from '../../src/stores/memory.js';
import { FakeClock, track } from './harness.js';

const T = 1_000; // idleTimeout

describe('a valve group: a key evicted around a rule change', () => {
  it('setRules() on an idle key, evicted before its next job: the next valve converts (the old spend counts)', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const store = memoryStore({ clock });
    const g = createValveGroup({
      rules: { limit: 10, interval: '1h', algorithm: 'fixed-window' },
      store,
      clock,
      idleTimeout: T,
    });
    await Promise.all(Array.from({ length: 6 }, () => g.run('k', () => 0)));
    // Cut to 4 per hour: 6 were spent this hour, so nothing more until it ends.
    await g.valve('k').setRules({ limit: 4, interval: '1h', algorithm: 'fixed-window' });
    await clock.tickAsync(3 * T);
    expect(g.size).toBe(0);
    const next = track(g.run('k', () => 1));
    await clock.tickAsync(10 * T);
    expect(next.done).toBe(false);
    await g.close({ drain: false }).catch(() => {});
  });

  it('a rule added to the defaults on an idle key, evicted before its next job: the added rule counts the spend before it', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const store = memoryStore({ clock });
    const hourly = { limit: 100, interval: '1h', algorithm: 'fixed-window' } as const;
    const g = createValveGroup({ rules: hourly, store, clock, idleTimeout: T });
    await Promise.all(Array.from({ length: 10 }, () => g.run('k', () => 0)));
    // The defaults kept, 10 per hour added: 10 were spent this hour, so nothing more until it ends.
    await g.valve('k').setRules([hourly, { limit: 10, interval: '1h', algorithm: 'fixed-window' }]);
    await clock.tickAsync(3 * T);
    expect(g.size).toBe(0);
    const next = track(g.run('k', () => 1));
    await clock.tickAsync(10 * T);
    expect(next.done).toBe(false);
    await g.close({ drain: false }).catch(() => {});
  });

  it("what the evicted valve left survives a key's next valve failing to be created (a bad options(key) once)", async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const store = memoryStore({ clock });
    let bad = false;
    const g = createValveGroup({
      rules: { limit: 10, interval: '1h', algorithm: 'fixed-window' },
      store,
      clock,
      idleTimeout: T,
      options: () => (bad ? { concurrency: -1 } : undefined),
    });
    await Promise.all(Array.from({ length: 6 }, () => g.run('k', () => 0)));
    await g.valve('k').setRules({ limit: 4, interval: '1h', algorithm: 'fixed-window' });
    await clock.tickAsync(3 * T);
    expect(g.size).toBe(0);
    bad = true;
    await expect(g.run('k', () => 0)).rejects.toThrow(RangeError);
    bad = false;
    const next = track(g.run('k', () => 1));
    await clock.tickAsync(10 * T);
    expect(next.done).toBe(false);
    await g.close({ drain: false }).catch(() => {});
  });

  it('a raise, evicted during its transition: the next valve keeps spending the old rule until the old window has passed', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const t0 = clock.now();
    const store = memoryStore({ clock });
    const g = createValveGroup({
      rules: { limit: 5, interval: '1m', algorithm: 'sliding-window' },
      store,
      clock,
      idleTimeout: T,
    });
    const starts: number[] = [];
    const run = () => g.run('k', () => starts.push(clock.now() - t0));
    await Promise.all(Array.from({ length: 5 }, run));
    await g.valve('k').setRules({ limit: 8, interval: '1m', algorithm: 'sliding-window' });
    // One call converts (its job waits past maxWait and leaves), then the key idles out.
    const converting = track(g.run('k', () => 0, { maxWait: 10 }));
    await clock.tickAsync(3 * T);
    expect(converting.done && !converting.ok).toBe(true);
    expect(g.size).toBe(0);
    const later = Array.from({ length: 3 }, () => track(run()));
    await clock.tickAsync(30_000);
    // The old rule (5 per minute) still holds the minute that contains the change.
    expect(later.filter((r) => r.done)).toHaveLength(0);
    await clock.tickAsync(40_000);
    expect(later.filter((r) => r.ok)).toHaveLength(3);
    for (const t of starts.slice(5)) expect(t).toBeGreaterThanOrEqual(60_000);
    await g.close();
  });

  // Evicted during the first change's transition (5 s), or after it (12 s: only the time from
  // which 1 per second counts goes over).
  it.each([5_000, 12_000])(
    '100 per 10 s, 1 per second, evicted, then at %i ms 100 per minute: no minute holds more than 100 + burst − 1',
    async (at) => {
      const clock = new FakeClock(1_700_000_000_000);
      const t0 = clock.now();
      const store = memoryStore({ clock });
      const g = createValveGroup({
        rules: { limit: 100, interval: '10s', burst: 100 },
        store,
        clock,
        idleTimeout: T,
      });
      const starts: number[] = [];
      const jobs: Promise<unknown>[] = [];
      const run = () => jobs.push(g.run('k', () => starts.push(clock.now() - t0)).catch(() => {}));
      for (let i = 0; i < 100; i++) run();
      await clock.tickAsync(100);
      await g.valve('k').setRules({ limit: 1, interval: '1s' });
      run();
      await clock.tickAsync(at - 100);
      expect(g.size).toBe(0);
      await g.valve('k').setRules({ limit: 100, interval: '1m', burst: 100 });
      for (let i = 0; i < 300; i++) run();
      await clock.tickAsync(130_000);
      await g.close({ drain: false }).catch(() => {});
      await Promise.all(jobs);
      expect(starts.filter((t) => t < 1_000).length).toBe(100);
      for (const from of starts) {
        const inMinute = starts.filter((t) => t >= from && t < from + 60_000).length;
        expect(inMinute, `the minute from ${from} ms`).toBeLessThanOrEqual(199);
      }
    },
  );
});

/** The group's per-key records of dropped keys' rule changes (internals, for the counts only). */
function carried(g: object): Map<string, { change?: unknown } | { carry: { change?: unknown } }> {
  return (g as unknown as { carried: { byKey: Map<string, never> } }).carried.byKey;
}

describe('a valve group: what an evicted key keeps of a rule change once it is over', () => {
  it('rules set back to the defaults: the record is kept while the change runs, then forgotten', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const sw = 'sliding-window' as const;
    const g = createValveGroup({
      rules: { limit: 100, interval: '1m', algorithm: sw },
      clock,
      idleTimeout: 10 * T,
    });
    const keys = Array.from({ length: 50 }, (_, i) => `tenant-${i}`);
    const runs = () => Promise.all(keys.map((k) => g.run(k, () => 0)));
    const step = async (p: Promise<unknown>) => {
      const done = track(p);
      await clock.tickAsync(3 * T);
      expect(done).toMatchObject({ ok: true });
    };
    await step(runs());
    await step(
      Promise.all(keys.map((k) => g.valve(k).setRules({ limit: 200, interval: '1m', algorithm: sw }))),
    );
    await step(runs());
    await step(
      Promise.all(keys.map((k) => g.valve(k).setRules({ limit: 100, interval: 60_000, algorithm: sw }))),
    );
    await step(runs());
    await clock.tickAsync(25 * T);
    expect(g.size).toBe(0);
    // The second change's transition (a minute) still runs: each key keeps it.
    expect(carried(g).size).toBe(50);
    await clock.tickAsync(60_000);
    expect(carried(g).size).toBe(0);
    await g.close();
  });

  it('rules set and set back before the next job: nothing is kept', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const g = createValveGroup({ rules: { limit: 10, interval: '10s' }, clock, idleTimeout: T });
    await g.run('k', () => 0);
    await g.valve('k').setRules({ limit: 20, interval: '10s' });
    await g.valve('k').setRules([{ limit: 10, interval: 10_000 }]);
    await clock.tickAsync(3 * T);
    expect(g.size).toBe(0);
    expect(carried(g).size).toBe(0);
    await g.close();
  });

  it("a change used, evicted during its transition: the next valve goes on; once over, only the rules' times are kept", async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const t0 = clock.now();
    const g = createValveGroup({
      rules: { limit: 5, interval: '1m', algorithm: 'sliding-window' },
      clock,
      idleTimeout: T,
    });
    const starts: number[] = [];
    const run = () => g.run('k', () => starts.push(clock.now() - t0));
    await Promise.all(Array.from({ length: 5 }, run));
    await g.valve('k').setRules({ limit: 8, interval: '1m', algorithm: 'sliding-window' });
    const converting = track(g.run('k', () => 0, { maxWait: 10 }));
    // Evicted, and looked at by the group's timer several times during the transition.
    await clock.tickAsync(10 * T);
    expect(converting.done && !converting.ok).toBe(true);
    expect(g.size).toBe(0);
    const [record] = [...carried(g).values()];
    expect(record && 'carry' in record ? record.carry.change : undefined).toBeDefined();
    // The next valve still spends the old rule (5 per minute) until the minute has passed.
    const later = Array.from({ length: 3 }, () => track(run()));
    await clock.tickAsync(30_000);
    expect(later.filter((r) => r.done)).toHaveLength(0);
    await clock.tickAsync(40_000);
    expect(later.filter((r) => r.ok)).toHaveLength(3);
    // Evicted again after the change: only the time from which 8 per minute counts is kept.
    await clock.tickAsync(3 * T);
    expect(g.size).toBe(0);
    const after = [...carried(g).values()];
    expect(after).toHaveLength(1);
    expect('carry' in after[0]! ? 'linked' : after[0]!.change).toBeUndefined();
    await g.close();
  });
});
