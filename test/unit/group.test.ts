import { describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { createValveGroup, type ValveGroupOptions } from '../../src/group.js';
import { inspectMemoryStore, type MemoryStoreContents, memoryStore } from '../../src/stores/memory.js';
import type { Store } from '../../src/stores/store.js';
import { spyMemoryStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

const T = 60_000;

function group(options: Omit<ValveGroupOptions, 'clock'> = {}, clock = new FakeClock()) {
  const store = spyMemoryStore(clock);
  const g = createValveGroup({ idleTimeout: T, store, clock, ...options });
  return { clock, store, group: g };
}

const contents = (store: Store): MemoryStoreContents =>
  (store as unknown as { [inspectMemoryStore](): MemoryStoreContents })[inspectMemoryStore]();

describe('createValveGroup: creation and reuse', () => {
  it('valve(key) is the valve whose id is key, the same instance while it lives', async () => {
    const { group: g, store } = group({ rules: { limit: 10, interval: '1s' } });
    const a = g.valve('github:installation-1');
    expect(a.id).toBe('github:installation-1');
    expect(g.valve('github:installation-1')).toBe(a);
    const b = g.valve('github:installation-2');
    expect(b).not.toBe(a);
    expect(g.size).toBe(2);
    await expect(g.run('github:installation-1', () => 'done')).resolves.toBe('done');
    expect(a.stats().started).toBe(1);
    expect(g.size).toBe(2);
    // Every valve of the group calls the one store.
    const ids = store.calls.filter((c) => c.op === 'acquire').map((c) => (c.args[0] as { id: string }).id);
    expect(ids).toEqual(['github:installation-1']);
  });

  it('run() creates the valve of a new key on first use', async () => {
    const { group: g } = group();
    await g.run('k1', () => 1);
    await g.run('k2', () => 2);
    expect(g.size).toBe(2);
    expect(g.stats()).toMatchObject({ size: 2, created: 2, started: 2, succeeded: 2, evicted: 0 });
  });

  it('keys follow the id rules: a bad key is a TypeError naming `key`, from valve(), run() and wrapFetch()', async () => {
    const { group: g } = group();
    expect(() => g.valve(42 as unknown as string)).toThrow(/Expected `key` to be a string of 1 to 200/);
    expect(() => g.valve('a{b}')).toThrow(TypeError);
    expect(() => g.valve('')).toThrow(/`key`/);
    await expect(g.run('x'.repeat(201), () => 1)).rejects.toThrow(/`key` to be 1 to 200 characters/);
    const f = g.wrapFetch(async (_url: string) => ({ status: 200, headers: new Headers() }), {
      key: () => 'x\ud800',
    });
    await expect(f('https://example.test/')).rejects.toThrow(/`key` to be well-formed Unicode/);
    expect(g.size).toBe(0);
  });

  it('the group makes one private memory store for all its valves when none is given', async () => {
    const clock = new FakeClock();
    const g = createValveGroup({ rules: { limit: 1, interval: 10 * T }, clock, idleTimeout: T });
    await expect(g.run('k', () => 'a')).resolves.toBe('a');
    clock.advance(T);
    expect(g.size).toBe(0);
    // The valve created for the key after the first was dropped finds its spent budget.
    const b = track(g.run('k', () => 'b'));
    await flushMicrotasks();
    expect(b.done).toBe(false);
    await clock.tickAsync(9 * T);
    expect(b.ok).toBe(true);
    await g.close();
  });
});

describe('createValveGroup: a valve closed by hand', () => {
  it('is dropped once its work is done: the key gets a new valve, the counters carry over', async () => {
    const { group: g, clock } = group({ rules: { limit: 10, interval: '1s' } });
    const first = g.valve('k');
    let finish = () => {};
    const running = track(g.run('k', () => new Promise<string>((r) => (finish = () => r('done')))));
    await clock.tickAsync(0);
    expect(first.stats().running).toBe(1);
    const closing = track(first.close({ drain: true }));
    // While it drains, the key's runs reject CLOSED (its valve is closing).
    await expect(g.run('k', () => 'late')).rejects.toMatchObject({ code: 'CLOSED' });
    expect(g.valve('k')).toBe(first);
    finish();
    await clock.tickAsync(0);
    expect(running.value).toBe('done');
    expect(closing.done).toBe(true);
    // Done: the next use creates a new valve for the key.
    const again = track(g.run('k', () => 'again'));
    await clock.tickAsync(100); // the same id's budget: 100 ms after the first start
    expect(again.value).toBe('again');
    const second = g.valve('k');
    expect(second).not.toBe(first);
    expect(g.size).toBe(1);
    expect(g.stats()).toMatchObject({ size: 1, started: 2, succeeded: 2 });
    await g.close();
  });
});

describe('createValveGroup: eviction waits for the work of a valve closed by hand', () => {
  it('a drain longer than idleTimeout runs to its end: nothing is cut short, the key runs no second valve', async () => {
    const { group: g, clock } = group({ concurrency: 1, idleTimeout: 1000 });
    const v = g.valve('k');
    let finish = () => {};
    const results = [
      track(g.run('k', () => new Promise<string>((r) => (finish = () => r('done'))))),
      track(g.run('k', () => 'q1')),
      track(g.run('k', () => 'q2')),
    ];
    await clock.tickAsync(0);
    const closing = track(v.close({ drain: true }));
    await clock.tickAsync(5000); // five idle timeouts pass while it drains
    expect(results[0]!.done).toBe(false);
    await expect(g.run('k', () => 'late')).rejects.toMatchObject({ code: 'CLOSED' });
    finish();
    await clock.tickAsync(0);
    expect(results.map((r) => r.value)).toEqual(['done', 'q1', 'q2']);
    expect(closing.done).toBe(true);
    await g.close();
    expect(g.stats()).toMatchObject({ started: 3, succeeded: 3, rejected: 1, failed: 0 });
  });

  it("an evicted valve's counters join the totals when its close() ends: a release failing meanwhile is counted", async () => {
    const clock = new FakeClock();
    const inner = memoryStore({ clock });
    const down = new Error('release down');
    const store: Store = {
      acquire: (r) => inner.acquire(r),
      pause: (id, ms, by) => inner.pause(id, ms, by),
      resume: (id) => inner.resume(id),
      renew: (id, t, ttl) => inner.renew(id, t, ttl),
      // Fails 50 ms later: after the job settled, while the valve is evicted.
      release: () => new Promise((_, reject) => clock.setTimeout(() => reject(down), 50)),
    };
    const g = createValveGroup({
      store,
      clock,
      idleTimeout: 10,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 3000 },
    });
    const heard: unknown[] = [];
    g.on('store-error', (err, _context, key) => heard.push([err, key]));
    expect(await g.run('k', () => 'ran')).toBe('ran');
    await clock.tickAsync(20); // evicted, its release still in flight
    expect(g.size).toBe(0);
    expect(g.stats()).toMatchObject({ evicted: 1, started: 1, succeeded: 1 });
    await clock.tickAsync(50);
    expect(heard).toEqual([[down, 'k']]);
    expect(g.stats()).toMatchObject({ evicted: 1, started: 1, succeeded: 1, storeErrors: 1 });
    await g.close();
    expect(g.stats()).toMatchObject({ started: 1, succeeded: 1, storeErrors: 1 });
  });
});

describe('createValveGroup: per-key overrides', () => {
  it('options(key) replaces rules, concurrency and maxWait for that key, asked once per valve', async () => {
    const asked: string[] = [];
    const { group: g, clock } = group({
      rules: { limit: 1, interval: '1h', algorithm: 'fixed-window' },
      options: (key) => {
        asked.push(key);
        return key.startsWith('enterprise:')
          ? { rules: { limit: 3, interval: '1h', algorithm: 'fixed-window' }, concurrency: 2, maxWait: '1s' }
          : undefined;
      },
    });
    const runs = (key: string) => Array.from({ length: 4 }, () => track(g.run(key, () => undefined)));
    const small = runs('free:1');
    const big = runs('enterprise:1');
    await flushMicrotasks();
    expect(small.filter((r) => r.done).length).toBe(1);
    expect(big.filter((r) => r.ok).length).toBe(3);
    g.valve('enterprise:1');
    expect(asked).toEqual(['free:1', 'enterprise:1']);
    // enterprise:1's maxWait is 1 s; free:1 waits without limit.
    await clock.tickAsync(1001);
    expect(big[3]!.error).toMatchObject({ code: 'MAX_WAIT' });
    expect(small[1]!.done).toBe(false);
    await g.close();
  });

  it('an override left undefined keeps the group’s own (rules, concurrency, maxWait)', async () => {
    const special = new Map([['vip', { limit: 3, interval: '1h', algorithm: 'fixed-window' as const }]]);
    const { group: g, clock } = group({
      rules: { limit: 1, interval: '1h', algorithm: 'fixed-window' },
      concurrency: 1,
      maxWait: '1s',
      options: (key) => ({ rules: special.get(key), concurrency: undefined, maxWait: undefined }),
    });
    const runs = (key: string) => Array.from({ length: 4 }, () => track(g.run(key, () => undefined)));
    const plain = runs('plain');
    const vip = runs('vip');
    await flushMicrotasks();
    // The group's 1 per hour for the plain key, the override's 3 for vip.
    expect(plain.filter((r) => r.ok).length).toBe(1);
    expect(vip.filter((r) => r.ok).length).toBe(3);
    // The group's maxWait (1 s) still applies to both.
    await clock.tickAsync(1001);
    expect(plain[1]!.error).toMatchObject({ code: 'MAX_WAIT' });
    expect(vip[3]!.error).toMatchObject({ code: 'MAX_WAIT' });
    await g.close();
  });

  it('a bad override is a TypeError/RangeError naming the key and the option, thrown where the valve is created', async () => {
    const { group: g } = group({
      rules: { limit: 10, interval: '1s' },
      options: (key) => {
        if (key === 'zero') return { rules: { limit: 0, interval: '1s' } };
        if (key === 'typo') return { rule: [] } as never;
        if (key === 'odd') return 5 as never;
        if (key === 'conc') return { concurrency: -1 };
        return {};
      },
    });
    await expect(g.run('zero', () => 1)).rejects.toThrow(RangeError);
    await expect(g.run('zero', () => 1)).rejects.toThrow(/`rules.limit`.*got 0.*options\("zero"\)/);
    expect(() => g.valve('typo')).toThrow(
      /Unknown option `rule`; options\("typo"\) takes `rules`, `concurrency` and `maxWait`/,
    );
    expect(() => g.valve('odd')).toThrow(/Expected `options\("odd"\)` to return an object/);
    expect(() => g.valve('conc')).toThrow(/`concurrency`.*options\("conc"\)/);
    expect(g.size).toBe(0);
    expect(g.valve('fine').id).toBe('fine');
  });
});

describe('createValveGroup: eviction', () => {
  it('a valve with nothing queued or running for idleTimeout is closed and dropped', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const { group: g } = group({ rules: { limit: 10, interval: '1s' }, store }, clock);
    const v = g.valve('k');
    await g.run('k', () => undefined);
    clock.advance(T - 1);
    expect(g.size).toBe(1);
    clock.advance(1);
    expect(g.size).toBe(0);
    expect(g.stats()).toMatchObject({ size: 0, evicted: 1, started: 1, succeeded: 1 });
    await flushMicrotasks();
    expect(v.stats().closed).toBe(true);
    expect(g.stats()).toMatchObject({ size: 0, evicted: 1, started: 1, succeeded: 1 });
    // Nothing left in the process for that key: no timer, no subscription.
    expect(clock.pending).toBe(0);
    expect(contents(store).subscribers).toBe(0);
  });

  it('a job running longer than idleTimeout keeps its valve; it is dropped idleTimeout after the job ends', async () => {
    const { group: g, clock } = group();
    let finish!: () => void;
    const job = track(g.run('long', () => new Promise<void>((r) => (finish = r))));
    const v = g.valve('long');
    await clock.tickAsync(3 * T);
    expect(g.size).toBe(1);
    expect(g.valve('long')).toBe(v);
    await clock.tickAsync(1000);
    finish();
    await flushMicrotasks();
    expect(job.ok).toBe(true);
    await clock.tickAsync(T - 1);
    expect(g.size).toBe(1);
    await clock.tickAsync(1);
    expect(g.size).toBe(0);
  });

  it('a queued job keeps its valve too (waiting on the rule)', async () => {
    const { group: g, clock } = group({ rules: { limit: 1, interval: 5 * T } });
    const first = track(g.run('k', () => 1));
    const second = track(g.run('k', () => 2));
    await clock.tickAsync(T + 1);
    expect(first.ok).toBe(true);
    expect(second.done).toBe(false);
    expect(g.size).toBe(1);
    await clock.tickAsync(4 * T);
    expect(second.ok).toBe(true);
    await clock.tickAsync(T);
    expect(g.size).toBe(0);
  });

  it('valve(key) counts as activity; run() on a kept reference after its eviction rejects CLOSED', async () => {
    const { group: g, clock } = group();
    const v = g.valve('k');
    clock.advance(T - 10);
    expect(g.valve('k')).toBe(v); // moves its deadline
    clock.advance(T - 10);
    expect(g.size).toBe(1);
    clock.advance(10);
    expect(g.size).toBe(0);
    const late = await v.run(() => 1).catch((e: unknown) => e);
    expect(isValveError(late, 'CLOSED')).toBe(true);
    // The group gives a new valve for the key.
    expect(g.valve('k')).not.toBe(v);
    await expect(g.run('k', () => 2)).resolves.toBe(2);
  });

  it('one timer for the whole group, whatever the number of keys; none once every valve is dropped', async () => {
    const { group: g, clock } = group({ rules: { limit: 100, interval: '1s', burst: 100 } });
    for (let i = 0; i < 1000; i++) g.valve(`key-${i}`);
    expect(clock.pending).toBe(1);
    await Promise.all(Array.from({ length: 1000 }, (_, i) => g.run(`key-${i}`, () => i)));
    await flushMicrotasks();
    expect(clock.pending).toBe(1);
    expect(g.size).toBe(1000);
    // Keys used later are dropped later: the timer follows the oldest.
    clock.advance(T / 2);
    for (let i = 0; i < 10; i++) await g.run(`key-${i}`, () => i);
    await flushMicrotasks();
    clock.advance(T / 2);
    expect(g.size).toBe(10);
    expect(clock.pending).toBe(1);
    clock.advance(T / 2);
    expect(g.size).toBe(0);
    expect(clock.pending).toBe(0);
  });

  it('idleTimeout: Infinity keeps every valve until close()', async () => {
    const { group: g, clock } = group({ idleTimeout: Number.POSITIVE_INFINITY });
    g.valve('k');
    expect(clock.pending).toBe(0);
    clock.advance(365 * 86_400_000);
    expect(g.size).toBe(1);
    await g.close();
  });
});

describe('createValveGroup: wrapFetch', () => {
  it('each request goes through the valve of its key; a 429 retries in that valve', async () => {
    const { group: g, clock } = group({ rules: { limit: 100, interval: '1s', burst: 100 } });
    const seen: string[] = [];
    let fail = 1;
    const fetchFn = async (input: string) => {
      seen.push(input);
      if (input.includes('/b/') && fail-- > 0) {
        return new Response('slow down', { status: 429, headers: { 'retry-after-ms': '10' } });
      }
      return new Response('ok', { status: 200 });
    };
    const f = g.wrapFetch(fetchFn, { key: (input) => `portal:${input.split('/')[3]}`, retries: 2 });
    const retries: string[] = [];
    g.on('retry', (_event, key) => retries.push(key));
    const all = Promise.all([
      f('https://api.test/a/1'),
      f('https://api.test/b/1'),
      f('https://api.test/a/2'),
    ]);
    await clock.tickAsync(100);
    const [r1, r2, r3] = await all;
    expect([r1.status, r2.status, r3.status]).toEqual([200, 200, 200]);
    expect(g.size).toBe(2);
    expect(g.valve('portal:a').stats().started).toBe(2);
    expect(g.valve('portal:b').stats().started).toBe(2);
    expect(retries).toEqual(['portal:b']);
    expect(seen).toHaveLength(4);
  });

  it('checks its options when called: key must be a function; wrapFetch options as on a valve', () => {
    const { group: g } = group();
    const fetchFn = async () => new Response('');
    expect(() => g.wrapFetch(fetchFn, undefined as never)).toThrow(/group.wrapFetch\(\) `options`/);
    expect(() => g.wrapFetch(fetchFn, { key: 'k' } as never)).toThrow(/Expected `key` to be a function/);
    expect(() => g.wrapFetch(fetchFn, { key: () => 'k', retries: -1 })).toThrow(RangeError);
    expect(() => g.wrapFetch(fetchFn, { key: () => 'k', retry: 1 } as never)).toThrow(
      /Unknown option `retry`/,
    );
    expect(() => g.wrapFetch(42 as never, { key: () => 'k' })).toThrow(/`fetch`/);
  });

  it('a key function that throws rejects the request', async () => {
    const { group: g } = group();
    const boom = new Error('no key');
    const f = g.wrapFetch(async (_url: string) => new Response(''), {
      key: () => {
        throw boom;
      },
    });
    await expect(f('https://x.test/')).rejects.toBe(boom);
  });
});

describe('createValveGroup: events', () => {
  it("a group listener hears every valve's event, with the key last", async () => {
    const { group: g } = group();
    const pauses: [number, string][] = [];
    const idles: string[] = [];
    const onPause = (event: { until: number }, key: string) => pauses.push([event.until, key]);
    g.valve('before'); // created before the listener: attached to it too
    g.on('pause', onPause);
    g.on('idle', (key) => idles.push(key));
    await g.valve('before').pause(1000);
    await g.valve('after').pause(2000);
    expect(pauses.map(([, key]) => key)).toEqual(['before', 'after']);
    await g.run('x', () => 1);
    await flushMicrotasks();
    expect(idles).toEqual(['x']);
    g.off('pause', onPause);
    await g.valve('before').pause(3000);
    expect(pauses).toHaveLength(2);
  });

  it("once() hears one event; 'error' is no event; a throwing listener becomes a warning", async () => {
    const { group: g } = group();
    const keys: string[] = [];
    g.once('idle', (key) => keys.push(key));
    await g.run('a', () => 1);
    await g.run('b', () => 1);
    await flushMicrotasks();
    expect(keys).toEqual(['a']);
    expect(() => g.on('error' as never, () => {})).toThrow(/no 'error' event/);
    expect(() => g.on('idle', 'x' as never)).toThrow(/`listener`/);
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    g.on('idle', () => {
      throw new Error('listener bug');
    });
    await g.run('c', () => 1);
    await flushMicrotasks();
    await new Promise((r) => setImmediate(r));
    process.off('warning', onWarning);
    expect(warnings.some((w) => w.name === 'ValveListenerError')).toBe(true);
  });
});

describe('createValveGroup: close', () => {
  it('closes every valve; then run() rejects, valve() throws and wrapped fetch rejects CLOSED', async () => {
    const { group: g, clock } = group({ rules: { limit: 1, interval: '1h' } });
    const a = g.valve('a');
    await g.run('a', () => 1);
    const queued = track(g.run('a', () => 2));
    const f = g.wrapFetch(async (_url: string) => new Response(''), { key: () => 'b' });
    await f('https://x.test/');
    await g.close();
    expect(queued.error).toMatchObject({ code: 'CLOSED' });
    expect(a.stats().closed).toBe(true);
    expect(g.stats()).toMatchObject({ closed: true, size: 0, started: 2 });
    expect(clock.pending).toBe(0);
    await expect(g.run('a', () => 1)).rejects.toMatchObject({ code: 'CLOSED' });
    expect(() => g.valve('a')).toThrow(/The valve group is closed/);
    await expect(f('https://x.test/')).rejects.toMatchObject({ code: 'CLOSED' });
    // close() again: the same promise.
    expect(g.close()).toBe(g.close());
  });

  it('close({ drain: true }) lets queued jobs run first', async () => {
    const { group: g, clock } = group({ rules: { limit: 1, interval: '1s' } });
    const jobs = [track(g.run('a', () => 1)), track(g.run('a', () => 2))];
    const closed = track(g.close({ drain: true }));
    await clock.tickAsync(1000);
    expect(jobs.map((j) => j.ok)).toEqual([true, true]);
    expect(closed.ok).toBe(true);
    await expect(g.close({ drain: 'yes' } as never)).rejects.toThrow(TypeError);
  });
});

describe('createValveGroup: options', () => {
  it('bad options throw TypeError/RangeError naming the option', () => {
    const clock = new FakeClock();
    expect(() => createValveGroup(null as never)).toThrow(/createValveGroup\(\) options/);
    expect(() => createValveGroup({ id: 'x' } as never)).toThrow(
      /Unknown option `id`; a valve group names each valve by its key/,
    );
    expect(() => createValveGroup({ idle: 1 } as never)).toThrow(
      /Unknown option `idle`; createValveGroup\(\) takes/,
    );
    expect(() => createValveGroup({ idleTimeout: 0 })).toThrow(RangeError);
    expect(() => createValveGroup({ idleTimeout: '5 minutes' })).toThrow(/`idleTimeout`/);
    expect(() => createValveGroup({ idleTimeout: '400d' })).toThrow(/`idleTimeout` to be at most 365 days/);
    expect(() => createValveGroup({ options: {} as never })).toThrow(/`options` to be a function/);
    expect(() => createValveGroup({ rules: { limit: -1, interval: '1s' } })).toThrow(/`rules.limit`/);
    expect(() =>
      createValveGroup({ concurrency: { limit: 2, scope: 'global' }, onStoreError: 'open' }),
    ).toThrow(TypeError);
    expect(() => createValveGroup({ clock, idleTimeout: '5m', store: memoryStore({ clock }) })).not.toThrow();
  });

  it('the default idleTimeout is 5 minutes', () => {
    const clock = new FakeClock();
    const g = createValveGroup({ clock });
    g.valve('k');
    clock.advance(300_000 - 1);
    expect(g.size).toBe(1);
    clock.advance(1);
    expect(g.size).toBe(0);
  });
});
