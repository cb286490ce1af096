/**
 * The conformance suite can fail: stores broken on purpose fail the cases that check what they
 * break, and the suite's own checks of its arguments and capabilities hold. The cases are
 * collected through a minimal runner (plain `describe`/`it` functions, as node:test or mocha
 * would call them) and run here one by one.
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireRequest, Store } from '../../src/stores/store.js';
import { type StoreUnderTest, storeContract } from '../../src/testing.js';
import { FakeClock } from '../helpers/fake-clock.js';

interface Collected {
  name: string;
  run: () => Promise<void>;
}

/** Registers the suite on a runner of our own and returns its cases by full name. */
function collect(
  makeStore: () => StoreUnderTest | Promise<StoreUnderTest>,
  options: { controlledClock?: boolean; wakeUps?: boolean; window?: boolean } = {},
  name = 'probe',
): Collected[] {
  const cases: Collected[] = [];
  const path: string[] = [];
  storeContract(name, makeStore, {
    describe: (name, body) => {
      path.push(name);
      body();
      path.pop();
    },
    it: (name, body) => {
      cases.push({ name: [...path, name].join(' › '), run: body });
    },
    ...options,
  });
  return cases;
}

/** The names of the cases that fail. */
async function failing(cases: Collected[], only?: RegExp): Promise<string[]> {
  const failed: string[] = [];
  for (const c of cases) {
    if (only && !only.test(c.name)) continue;
    try {
      await c.run();
    } catch {
      failed.push(c.name);
    }
  }
  return failed;
}

/** A memory store on a fake clock with one method replaced. */
function broken(patch: (inner: Store) => Partial<Store>): () => StoreUnderTest {
  return () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const store: Store = {
      acquire: (r) => inner.acquire(r),
      pause: (id, ms) => inner.pause(id, ms),
      resume: (id) => inner.resume(id),
      renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
      release: (id, tokens) => inner.release(id, tokens),
      subscribe: (id, onWake) => inner.subscribe!(id, onWake),
      windowSend: (id, probeTtl) => inner.windowSend!(id, probeTtl),
      windowReport: (id, seq, remaining, resetMs) => inner.windowReport!(id, seq, remaining, resetMs),
      ...patch(inner),
    };
    return { store, advance: (ms) => clock.advance(ms) };
  };
}

describe('the conformance suite fails stores that break the contract', () => {
  it('registers the same cases with any runner; a sound store passes them all', async () => {
    const cases = collect(
      broken(() => ({})),
      { controlledClock: true },
    );
    expect(cases.length).toBeGreaterThan(40);
    expect(cases.every((c) => c.name.startsWith('Store contract: probe › '))).toBe(true);
    expect(await failing(cases)).toEqual([]);
  });

  it('renew that resurrects a released lease', async () => {
    const cases = collect(
      broken(() => ({ renew: (_id, tokens) => tokens.map(() => true) })),
      { controlledClock: true },
    );
    expect(await failing(cases, /leases/)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/renew never resurrects/),
        expect.stringMatching(/release frees only the given tokens/),
      ]),
    );
  });

  it('a pause that shortens, and acquire that ignores the pause', async () => {
    const shortens = collect(
      broken((inner) => ({
        pause: async (id, ms) => {
          await inner.resume(id);
          return inner.pause(id, ms);
        },
      })),
    );
    expect(await failing(shortens, /› pause ›/)).toEqual([expect.stringMatching(/only extends/)]);
    const ignores = collect(
      broken((inner) => ({
        acquire: async (r: AcquireRequest) => {
          const result = await inner.acquire(r);
          if (result.blocked !== 'pause') return result;
          await inner.resume(r.id);
          return inner.acquire(r);
        },
      })),
    );
    expect(await failing(ignores, /› pause ›/)).toEqual(
      expect.arrayContaining([expect.stringMatching(/blocks every grant/)]),
    );
  });

  it('acquire that grants one job too many, or reports a wrong hint', async () => {
    const generous = collect(
      broken((inner) => ({
        acquire: async (r: AcquireRequest) => {
          const result = await inner.acquire(r);
          return result.granted < r.count ? { ...result, granted: result.granted + 1 } : result;
        },
      })),
      { controlledClock: true },
    );
    expect((await failing(generous, /admission/)).length).toBeGreaterThan(5);
    const early = collect(
      broken((inner) => ({
        acquire: async (r: AcquireRequest) => {
          const result = await inner.acquire(r);
          return { ...result, retryAfter: Math.max(0, result.retryAfter - 0.001) };
        },
      })),
      { controlledClock: true },
    );
    expect(await failing(early, /exact retry hints/)).toEqual(
      expect.arrayContaining([expect.stringMatching(/GCRA, burst 1/)]),
    );
  });

  it('a fleet window that sends past a spent window, loosens its reset, or lets several probes out', async () => {
    const window = /fleet window/;
    const sound = collect(
      broken(() => ({})),
      { controlledClock: true, window: true },
    );
    expect(sound.filter((c) => window.test(c.name)).length).toBeGreaterThanOrEqual(10);
    expect(await failing(sound, window)).toEqual([]);
    // Never refuses a ticket.
    const open = collect(
      broken((inner) => ({
        windowSend: async (id, ttl) => {
          const t = await inner.windowSend!(id, ttl);
          return t.seq > 0 ? t : { seq: 1_000_000 + Math.floor(Math.random() * 1000), wait: 0, probe: false };
        },
      })),
      { controlledClock: true },
    );
    expect(await failing(open, window)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/refuses every ticket until its reset/),
        expect.stringMatching(/less the tickets still unanswered/),
        expect.stringMatching(/first ticket is a probe/),
        expect.stringMatching(/one probe goes alone/),
      ]),
    );
    // Keeps the last reset reported rather than the tightest.
    const loose = collect(
      broken((inner) => {
        const last = new Map<string, number>();
        return {
          windowReport: async (id, seq, remaining, resetMs) => {
            const wait = await inner.windowReport!(id, seq, remaining, resetMs);
            if (remaining >= 0) last.set(id, resetMs);
            return wait > 0 ? Math.max(wait, last.get(id) ?? 0) : wait;
          },
        };
      }),
      { controlledClock: true },
    );
    expect(await failing(loose, window)).toEqual([expect.stringMatching(/tightest reset holds/)]);
    // One method without the other; `window: true` on a store with neither.
    const half = collect(broken(() => ({ windowReport: undefined })));
    const halfFailed = await failing(half, window);
    expect(halfFailed.length).toBe(half.filter((c) => window.test(c.name)).length);
    await expect(half.find((c) => window.test(c.name))!.run()).rejects.toThrow(
      /windowSend without windowReport/,
    );
    const none = collect(
      broken(() => ({ windowSend: undefined, windowReport: undefined })),
      { window: true },
    );
    await expect(none.find((c) => window.test(c.name))!.run()).rejects.toThrow(
      /declared with a fleet window \(windowSend\/windowReport\) but has none/,
    );
    // By default a store with neither has nothing to check; `window: false` registers no case.
    const plain = collect(broken(() => ({ windowSend: undefined, windowReport: undefined })));
    expect(await failing(plain, window)).toEqual([]);
    expect(
      collect(
        broken(() => ({})),
        { window: false },
      ).some((c) => window.test(c.name)),
    ).toBe(false);
  });

  it('wake-ups that never arrive', async () => {
    const cases = collect(broken(() => ({ subscribe: () => () => {} })));
    const wake = cases.filter((c) => /wake-ups .*subscribers hear/.test(c.name));
    expect(wake).toHaveLength(1);
    // The probe gives up after 5 s.
    expect(await failing(wake)).toHaveLength(1);
  }, 15_000);

  it('a declared capability the store lacks fails its cases; an undeclared one registers none', async () => {
    const noClock = collect(() => ({ store: memoryStore() }), { controlledClock: true });
    const clockCases = noClock.filter((c) => /controlled clock/.test(c.name));
    expect(clockCases.length).toBeGreaterThan(5);
    for (const c of clockCases) {
      await expect(c.run()).rejects.toThrow(/declared with a controlled clock but has none/);
    }
    const noSubscribe = collect(broken(() => ({ subscribe: undefined })));
    const [wake] = noSubscribe.filter((c) => /wake-ups/.test(c.name));
    await expect(wake!.run()).rejects.toThrow(/declared with wake-ups but has none/);
    const plain = collect(() => ({ store: memoryStore() }), { wakeUps: false });
    expect(plain.some((c) => /controlled clock|wake-ups/.test(c.name))).toBe(false);
  });

  it('runs cleanup and deferred work after each case, pass or fail', async () => {
    let cleanups = 0;
    const cases = collect(() => ({
      store: memoryStore(),
      cleanup: () => {
        cleanups++;
      },
    }));
    const one = cases.find((c) => /grants everything when there are no rules/.test(c.name))!;
    await one.run();
    expect(cleanups).toBe(1);
    const down = broken(() => ({ acquire: () => Promise.reject(new Error('down')) }));
    const bad = collect(() => ({
      ...down(),
      cleanup: () => {
        cleanups++;
      },
    }));
    await expect(bad[0]!.run()).rejects.toThrow('down');
    expect(cleanups).toBe(2);
  });

  it('checks its arguments: TypeError naming the option', () => {
    const run = { describe: () => {}, it: () => {} };
    const make = () => ({ store: memoryStore() });
    expect(() => storeContract(1 as never, make, run)).toThrow(/`name`/);
    expect(() => storeContract('x', {} as never, run)).toThrow(/`makeStore`/);
    expect(() => storeContract('x', make, undefined as never)).toThrow(/`options`.*describe/);
    expect(() => storeContract('x', make, { it: run.it } as never)).toThrow(/`describe`.*got undefined/);
    expect(() => storeContract('x', make, { ...run, wakeUps: 'no' } as never)).toThrow(/`wakeUps`.*"no"/);
    expect(() => storeContract('x', make, { ...run, window: 1 } as never)).toThrow(/`window`.*1/);
    expect(() => storeContract('x', make, { ...run, clock: true } as never)).toThrow(
      /Unknown option `clock`/,
    );
  });
});

describe('the suite with any name, and a makeStore() that returns no store', () => {
  it('a name with braces or of 190 characters: a correct store passes every case', async () => {
    const make = () => {
      const clock = new FakeClock();
      return { store: memoryStore({ clock }), advance: (ms: number) => clock.advance(ms) };
    };
    for (const name of ['memory {a}', 'm'.repeat(190)]) {
      const cases = collect(make, { controlledClock: true }, name);
      expect(cases.length).toBeGreaterThan(20);
      expect(await failing(cases)).toEqual([]);
    }
  });

  it('makeStore() returning {} fails each case with a TypeError saying so', async () => {
    const cases = collect(() => ({}) as never);
    const error = await cases[0]!.run().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toMatch(
      /makeStore\(\) must return \{ store \} with a valve Store, got an object without `store`/,
    );
  });
});
