/**
 * The fleet window (src/stores/window-record.ts; window.lua mirrors it): what a ticket and a
 * report do, on the memory store and a virtual clock; and, differentially, the Lua script in
 * redisStore's test-clock mode gives the same answers on random command sequences.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const ID = 'w';
const TTL = 2000;

function setup(): { clock: FakeClock; store: Store } {
  const clock = new FakeClock();
  return { clock, store: memoryStore({ clock }) };
}

const send = (s: Store) => s.windowSend!(ID, TTL) as { seq: number; wait: number; probe: boolean };
const report = (s: Store, seq: number, remaining: number, resetMs: number) =>
  s.windowReport!(ID, seq, remaining, resetMs) as number;

/** A store whose id has had its first request (a probe) answered without a window. */
function opened(): { clock: FakeClock; store: Store } {
  const s = setup();
  const first = send(s.store);
  expect(first).toEqual({ seq: 1, wait: 0, probe: true });
  report(s.store, first.seq, -1, 0);
  return s;
}

describe('the fleet window (memory store)', () => {
  it("an id's first ticket is a probe: the others wait for its answer, then go", () => {
    const { clock, store } = setup();
    expect(send(store)).toEqual({ seq: 1, wait: 0, probe: true });
    expect(send(store)).toEqual({ seq: 0, wait: TTL, probe: true });
    clock.advance(3);
    // Answered without a window (a provider that sends none): every ticket goes, in order.
    expect(report(store, 1, -1, 0)).toBe(0);
    expect([send(store), send(store), send(store)].map((t) => t.seq)).toEqual([2, 3, 4]);
    expect(send(store)).toEqual({ seq: 5, wait: 0, probe: false });
  });

  it("the first probe's answer opens the window with its count: only that many more go", () => {
    const { store } = setup();
    const first = send(store);
    expect(report(store, first.seq, 3, 1000)).toBe(0);
    expect([send(store), send(store), send(store), send(store)].map((t) => t.seq)).toEqual([2, 3, 4, 0]);
  });

  it('requests still in flight count against the lowest remaining count: spent, the next ticket waits for the reset', () => {
    const { clock, store } = opened();
    for (let i = 0; i < 4; i++) send(store); // 2..5 in flight
    // The answer to #2 says 4 left: #3..#5 may not be counted yet, so 1 is left.
    expect(report(store, 2, 4, 800)).toBe(0);
    expect(send(store).seq).toBe(6);
    const refused = send(store);
    expect(refused).toEqual({ seq: 0, wait: 800, probe: false });
    // The last unit was given. While the lowest count (3) leaves room that requests in flight may
    // take, tickets are refused and no wait is returned (no pause: an answer still out may show
    // a request counted before it).
    clock.advance(100);
    expect(report(store, 3, 3, 900)).toBe(0);
    expect(send(store)).toEqual({ seq: 0, wait: 700, probe: false });
    expect(report(store, 4, 2, 900)).toBe(0);
    expect(report(store, 5, 1, 900)).toBe(0);
    // The count is spent: the report says until when.
    expect(report(store, 6, 0, 900)).toBe(700);
  });

  it('a request sent later but counted earlier (another connection) is counted once: the whole window is used', () => {
    const { store } = setup();
    // A window of 10: the probe (#1) is counted first.
    expect(report(store, send(store).seq, 9, 1000)).toBe(0);
    const seqs = Array.from({ length: 5 }, () => send(store).seq); // #2..#6
    expect(seqs).toEqual([2, 3, 4, 5, 6]);
    // The provider counts #2, #5, #3, #4, #6 (#5 went on an open connection, #3 and #4 waited for
    // theirs): each answer's count is one less than the one before, in its order.
    for (const [seq, remaining] of [
      [2, 8],
      [5, 7],
      [3, 6],
      [4, 5],
      [6, 4],
    ] as const) {
      expect(report(store, seq, remaining, 1000)).toBe(0);
    }
    // 6 of 10 counted, nothing in flight: 4 more go (counting #5 twice would leave 3).
    expect(Array.from({ length: 5 }, () => send(store).seq)).toEqual([7, 8, 9, 10, 0]);
  });

  it('an earlier request counted after a later one: the earlier stays in flight until its answer', () => {
    const { store } = setup();
    expect(report(store, send(store).seq, 4, 1000)).toBe(0); // a window of 5, #1 counted
    send(store); // #2
    send(store); // #3
    // #3 overtook #2: answered 3 left, while #2 is not counted yet.
    expect(report(store, 3, 3, 1000)).toBe(0);
    expect(send(store).seq).toBe(4); // 3 − #2 in flight: 2 left, one given
    expect(send(store).seq).toBe(5);
    expect(send(store).seq).toBe(0);
    // #2 counted: #4 and #5 may take the last 2 (refused, but no wait until the count is spent).
    expect(report(store, 2, 2, 1000)).toBe(0);
    expect(send(store)).toEqual({ seq: 0, wait: 1000, probe: false });
    expect(report(store, 5, 1, 1000)).toBe(0);
    expect(report(store, 4, 0, 1000)).toBe(1000);
  });

  it('the tightest reset any answer of the window gave holds (a later, coarser one does not lengthen it)', () => {
    const { clock, store } = opened();
    send(store);
    send(store);
    report(store, 2, 1, 1000); // reset at t0 + 1000 at the latest, one left after #2: #3 takes it
    clock.advance(300);
    // #3's answer: spent, with a coarse `t=1` (1000 ms from now): the window's own bound stays.
    expect(report(store, 3, 0, 1000)).toBe(700);
    expect(send(store)).toEqual({ seq: 0, wait: 700, probe: false });
  });

  it('after a spent window one probe at a time learns the next; the others wait for its answer', () => {
    const { clock, store } = setup();
    send(store);
    expect(report(store, 1, 0, 500)).toBe(500);
    clock.advance(500);
    const probe = send(store);
    expect(probe).toEqual({ seq: 2, wait: 0, probe: true });
    expect(send(store)).toEqual({ seq: 0, wait: TTL, probe: true });
    clock.advance(20);
    expect(send(store)).toEqual({ seq: 0, wait: TTL - 20, probe: true });
    // The probe's answer opens the next window with its true count.
    expect(report(store, probe.seq, 9, 1000)).toBe(0);
    const after = Array.from({ length: 10 }, () => send(store).seq);
    expect(after).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11, 0]);
  });

  it('a probe that is never answered stops holding the fleet after its time-to-live; one without a window ends it', () => {
    const { clock, store } = setup();
    send(store);
    report(store, 1, 0, 100);
    clock.advance(100);
    expect(send(store).probe).toBe(true);
    clock.advance(TTL - 1);
    expect(send(store).seq).toBe(0);
    clock.advance(1);
    expect(send(store)).toEqual({ seq: 3, wait: 0, probe: false });
    // A probe answered without a window (e.g. a network error): −1 ends it at once.
    report(store, 3, 0, 100);
    clock.advance(100);
    const p = send(store);
    expect(p.probe).toBe(true);
    expect(report(store, p.seq, -1, 0)).toBe(0);
    expect(send(store).seq).toBe(p.seq + 1);
  });

  it('an answer from before a reset, reported after it with nothing sent since, does not open a spent window', () => {
    const { clock, store } = opened();
    send(store);
    send(store);
    report(store, 2, 5, 200);
    clock.advance(250); // the window's reset passed; #3's answer arrives late, saying 0 left
    expect(report(store, 3, 0, 1000)).toBe(0);
    expect(send(store)).toEqual({ seq: 4, wait: 0, probe: false });
    // And once a request was sent after the reset, answers to older ones are not counted.
    expect(report(store, 3, 0, 1000)).toBe(0);
    expect(send(store).seq).toBe(5);
  });

  it('checks its arguments', () => {
    const { store } = setup();
    expect(() => store.windowSend!(ID, -1)).toThrow(RangeError);
    expect(() => store.windowReport!(ID, 1.5, 0, 10)).toThrow(RangeError);
    expect(() => store.windowReport!(ID, 1, -2, 10)).toThrow(RangeError);
    expect(() => store.windowReport!(ID, 1, 0, Number.NaN)).toThrow(RangeError);
    expect(() => store.windowReport!(ID, '1' as unknown as number, 0, 10)).toThrow(TypeError);
    expect(() => store.windowSend!('a{b}', 10)).toThrow(TypeError);
  });
});

type Command =
  | { t: 'send' }
  | { t: 'report'; back: number; remaining: number; resetMs: number }
  | { t: 'advance'; ms: number };

const commandArb: fc.Arbitrary<Command> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ t: 'send' as const }) },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant('report' as const),
      back: fc.integer({ min: 0, max: 6 }),
      remaining: fc.integer({ min: -1, max: 6 }),
      resetMs: fc.constantFrom(0, 1, 50, 333.5, 1000),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant('advance' as const),
      ms: fc.constantFrom(0, 1, 49, 200, 1000, 2500),
    }),
  },
);

describe('window.lua and the memory store agree', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis('redis'));
  });
  afterAll(async () => {
    await c?.close();
  });

  it('answers VALVE_CORRUPT_STATE for a record valve never writes, before changing anything', async () => {
    const prefix = uniquePrefix('win-corrupt');
    const store = redisStore({ client: c.client, prefix });
    const key = `${prefix}:{${ID}}:window`;
    const redis = c.client as unknown as {
      set(k: string, v: string): Promise<unknown>;
      get(k: string): Promise<string | null>;
      del(k: string): Promise<unknown>;
      rpush(k: string, v: string): Promise<unknown>;
    };
    for (const bad of ['garbage', '1,2,3', '1,2,3,4,5,6,7,x', '1,2,3,4,5,6,7,8.5']) {
      await redis.set(key, bad);
      await expect(store.windowSend!(ID, TTL)).rejects.toThrow(/VALVE_CORRUPT_STATE/);
      await expect(store.windowReport!(ID, 1, 0, 10)).rejects.toThrow(/VALVE_CORRUPT_STATE/);
      expect(await redis.get(key)).toBe(bad);
    }
    await redis.del(key);
    await redis.rpush(key, 'x');
    await expect(store.windowSend!(ID, TTL)).rejects.toThrow(/VALVE_CORRUPT_STATE/);
    await redis.del(key);
  });

  it('on random sequences of tickets, reports and time', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(commandArb, { minLength: 1, maxLength: 40 }), async (commands) => {
        const mClock = new FakeClock();
        const rClock = new FakeClock();
        const mem = memoryStore({ clock: mClock });
        const red = redisStore({ client: c.client, prefix: uniquePrefix('win'), unsafeTestClock: rClock });
        let last = 0;
        for (const cmd of commands) {
          if (cmd.t === 'advance') {
            mClock.advance(cmd.ms);
            rClock.advance(cmd.ms);
          } else if (cmd.t === 'send') {
            const a = await mem.windowSend!(ID, TTL);
            const b = await red.windowSend!(ID, TTL);
            expect(b).toEqual(a);
            if (a.seq > 0) last = a.seq;
          } else {
            const seq = Math.max(0, last - cmd.back);
            const a = await mem.windowReport!(ID, seq, cmd.remaining, cmd.resetMs);
            const b = await red.windowReport!(ID, seq, cmd.remaining, cmd.resetMs);
            expect(b).toBe(a);
          }
        }
      }),
      { numRuns: 60 },
    );
  }, 120_000);
});
