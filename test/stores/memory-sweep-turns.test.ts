/**
 * The memory store's sweep (memory-state.ts, IdSweeper) goes over its ids in turns of bounded
 * work: one turn examines at most SWEEP_PER_TURN ids (then window records), whatever the number
 * of ids, and the pass still drops every expired state and keeps every live one. It used to
 * examine every id in one synchronous pass each second: with a million ids holding state, the
 * event loop stalled 100–200 ms every second. Counted here, not timed (the timings are in
 * docs/performance.md).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { inspectMemoryStore, type MemoryStoreContents, memoryStore } from '../../src/stores/memory.js';
import {
  FULL_SWEEP_MS,
  IdState,
  IdSweeper,
  RuleState,
  SWEEP_PER_TURN,
  type Sweepable,
} from '../../src/stores/memory-state.js';
import type { Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';

const contents = (store: Store): MemoryStoreContents =>
  (store as unknown as { [inspectMemoryStore](): MemoryStoreContents })[inspectMemoryStore]();
const records = (store: Store) => (store as unknown as { windows: { size: number } }).windows.size;

afterEach(() => {
  vi.useRealTimers();
});

/** `n` ids whose state expires at `expiresUs`, each counting into `seen` when the sweep examines it. */
function idsOf(n: number, expiresUs: (i: number) => number, seen: Set<string>): Map<string, IdState> {
  const ids = new Map<string, IdState>();
  for (let i = 0; i < n; i++) {
    const state = new IdState(`id-${i}`);
    const rule = new RuleState(false);
    rule.expiresUs = expiresUs(i);
    state.rules.set('r', rule);
    // Every examination reads the pause first (memory-state.ts, dropExpired).
    Object.defineProperty(state, 'pauseUs', {
      get() {
        seen.add(state.id);
        return 0;
      },
      set() {},
    });
    ids.set(state.id, state);
  }
  return ids;
}

describe('memory store sweep: bounded work per timer turn', () => {
  it('one turn examines at most SWEEP_PER_TURN of 10,000 ids; the pass drops the expired, keeps the live', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const N = 10_000;
    const seen = new Set<string>();
    const NOW = 5_000_000;
    // Every third id is live for an hour; the others expired.
    const ids = idsOf(N, (i) => (i % 3 === 0 ? NOW + 3_600_000_000 : NOW - 1), seen);
    const budgets: number[] = [];
    const others: Sweepable = {
      size: 1,
      sweep(_now: number, max: number) {
        budgets.push(max);
        return true;
      },
    };
    const sweeper = new IdSweeper(ids, () => NOW, others);
    sweeper.schedule();
    sweeper.schedule(); // one timer at a time
    expect(vi.getTimerCount()).toBe(1);

    const perTurn: number[] = [];
    const examined = new Map<string, number>();
    while (perTurn.length < 100) {
      seen.clear();
      vi.advanceTimersToNextTimer();
      perTurn.push(seen.size);
      for (const id of seen) examined.set(id, (examined.get(id) ?? 0) + 1);
      if (budgets.length > 0) break; // the pass reached the others: it is over
    }
    // One turn never examines more than a bounded share, whatever the number of ids.
    expect(Math.max(...perTurn)).toBeLessThanOrEqual(N / 4);
    expect(Math.max(...perTurn)).toBeLessThanOrEqual(SWEEP_PER_TURN);
    expect(perTurn.length).toBe(Math.ceil(N / SWEEP_PER_TURN));
    // The pass examined every id exactly once, dropped every expired one and kept the live ones.
    expect(examined.size).toBe(N);
    expect([...examined.values()].every((c) => c === 1)).toBe(true);
    expect(ids.size).toBe(Math.ceil(N / 3));
    for (const id of ids.keys()) expect(Number(id.slice(3)) % 3).toBe(0);
    // The others got what was left of the last turn's budget.
    expect(budgets).toEqual([SWEEP_PER_TURN * perTurn.length - N]);
    // The next pass starts within a second of this one's start, and goes over the rest again.
    expect(vi.getTimerCount()).toBe(1);
    seen.clear();
    vi.advanceTimersByTime(FULL_SWEEP_MS);
    expect(seen.size).toBe(ids.size);
    expect(budgets.length).toBe(2);
  });

  it('ids added during a pass wait for the next one; the pass ends with the ids it began with', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const seen = new Set<string>();
    const ids = idsOf(3 * SWEEP_PER_TURN, () => 0, seen); // all expired
    let passes = 0;
    const sweeper = new IdSweeper(ids, () => 1, {
      size: 0,
      sweep: () => {
        passes++;
        return true;
      },
    });
    sweeper.schedule();
    vi.advanceTimersToNextTimer();
    expect(ids.size).toBe(2 * SWEEP_PER_TURN);
    // New ids (live) keep coming faster than a turn examines them.
    let added = 0;
    const live = idsOf(10 * SWEEP_PER_TURN, () => Number.MAX_SAFE_INTEGER, new Set());
    const fresh = live.values();
    while (passes === 0) {
      for (let i = 0; i < 2 * SWEEP_PER_TURN; i++) {
        const s = fresh.next().value!;
        ids.set(s.id, s);
        added++;
      }
      vi.advanceTimersToNextTimer();
    }
    // Two more turns ended the pass: the expired ids are gone, every added one is kept.
    expect(added).toBe(4 * SWEEP_PER_TURN);
    expect(ids.size).toBe(added);
  });

  it('a memory store with 20,000 expired ids and 3,000 expired window records frees them a turn at a time, all within a second', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const rules = [normalizeRule({ limit: 10, interval: '1s' }, 'r')];
    for (let i = 0; i < 20_000; i++) store.acquire({ id: `id-${i}`, rules, costs: [1], count: 1 });
    for (let i = 0; i < 3000; i++) {
      const t = store.windowSend!(`w-${i}`, 1000) as { seq: number };
      store.windowReport!(`w-${i}`, t.seq, 10, 1000);
    }
    expect(contents(store).ids).toBe(20_000);
    expect(records(store)).toBe(3000);
    clock.advance(600_000); // every state and record has expired
    vi.advanceTimersToNextTimer();
    const left = contents(store).ids;
    expect(20_000 - left).toBeLessThanOrEqual(5000);
    expect(20_000 - left).toBeLessThanOrEqual(SWEEP_PER_TURN);
    // On through the ids, then the records, a turn at a time.
    let turns = 1;
    while (contents(store).ids > 0) {
      vi.advanceTimersToNextTimer();
      turns++;
    }
    expect(turns).toBe(Math.ceil(20_000 / SWEEP_PER_TURN));
    // The last turn over the ids went on to the records with what was left of its budget.
    expect(records(store)).toBe(3000 - (turns * SWEEP_PER_TURN - 20_000));
    const before = records(store);
    vi.advanceTimersToNextTimer();
    expect(before - records(store)).toBe(SWEEP_PER_TURN);
    // All gone within a second of the first turn; nothing held, so no timer is left.
    vi.advanceTimersByTime(FULL_SWEEP_MS);
    expect(contents(store)).toEqual({ ids: 0, rules: 0, leases: 0, pauses: 0, subscribers: 0 });
    expect(records(store)).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });
});
