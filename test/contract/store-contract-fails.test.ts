/**
 * The conformance suite can fail: stores broken on purpose fail the cases that check what they
 * break, and the suite's own checks of its arguments and capabilities hold. The cases are
 * collected through a minimal runner (plain `describe`/`it` functions, as node:test or mocha
 * would call them) and run here one by one.
 */
import { describe, expect, it } from 'vitest';
import type { StoreRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireRequest, AcquireResult, Store } from '../../src/stores/store.js';
import { type StoreUnderTest, storeContract } from '../../src/testing.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Collected, collect } from './collect.js';

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

/** A memory store on a fake clock (or the system clock) with one method replaced. */
function broken(patch: (inner: Store) => Partial<Store>, controlled = true): () => StoreUnderTest {
  return () => {
    const clock = new FakeClock();
    const inner = controlled ? memoryStore({ clock }) : memoryStore();
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
    return controlled ? { store, advance: (ms) => clock.advance(ms) } : { store };
  };
}

/**
 * A renewal that counts its ttl from the lease's grant instead of from now (the lease then ends
 * at grant + ttl however late it was renewed).
 */
const renewFromGrant = (inner: Store): Partial<Store> => {
  const granted = new Map<string, number>();
  return {
    acquire: async (r) => {
      const result = await inner.acquire(r);
      for (const lease of result.leases ?? []) granted.set(lease.token, performance.now());
      return result;
    },
    renew: (id, tokens, ttl) =>
      inner.renew(
        id,
        tokens,
        Math.max(1, ttl - Math.round(performance.now() - (granted.get(tokens[0] ?? '') ?? 0))),
      ),
  };
};

/**
 * A read-modify-write race: an acquisition arriving while an identical one is in flight (a
 * network round trip away) gets the same answer, as when a store reads the state, decides,
 * then writes it back.
 */
const nonAtomic = (inner: Store): Partial<Store> => {
  const inflight = new Map<string, Promise<AcquireResult>>();
  return {
    acquire: async (r) => {
      const key = JSON.stringify([r.id, r.rules.map((x) => x.digest), r.costs.slice(0, r.count), r.lease]);
      const pending = inflight.get(key);
      if (pending) return { ...(await pending) };
      const p = (async () => {
        await new Promise((resolve) => setTimeout(resolve, 1));
        return inner.acquire(r);
      })();
      inflight.set(key, p);
      try {
        return await p;
      } finally {
        inflight.delete(key);
      }
    },
  };
};

/**
 * GCRA state that expires one emission interval after its last write instead of at its
 * theoretical arrival time (a TTL bug of a Redis-backed limiter): a fresh burst right after one.
 */
const earlyExpiry = (inner: Store): Partial<Store> => {
  const now = () => performance.timeOrigin + performance.now();
  const lastWrite = new Map<string, number>();
  const generation = new Map<string, number>();
  const map = (id: string, r: StoreRule): StoreRule => {
    if (r.algorithm !== 'gcra') return r;
    const key = `${id}|${r.digest}`;
    const last = lastWrite.get(key);
    if (last !== undefined && now() - last > r.emissionUs / 1000) {
      generation.set(key, (generation.get(key) ?? 0) + 1);
    }
    return { ...r, digest: `${r.digest}~${generation.get(key) ?? 0}` };
  };
  return {
    acquire: async (r) => {
      const result = await inner.acquire({
        ...r,
        rules: r.rules.map((x) => map(r.id, x)),
        previous: r.previous?.map((x) => map(r.id, x)),
      });
      if (result.granted > 0) for (const x of r.rules) lastWrite.set(`${r.id}|${x.digest}`, now());
      return result;
    },
  };
};

/** One pause for the whole store: pausing one id forgets another's pause. */
const onePauseSlot = (inner: Store): Partial<Store> => {
  let slot: { id: string; until: number } | undefined;
  // The inner store's clock, read by an acquisition that spends nothing.
  const now = async () => (await inner.acquire({ id: 'clock', rules: [], costs: [1], count: 1 })).now;
  return {
    pause: async (id, ms) => {
      const until = Math.max((await now()) + ms, slot?.id === id ? slot.until : 0);
      slot = { id, until };
      return until;
    },
    resume: (id) => {
      if (slot?.id === id) slot = undefined;
    },
    acquire: async (r) => {
      const t = await now();
      if (slot?.id !== r.id || slot.until <= t) return inner.acquire(r);
      return {
        granted: 0,
        retryAfter: slot.until - t,
        blocked: 'pause',
        pausedUntil: slot.until,
        now: t,
        leases: r.lease ? [] : undefined,
      };
    },
  };
};

/** Two stores on one inner store, each keeping pauses of its own (in the process, not shared). */
function localPauses(): () => StoreUnderTest {
  const inner = memoryStore();
  return () => {
    const own = memoryStore();
    const store: Store = {
      acquire: async (r) => {
        const paused = await own.acquire({ ...r, rules: [], costs: [1], count: 1, lease: undefined });
        if (paused.blocked === 'pause') return { ...paused, leases: r.lease ? [] : undefined };
        return inner.acquire(r);
      },
      pause: (id, ms) => own.pause(id, ms),
      resume: (id) => own.resume(id),
      renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
      release: (id, tokens) => inner.release(id, tokens),
    };
    return { store };
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
    expect(await failing(shortens, /› pause ›/)).toEqual([
      expect.stringMatching(/only extends: a shorter pause keeps the longer end/),
      expect.stringMatching(/only extends: after a shorter pause ends, the longer one still blocks/),
    ]);
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
    await expect(wake!.run()).rejects.toThrow(/declared with wake-ups but has none \(no subscribe\(\)/);
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

describe('the conformance suite fails stores that pass every case made one at a time', () => {
  it('a non-atomic acquire (two calls in flight read the same state): the concurrent cases fail', async () => {
    for (const controlled of [true, false]) {
      const cases = collect(broken(nonAtomic, controlled), { controlledClock: controlled, wakeUps: false });
      expect(await failing(cases)).toEqual([
        expect.stringMatching(/concurrent calls on one id › 20 acquisitions at once on one id grant/),
        expect.stringMatching(
          /concurrent calls on one id › 20 lease acquisitions at once hold at most the limit/,
        ),
      ]);
    }
  });

  it('a renewal counted from the grant instead of from now: the real-time renew case fails', async () => {
    const cases = collect(broken(renewFromGrant, false), { wakeUps: false });
    expect(await failing(cases, /renew/)).toEqual([
      expect.stringMatching(/leases › renew extends a held lease to now \+ ttl/),
    ]);
  });

  it('GCRA state that expires one emission interval after a burst: the real-time case fails', async () => {
    const cases = collect(broken(earlyExpiry, false), { wakeUps: false });
    const failed = await failing(cases);
    expect(failed).toEqual([
      expect.stringMatching(/real time \(any store\) › spent budget stays spent over a short wait/),
    ]);
    const error = await cases
      .find((c) => /spent budget stays spent/.test(c.name))!
      .run()
      .catch((e: unknown) => e);
    expect((error as Error).message).toMatch(
      /units granted .* ms \(store clock\) after a burst of 10 at 10 per second/,
    );
  });

  it('one pause for the whole store (pausing one id ends another\'s): "ids are isolated" fails', async () => {
    for (const controlled of [true, false]) {
      const cases = collect(broken(onePauseSlot, controlled), {
        controlledClock: controlled,
        wakeUps: false,
      });
      expect(await failing(cases)).toEqual([
        expect.stringMatching(/ids are isolated: budget, pause and slots/),
      ]);
    }
  });

  it('with `shared`: two stores whose pauses stay in the process fail the two-store case; sound ones pass', async () => {
    const cases = collect(localPauses(), { wakeUps: false, window: false, shared: true });
    expect(await failing(cases, /two stores on one state/)).toEqual([
      expect.stringMatching(/a pause, a budget and leases set through one store hold in the other/),
    ]);
    // Two non-atomic stores on one state over-admit under concurrent calls through both.
    const inner = memoryStore();
    const racing = collect(
      () => ({
        store: {
          acquire: (r) => inner.acquire(r),
          pause: (id, ms) => inner.pause(id, ms),
          resume: (id) => inner.resume(id),
          renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
          release: (id, tokens) => inner.release(id, tokens),
          ...nonAtomic(inner),
        },
      }),
      { wakeUps: false, window: false, shared: true },
    );
    // (The one-store concurrency cases fail too: the race is the same.)
    expect(await failing(racing, /two stores on one state/)).toEqual([
      expect.stringMatching(/20 acquisitions at once through two stores/),
    ]);
    const one = memoryStore();
    const sound = collect(() => ({ store: one }), { wakeUps: false, window: false, shared: true });
    expect(sound.filter((c) => /two stores on one state/.test(c.name))).toHaveLength(2);
    expect(await failing(sound)).toEqual([]);
    // Without `shared`, no two-store case.
    expect(collect(() => ({ store: one })).some((c) => /two stores/.test(c.name))).toBe(false);
  });
});

describe('mistakes in the setup fail with a message that names them', () => {
  it('a store without subscribe() under the default options: pass `wakeUps: false`', async () => {
    const cases = collect(broken(() => ({ subscribe: undefined })));
    const wake = cases.filter((c) => /wake-ups/.test(c.name));
    expect(wake.length).toBeGreaterThan(0);
    for (const c of wake) await expect(c.run()).rejects.toThrow(/pass `wakeUps: false`/);
  });

  it('`advance` or `cleanup` that is not a function: a TypeError naming it', async () => {
    const advance = collect(() => ({ store: memoryStore(), advance: 5 as never }), { controlledClock: true });
    const error = await advance[0]!.run().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toMatch(
      /expected `advance` from makeStore\(\) to be a function or absent, got 5/,
    );
    const cleanup = collect(() => ({ store: memoryStore(), cleanup: 'no' as never }));
    await expect(cleanup[0]!.run()).rejects.toThrow(/`cleanup`.*"no"/);
  });

  it('a store without pause(), resume(), renew() or release(): a TypeError naming the missing methods', async () => {
    const inner = memoryStore();
    const cases = collect(() => ({ store: { acquire: (r: AcquireRequest) => inner.acquire(r) } as never }));
    for (const c of cases.slice(0, 3)) {
      const error = await c.run().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TypeError);
      expect((error as Error).message).toMatch(
        /makeStore\(\) returned a store without pause\(\), resume\(\), renew\(\), release\(\)/,
      );
    }
    // Optional methods may be absent.
    const plain = collect(
      broken(() => ({ subscribe: undefined, windowSend: undefined, windowReport: undefined })),
      {
        wakeUps: false,
      },
    );
    expect(await failing(plain)).toEqual([]);
  });

  it("`advance` wired to another clock than the store's: the first case says so", async () => {
    const cases = collect(
      () => {
        const other = new FakeClock();
        return { store: memoryStore({ clock: new FakeClock() }), advance: (ms: number) => other.advance(ms) };
      },
      { controlledClock: true, wakeUps: false, window: false },
    );
    expect(cases[0]!.name).toMatch(/controlled clock › advance\(1000\) moves the store's clock/);
    await expect(cases[0]!.run()).rejects.toThrow(
      /moved by 0 ms over advance\(1000\).*wired to another clock/,
    );
    // A clock that moves by itself.
    const drifting = collect(() => ({ store: memoryStore(), advance: () => {} }), {
      controlledClock: true,
      wakeUps: false,
      window: false,
    });
    await expect(drifting[0]!.run()).rejects.toThrow(/between two calls without advance\(\)/);
  });

  it('a lease case on a store that grants none fails with a labelled assertion, not a TypeError', async () => {
    // Fewer jobs granted than the case needs leases of: leaseOf() says which lease is missing.
    const fewer = collect(
      broken((inner) => ({
        acquire: async (r: AcquireRequest) => {
          const result = await inner.acquire(r);
          return r.lease ? { ...result, granted: 0, leases: [] } : result;
        },
      })),
      { controlledClock: true },
    );
    const fences = fewer.find((c) => /fences keep growing after every lease/.test(c.name))!;
    const error = await fences.run().catch((e: unknown) => e);
    expect((error as Error).name).toBe('AssertionError');
    expect((error as Error).message).toMatch(
      /the answer holds 0 lease\(s\) \(granted 0, blocked null\), so lease #5 is missing/,
    );
    // Granted jobs without their leases: an answer valve rejects, with valve's message.
    const none = collect(
      broken((inner) => ({
        acquire: async (r: AcquireRequest) => {
          const result = await inner.acquire(r);
          return r.lease ? { ...result, leases: [] } : result;
        },
      })),
      { controlledClock: true },
    );
    const invalid = await none
      .find((c) => /fences keep growing after every lease/.test(c.name))!
      .run()
      .catch((e: unknown) => e);
    expect((invalid as Error).name).toBe('AssertionError');
    expect((invalid as Error).message).toMatch(
      /store\.acquire\(\) returned an invalid result: 5 granted with 0 leases/,
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
