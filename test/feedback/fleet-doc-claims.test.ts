import { describe, expect, it } from 'vitest';
import { createValve, memoryStore, type Store } from '../../src/index.js';
import { FakeClock } from '../helpers/fake-clock.js';

/**
 * docs/provider-feedback.md, "What wrapFetch learns across responses" and "Several processes:
 * the fleet window": what differs with and without a store that keeps a fleet window, and what
 * a request waiting for a ticket costs in store calls.
 */

const NOW = 1_700_000_000_000;

/** The memory store without the fleet window, as a `Store` of your own without windowSend/windowReport. */
function withoutWindow(store: Store): Store {
  return new Proxy(store, {
    get(target, key) {
      if (key === 'windowSend' || key === 'windowReport') return undefined;
      const v = Reflect.get(target, key, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

/** The memory store, counting its windowSend calls. */
function countingSends(store: Store): { store: Store; sends: () => number } {
  let sends = 0;
  const counted = new Proxy(store, {
    get(target, key) {
      const v = Reflect.get(target, key, target);
      if (typeof v !== 'function') return v;
      if (key === 'windowSend') {
        return (...args: unknown[]) => {
          sends++;
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      }
      return v.bind(target);
    },
  });
  return { store: counted, sends: () => sends };
}

interface Call {
  url: string;
  answer(headers: Record<string, string>): void;
}

function setup(store: (clock: FakeClock) => Store) {
  const clock = new FakeClock(NOW);
  const valve = createValve({
    id: 'doc-claims',
    rules: { limit: 1000, interval: '1s', burst: 1000 },
    store: store(clock),
    clock,
  });
  const pauses: { at: number; until: number }[] = [];
  valve.on('pause', (e) => pauses.push({ at: clock.now() - NOW, until: e.until - NOW }));
  const calls: Call[] = [];
  const fetchFn = (url: string | URL | Request) =>
    new Promise<Response>((resolve) => {
      calls.push({
        url: String(url),
        answer: (h) => resolve(new Response('x', { status: 200, headers: h })),
      });
    });
  const f = valve.wrapFetch(fetchFn as typeof fetch, { retries: 0 });
  const call = (url: string) => calls.find((c) => c.url === url)!;
  return { clock, valve, pauses, calls, f, call };
}

describe('requests in flight spend a window count', () => {
  it('without a fleet window: valve pauses until the reset at once', async () => {
    const { clock, valve, pauses, calls, f } = setup((clock) => withoutWindow(memoryStore({ clock })));
    const all = [0, 1, 2, 3, 4].map((i) => f(`u${i}`));
    await clock.tickAsync(1);
    expect(calls).toHaveLength(5);
    calls[0]!.answer({ ratelimit: '"default";r=3;t=10' }); // 4 sent after it, unanswered
    await clock.tickAsync(1);
    expect(pauses).toHaveLength(1);
    expect(pauses[0]!.until).toBeGreaterThan(9000);
    for (const c of calls.slice(1)) c.answer({});
    await Promise.all(all);
    await valve.close();
  });

  it('with one: no pause while the count is above 0; wrapFetch requests wait for a ticket, run() jobs are not held', async () => {
    const { clock, valve, pauses, calls, f } = setup((clock) => memoryStore({ clock }));
    const warm = f('warm');
    await clock.tickAsync(1);
    calls[0]!.answer({ ratelimit: '"default";r=100;t=10' });
    await clock.tickAsync(1);
    await warm;
    const all = [0, 1, 2, 3, 4].map((i) => f(`u${i}`));
    await clock.tickAsync(1);
    calls[1]!.answer({ ratelimit: '"default";r=3;t=10' }); // 4 sent after it, unanswered
    await clock.tickAsync(1);
    const late = f('late');
    let ranAt: number | undefined;
    const job = valve.run(() => {
      ranAt = clock.now() - NOW;
    });
    await clock.tickAsync(50);
    expect(pauses).toEqual([]);
    expect(ranAt).toBeDefined();
    expect(calls.some((c) => c.url === 'late')).toBe(false);
    for (const c of calls.slice(2)) c.answer({ ratelimit: '"default";r=2;t=10' });
    await clock.tickAsync(50);
    expect(calls.some((c) => c.url === 'late')).toBe(true);
    for (const c of calls.slice(2)) c.answer({});
    await Promise.all([...all, late, job]);
    await valve.close();
  });
});

describe('a late answer from an older window', () => {
  for (const fleet of [true, false]) {
    it(
      fleet ? 'pauses nothing with a fleet window' : 'pauses the rest of the current window without one',
      async () => {
        const { clock, valve, pauses, calls, f, call } = setup((clock) =>
          fleet ? memoryStore({ clock }) : withoutWindow(memoryStore({ clock })),
        );
        const warm = f('warm');
        await clock.tickAsync(1);
        calls[0]!.answer({ ratelimit: '"default";r=9;t=1' }); // window 1, reset within 1 s
        await clock.tickAsync(1);
        await warm;
        const a = f('A'); // sent in window 1, answered late
        await clock.tickAsync(5);
        const b = f('B');
        await clock.tickAsync(5);
        call('B').answer({ ratelimit: '"default";r=7;t=1' });
        await clock.tickAsync(1);
        await b;
        await clock.tickAsync(1100); // window 1 has reset
        const c = f('C');
        await clock.tickAsync(5);
        call('C').answer({ ratelimit: '"default";r=9;t=1' }); // opens window 2
        await clock.tickAsync(1);
        await c;
        const before = pauses.length;
        call('A').answer({ ratelimit: '"default";r=0;t=1' }); // window 1's spent count
        await clock.tickAsync(1);
        await a;
        const after = pauses.slice(before);
        if (fleet) expect(after).toEqual([]);
        else {
          expect(after).toHaveLength(1);
          // Never past the reset the late answer states (1 s from its arrival).
          expect(after[0]!.until).toBeLessThanOrEqual(after[0]!.at + 1000);
        }
        await valve.close();
      },
    );
  }
});

it('a request refused a ticket while answers are out asks 5, 10, 20 … 640 ms apart, then once a second', async () => {
  let counter: (() => number) | undefined;
  const { clock, valve, calls, f } = setup((clock) => {
    const c = countingSends(memoryStore({ clock }));
    counter = c.sends;
    return c.store;
  });
  const warm = f('warm');
  await clock.tickAsync(1);
  calls[0]!.answer({ ratelimit: '"default";r=2;t=60' });
  await clock.tickAsync(1);
  await warm;
  const x1 = f('x1');
  const x2 = f('x2');
  await clock.tickAsync(1);
  const before = counter!();
  const x3 = f('x3'); // the window's 2 units are in flight: refused until an answer
  await clock.tickAsync(1300);
  expect(counter!() - before).toBe(9);
  await clock.tickAsync(30_000 - 1300);
  expect(counter!() - before).toBe(37);
  expect(calls.map((c) => c.url)).toEqual(['warm', 'x1', 'x2']);
  for (const c of calls.slice(1)) c.answer({ ratelimit: '"default";r=1;t=30' });
  await clock.tickAsync(10);
  expect(calls.map((c) => c.url)).toContain('x3');
  for (const c of calls.slice(3)) c.answer({});
  await Promise.all([x1, x2, x3]);
  await valve.close();
});
