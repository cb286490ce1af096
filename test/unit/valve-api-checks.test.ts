import { describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult, Store, WakeEvent, WakeStatus } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { spyStore } from '../helpers/spy-store.js';
import { FakeClock, track } from './harness.js';

/**
 * What the public API promises about its arguments and its store contract, where a first
 * version let something through: a store's status given inside subscribe(), `valve.id`
 * written over, an unknown key of pause()'s `{ until }`, a wrapFetch() cost no rule can admit.
 */

/** A memory store whose subscribe() tells `status` (when given) before it returns. */
function statusAtSubscribe(clock: FakeClock, status: WakeStatus | undefined, when: 'sync' | 'microtask') {
  const inner = memoryStore({ clock });
  const spy = spyStore(inner, clock);
  const store: Store = Object.assign(Object.create(null), spy, {
    subscribe(id: string, onWake: (event: WakeEvent) => void, onStatus?: (status: WakeStatus) => void) {
      const off = inner.subscribe!(id, onWake);
      if (status !== undefined) {
        if (when === 'sync') onStatus?.(status);
        else queueMicrotask(() => onStatus?.(status));
      }
      return off;
    },
    // Neither listening() nor notifies: only onStatus says whether wake-ups are delivered.
    listening: undefined,
    notifies: false,
  });
  return { inner, spy, store };
}

function takeSlot(inner: Store, id: string): string {
  const r = inner.acquire({
    id,
    rules: [],
    costs: [1],
    count: 1,
    lease: { limit: 1, ttl: 600_000 },
  }) as AcquireResult;
  return r.leases![0]!.token;
}

describe('a status the store gives inside subscribe()', () => {
  for (const when of ['sync', 'microtask'] as const) {
    it(`a refusal (${when}): one 'store-error' with operation 'subscribe', and the jobs run`, async () => {
      const clock = new FakeClock();
      const refusal = new Error('NOPERM this user has no permissions to access one of the channels');
      const { store } = statusAtSubscribe(clock, { listening: false, error: refusal }, when);
      const valve = createValve({ id: 'sub', clock, store, rules: { limit: 1, interval: 1000 } });
      const errors: unknown[] = [];
      valve.on('store-error', (err, context) => errors.push([err, context]));
      const jobs = [1, 2, 3].map((n) => valve.run(() => n));
      await clock.tickAsync(5000);
      expect(await Promise.all(jobs)).toEqual([1, 2, 3]);
      expect(errors).toEqual([[refusal, { operation: 'subscribe', id: 'sub', action: 'none' }]]);
      expect(valve.stats().storeErrors).toBe(1);
    });

    it(`a confirmation (${when}): a waiter on a global slot trusts the wake-ups instead of polling`, async () => {
      const clock = new FakeClock();
      const { inner, spy, store } = statusAtSubscribe(clock, { listening: true }, when);
      const valve = createValve({
        id: 'w',
        clock,
        store,
        concurrency: { limit: 1, scope: 'global', leaseTtl: 600_000 },
      });
      const theirs = takeSlot(inner, 'w');
      const job = track(valve.run(() => 'mine'));
      await clock.tickAsync(3000);
      // Unconfirmed, it would poll every 50 to 75 ms (some 40 calls in 3 s); confirmed, it
      // rechecks at most once a second.
      expect(spy.acquires.length).toBeLessThanOrEqual(6);
      inner.release('w', [theirs]);
      await clock.tickAsync(0);
      expect(job.value).toBe('mine');
    });
  }

  it('a store that reuses its status object: what it said at the call counts', async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const refusal = new Error('refused');
    const status: { listening: boolean; error?: unknown } = { listening: false, error: refusal };
    const store: Store = Object.assign(Object.create(null), spyStore(inner, clock), {
      subscribe(id: string, onWake: (event: WakeEvent) => void, onStatus?: (status: WakeStatus) => void) {
        onStatus?.(status);
        status.listening = true;
        status.error = undefined;
        return inner.subscribe!(id, onWake);
      },
    });
    const valve = createValve({ id: 'reuse', clock, store });
    const errors: unknown[] = [];
    valve.on('store-error', (err) => errors.push(err));
    const job = track(valve.run(() => 'ran'));
    await clock.tickAsync(10);
    expect(job.value).toBe('ran');
    expect(errors).toEqual([refusal]);
  });
});

describe('valve.id is read-only', () => {
  it('assigning it throws a TypeError (strict mode) and leaves the id the store and events use', async () => {
    const clock = new FakeClock();
    const store = spyStore(memoryStore({ clock }), clock);
    const valve = createValve({ id: 'api', clock, store });
    expect(() => {
      (valve as { id: string }).id = 'x';
    }).toThrow(TypeError);
    expect(valve.id).toBe('api');
    expect(Object.keys(valve)).toContain('id');
    store.fail.acquire = new Error('down');
    const contexts: unknown[] = [];
    valve.on('store-error', (_err, context) => contexts.push(context));
    track(valve.run(() => 1));
    await clock.tickAsync(10);
    expect(contexts[0]).toMatchObject({ operation: 'acquire', id: 'api' });
    expect(store.calls.find((c) => c.op === 'acquire')?.args[0]).toMatchObject({ id: 'api' });
    await valve.close();
  });
});

describe('pause({ until }) refuses unknown keys', () => {
  it('rejects with a TypeError naming the key, and pauses nothing', async () => {
    const clock = new FakeClock();
    const valve = createValve({ id: 'p', clock });
    const err = await valve.pause({ until: clock.now() + 1000, foo: 1 } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TypeError);
    expect((err as Error).message).toBe('Unknown option `foo`; pause() takes `until`');
    expect(valve.stats().pausedUntil).toBeNull();
    // The documented form still works.
    await valve.pause({ until: clock.now() + 1000 });
    expect(valve.stats().pausedUntil).toBe(clock.now() + 1000);
  });
});

describe('wrapFetch() checks a fixed cost at creation, like wrap()', () => {
  const okFetch = (async () => new Response('ok')) as typeof fetch;

  it('a cost the rules can never admit throws the RangeError wrap() throws', () => {
    const valve = createValve({ id: 'f', rules: { limit: 10, interval: 1000, burst: 4 } });
    let wrapError: unknown;
    try {
      valve.wrap(() => 1, { cost: 5 });
    } catch (err) {
      wrapError = err;
    }
    expect(wrapError).toBeInstanceOf(RangeError);
    expect(() => valve.wrapFetch(okFetch, { cost: 5 })).toThrow(RangeError);
    expect(() => valve.wrapFetch(okFetch, { cost: 5 })).toThrow((wrapError as Error).message);
    // An admissible cost, and a cost function (checked per call), are accepted.
    expect(typeof valve.wrapFetch(okFetch, { cost: 4 })).toBe('function');
    expect(typeof valve.wrapFetch(okFetch, { cost: () => 5 })).toBe('function');
  });

  it('an invalid cost is still refused as invalid first; a cost function is checked per call', async () => {
    const valve = createValve({ id: 'f2', rules: { limit: 10, interval: 1000, burst: 4 } });
    expect(() => valve.wrapFetch(okFetch, { cost: 5.5 })).toThrow(
      'Expected `cost` to be a positive integer or a function of the request, got 5.5',
    );
    const f = valve.wrapFetch(okFetch, { cost: () => 5 });
    await expect(f('http://x.test/')).rejects.toBeInstanceOf(RangeError);
  });

  it("a group's wrapped fetch rejects (never throws) when its valves cannot admit the cost", async () => {
    const group = createValveGroup({ rules: { limit: 10, interval: 1000, burst: 4 } });
    const f = group.wrapFetch(okFetch, { key: () => 'k', cost: 5 });
    let result: unknown;
    expect(() => {
      result = f('http://x.test/');
    }).not.toThrow();
    await expect(result).rejects.toBeInstanceOf(RangeError);
    await expect(f('http://x.test/')).rejects.toBeInstanceOf(RangeError);
    await group.close();
  });
});
