import { describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { inspectMemoryStore, type MemoryStoreContents, memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult, Store, WakeEvent } from '../../src/stores/store.js';
import { storeContract } from '../contract/store-contract.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';

storeContract(
  'memory (fake clock)',
  () => {
    const clock = new FakeClock();
    return { store: memoryStore({ clock }), advance: (ms: number) => clock.advance(ms) };
  },
  { controlledClock: true, turns: true, window: true },
);

storeContract('memory (system clock)', () => ({ store: memoryStore() }), { window: true });

// One store for every case (the cases use fresh ids): two makeStore() calls share their state.
const one = memoryStore();
storeContract('memory (one store, shared)', () => ({ store: one }), { shared: true, window: false });

const contents = (store: Store): MemoryStoreContents =>
  (store as unknown as { [inspectMemoryStore](): MemoryStoreContents })[inspectMemoryStore]();

const gcra = normalizeRule({ limit: 10, interval: '1s', burst: 2 }, 'r');
const window = normalizeRule({ limit: 5, interval: '1s', algorithm: 'fixed-window' }, 'w');

function setup() {
  const clock = new FakeClock();
  const store = memoryStore({ clock });
  return { clock, store };
}

describe('memoryStore specifics', () => {
  it('answers synchronously: plain values, never promises', () => {
    const { store } = setup();
    const r = store.acquire({ id: 'a', rules: [gcra], costs: [1], count: 1, lease: { limit: 1, ttl: 1000 } });
    expect(r).not.toBeInstanceOf(Promise);
    expect((r as AcquireResult).granted).toBe(1);
    const token = (r as AcquireResult).leases![0]!.token;
    expect(typeof store.pause('a', 10)).toBe('number');
    expect(store.resume('a')).toBeUndefined();
    expect(store.renew('a', [token], 1000)).toEqual([true]);
    expect(store.release('a', [token])).toBeUndefined();
    expect(store.notifies).toBe(true);
  });

  it('reads time in µs from its own clock', () => {
    const clock = new FakeClock(1_700_000_000_000.123);
    const store = memoryStore({ clock });
    const r = store.acquire({ id: 'a', rules: [], costs: [1], count: 1 }) as AcquireResult;
    expect(r.now).toBe(1_700_000_000_000.123);
  });

  it('never lets its clock go backwards', () => {
    const { clock, store } = setup();
    const w = normalizeRule({ limit: 1, interval: '1s', algorithm: 'fixed-window' }, 'w');
    clock.advance(999);
    expect((store.acquire({ id: 'a', rules: [w], costs: [1], count: 1 }) as AcquireResult).granted).toBe(1);
    clock.jump(-5000); // a misbehaving clock: the store keeps its latest time
    const r = store.acquire({ id: 'a', rules: [w], costs: [1], count: 1 }) as AcquireResult;
    expect(r.granted).toBe(0);
    expect(r.retryAfter).toBe(1);
  });

  it('separate instances do not share budgets and issue distinct tokens', () => {
    const clock = new FakeClock();
    const s1 = memoryStore({ clock });
    const s2 = memoryStore({ clock });
    const lease = { limit: 1, ttl: 1000 };
    const a = s1.acquire({ id: 'x', rules: [gcra], costs: [1, 1, 1], count: 3, lease }) as AcquireResult;
    const b = s2.acquire({ id: 'x', rules: [gcra], costs: [1, 1, 1], count: 3, lease }) as AcquireResult;
    expect(a.granted).toBe(1);
    expect(b.granted).toBe(1);
    expect(a.leases![0]!.token).not.toBe(b.leases![0]!.token);
  });

  it('tokens are unique across ids too: a token of one id never renews or releases another id', () => {
    const { store } = setup();
    const lease = { limit: 1, ttl: 1000 };
    const a = store.acquire({ id: 'a', rules: [], costs: [1], count: 1, lease }) as AcquireResult;
    const b = store.acquire({ id: 'b', rules: [], costs: [1], count: 1, lease }) as AcquireResult;
    expect(a.leases![0]!.token).not.toBe(b.leases![0]!.token);
    expect(store.renew('b', [a.leases![0]!.token], 1000)).toEqual([false]);
    store.release('b', [a.leases![0]!.token]);
    expect(store.renew('b', [b.leases![0]!.token], 1000)).toEqual([true]);
  });

  it('a rule repeated in one request is one quota, spent once', () => {
    const { store } = setup();
    const again = normalizeRule({ limit: 10, interval: 1000, burst: 2 }, 'r');
    const r = store.acquire({ id: 'a', rules: [gcra, again], costs: [1, 1, 1], count: 3 }) as AcquireResult;
    expect(r.granted).toBe(2);
  });

  it('returns an empty lease list when leases were asked for and none granted', () => {
    const { store } = setup();
    store.pause('a', 100);
    const lease = { limit: 1, ttl: 1000 };
    expect(
      (store.acquire({ id: 'a', rules: [], costs: [1], count: 1, lease }) as AcquireResult).leases,
    ).toEqual([]);
  });

  describe('argument validation names the argument', () => {
    const { store } = setup();
    const ok = { id: 'a', rules: [gcra], costs: [1], count: 1 };
    const cases: [string, () => unknown, ErrorConstructor, RegExp][] = [
      ['request', () => store.acquire(null as never), TypeError, /`request`/],
      ['id empty', () => store.acquire({ ...ok, id: '' }), TypeError, /`request.id`/],
      ['id too long', () => store.acquire({ ...ok, id: 'x'.repeat(201) }), TypeError, /`request.id`.*201/],
      ['id with a brace', () => store.acquire({ ...ok, id: 'a{b}' }), TypeError, /`request.id`.*'\{'/],
      ['id type', () => store.acquire({ ...ok, id: 5 as never }), TypeError, /`request.id`/],
      ['rules', () => store.acquire({ ...ok, rules: 'x' as never }), TypeError, /`request.rules`/],
      ['rules[i]', () => store.acquire({ ...ok, rules: [{} as never] }), TypeError, /`request.rules\[0\]`/],
      ['costs', () => store.acquire({ ...ok, costs: 1 as never }), TypeError, /`request.costs`/],
      ['count 0', () => store.acquire({ ...ok, count: 0 }), RangeError, /`request.count`/],
      ['count > length', () => store.acquire({ ...ok, count: 2 }), RangeError, /`request.count`.*\(1\).*2/],
      ['count 1.5', () => store.acquire({ ...ok, costs: [1, 1], count: 1.5 }), RangeError, /`request.count`/],
      ['cost 0', () => store.acquire({ ...ok, costs: [0] }), RangeError, /`request.costs\[0\]`/],
      ['cost NaN', () => store.acquire({ ...ok, costs: [Number.NaN] }), RangeError, /`request.costs\[0\]`/],
      [
        'cost Infinity',
        () => store.acquire({ ...ok, costs: [Infinity] }),
        RangeError,
        /`request.costs\[0\]`/,
      ],
      [
        'cost string',
        () => store.acquire({ ...ok, costs: ['1' as never] }),
        RangeError,
        /`request.costs\[0\]`/,
      ],
      [
        'cost > maxCost',
        () => store.acquire({ ...ok, costs: [3] }),
        RangeError,
        /`request.costs\[0\]`.*burst 2/,
      ],
      ['lease', () => store.acquire({ ...ok, lease: 4 as never }), TypeError, /`request.lease`/],
      [
        'lease.limit',
        () => store.acquire({ ...ok, lease: { limit: 0, ttl: 1 } }),
        RangeError,
        /`request.lease.limit`/,
      ],
      [
        'lease.ttl',
        () => store.acquire({ ...ok, lease: { limit: 1, ttl: -1 } }),
        RangeError,
        /`request.lease.ttl`/,
      ],
      ['pause id', () => store.pause(5 as never, 1), TypeError, /`id`/],
      ['pause ms', () => store.pause('a', Number.NaN), RangeError, /`ms`/],
      ['pause ms type', () => store.pause('a', '1' as never), TypeError, /`ms`/],
      ['pause ms Infinity', () => store.pause('a', Infinity), RangeError, /`ms`/],
      ['renew tokens', () => store.renew('a', 'x' as never, 1), TypeError, /`tokens`/],
      ['renew token', () => store.renew('a', [1 as never], 1), TypeError, /`tokens\[0\]`/],
      ['renew ttl', () => store.renew('a', [], 0), RangeError, /`ttl`/],
      ['release tokens', () => store.release('a', undefined as never), TypeError, /`tokens`/],
      ['subscribe fn', () => store.subscribe!('a', null as never), TypeError, /`onWake`/],
      ['options.clock', () => memoryStore({ clock: {} as never }), TypeError, /`options.clock`/],
    ];
    for (const [name, call, type, message] of cases) {
      it(name, () => {
        expect(call).toThrow(type);
        expect(call).toThrow(message);
      });
    }

    it('an invalid cost late in the batch spends nothing', () => {
      const { store } = setup();
      expect(() => store.acquire({ id: 'a', rules: [gcra], costs: [1, 5], count: 2 })).toThrow(RangeError);
      expect(
        (store.acquire({ id: 'a', rules: [gcra], costs: [1, 1, 1], count: 3 }) as AcquireResult).granted,
      ).toBe(2);
    });

    it('a zero-length pause records nothing and returns now', () => {
      const { store } = setup();
      const now = (store.acquire({ id: 'a', rules: [], costs: [1], count: 1 }) as AcquireResult).now;
      expect(store.pause('a', 0)).toBe(now);
      expect((store.acquire({ id: 'a', rules: [], costs: [1], count: 1 }) as AcquireResult).granted).toBe(1);
      expect(contents(store).pauses).toBe(0);
    });
  });

  describe('wake-ups', () => {
    it('are delivered in a microtask, never inside the store call', async () => {
      const { store } = setup();
      const events: WakeEvent[] = [];
      store.subscribe!('a', (e) => {
        events.push(e);
        // Re-entering the store from a subscriber is safe.
        store.acquire({ id: 'a', rules: [gcra], costs: [1], count: 1 });
      });
      store.pause('a', 100);
      expect(events).toEqual([]);
      await flushMicrotasks();
      expect(events).toEqual([{ type: 'pause', until: 1_700_000_000_100 }]);
    });

    it('a throwing subscriber does not stop the others', async () => {
      const { store } = setup();
      const events: WakeEvent[] = [];
      store.subscribe!('a', () => {
        throw new Error('boom');
      });
      store.subscribe!('a', (e) => events.push(e));
      store.resume('a');
      await flushMicrotasks();
      expect(events).toEqual([{ type: 'resume' }]);
    });

    it('the same function subscribed twice hears each event twice; each unsubscribe removes one', async () => {
      const { store } = setup();
      const events: WakeEvent[] = [];
      const fn = (e: WakeEvent) => events.push(e);
      const off1 = store.subscribe!('a', fn);
      const off2 = store.subscribe!('a', fn);
      store.resume('a');
      await flushMicrotasks();
      expect(events).toHaveLength(2);
      off1();
      store.resume('a');
      await flushMicrotasks();
      expect(events).toHaveLength(3);
      off2();
      expect(contents(store).subscribers).toBe(0);
    });

    it('release of unknown tokens wakes nobody', async () => {
      const { store } = setup();
      const events: WakeEvent[] = [];
      store.subscribe!('a', (e) => events.push(e));
      store.release('a', ['nope']);
      await flushMicrotasks();
      expect(events).toEqual([]);
    });
  });

  describe('memory stays bounded by live state', () => {
    it('does not grow with the number of jobs', () => {
      const { clock, store } = setup();
      const rules = [gcra, window];
      for (let i = 0; i < 10_000; i++) {
        store.acquire({ id: 'busy', rules, costs: [1, 1, 1], count: 3, lease: { limit: 3, ttl: 50 } });
        clock.advance(7);
        const held = store.acquire({
          id: 'busy',
          rules: [],
          costs: [1],
          count: 1,
          lease: { limit: 100, ttl: 1 },
        });
        store.release(
          'busy',
          (held as AcquireResult).leases!.map((l) => l.token),
        );
      }
      const c = contents(store);
      expect(c.ids).toBe(1);
      expect(c.rules).toBeLessThanOrEqual(2);
      expect(c.leases).toBeLessThanOrEqual(3);
    });

    it('drops expired rule state, ended pauses and empty lease sets of idle ids', () => {
      const { clock, store } = setup();
      for (let i = 0; i < 500; i++) {
        const id = `id-${i}`;
        store.acquire({ id, rules: [gcra, window], costs: [1], count: 1, lease: { limit: 2, ttl: 1000 } });
        store.pause(id, 500);
      }
      expect(contents(store)).toMatchObject({ ids: 500, rules: 1000, leases: 500, pauses: 500 });
      clock.advance(2000);
      // Other traffic sweeps the idle ids: each call examines two of them.
      for (let i = 0; i < 300; i++) store.acquire({ id: 'other', rules: [], costs: [1], count: 1 });
      expect(contents(store)).toEqual({ ids: 0, rules: 0, leases: 0, pauses: 0, subscribers: 0 });
    });

    it('a sliding window holds at most one entry per live grant call, and is dropped one interval after the last', () => {
      const { clock, store } = setup();
      const sliding = normalizeRule({ limit: 50, interval: '100ms', algorithm: 'sliding-window' }, 's');
      let lastGrant = 0;
      for (let i = 0; i < 20_000; i++) {
        const r = store.acquire({ id: 'log', rules: [sliding], costs: [1, 1], count: 2 }) as AcquireResult;
        if (r.granted > 0) lastGrant = r.now;
        clock.advance(0.25);
      }
      // Peek at the log: 100 ms / 0.25 ms = 400 calls in the window, but at most 50 units live.
      const state = (
        store as unknown as { ids: Map<string, { rules: Map<string, { log: number[]; head: number }> }> }
      ).ids
        .get('log')!
        .rules.get(sliding.digest)!;
      expect((state.log.length - state.head) / 2).toBeLessThanOrEqual(50);
      expect(state.log.length).toBeLessThanOrEqual(2 * 50 + 2 * 128);
      clock.advance(lastGrant + 99.999 - clock.now());
      store.resume('log');
      expect(contents(store).rules).toBe(1);
      clock.advance(0.001);
      store.resume('log');
      expect(contents(store)).toMatchObject({ ids: 0, rules: 0 });
    });

    it('drops a touched id as soon as all of its state has expired', () => {
      const { clock, store } = setup();
      store.acquire({ id: 'a', rules: [gcra], costs: [1, 1], count: 2 });
      expect(contents(store).ids).toBe(1);
      // tat is 200 ms ahead; a GCRA state is kept one interval (1 s) past it, so that a rule
      // change can tell an idle id from one spent until a moment ago (rules/gcra.ts, gcraExpiry()).
      clock.advance(1199.999);
      store.resume('a');
      expect(contents(store).ids).toBe(1); // tat + interval not reached yet
      clock.advance(0.001); // tat + interval reached: the state may go
      store.resume('a');
      expect(contents(store).ids).toBe(0);
    });

    it('keeps fences growing after dropping an idle id', () => {
      const { clock, store } = setup();
      const lease = { limit: 50, ttl: 1 };
      const first = store.acquire({ id: 'a', rules: [], costs: Array(50).fill(1), count: 50, lease });
      const last = (first as AcquireResult).leases!.at(-1)!.fence;
      clock.advance(1.1); // the leases expired, and the clock passed the last fence (49µs ahead of it)
      store.resume('a');
      expect(contents(store).ids).toBe(0);
      const again = store.acquire({ id: 'a', rules: [], costs: [1], count: 1, lease }) as AcquireResult;
      expect(again.leases![0]!.fence).toBeGreaterThan(last);
    });
  });
});
