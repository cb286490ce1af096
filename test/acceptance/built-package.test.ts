/**
 * The public API through the BUILT package, as an outside user sees it.
 *
 * `npm run build` runs once; then every test uses dist/ only: the ESM build through
 * import(), the CommonJS build through require(), both in this process (two copies of
 * the package side by side), and a plain Node child process that resolves the package
 * by its name ('valve') through the exports map, with no test runner in between. A
 * TypeScript consumer is type-checked against the bundled .d.ts / .d.cts.
 *
 * Names and shapes follow /work/shared/design/api.md (createValve, memoryStore,
 * redisStore, ValveError, isValveError, the Store type).
 */
import { execFile, execFileSync } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { Redis as IORedis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const run = promisify(execFile);

// The built package's shape, typed loosely on purpose: these tests look at runtime behaviour.
// biome-ignore lint/suspicious/noExplicitAny: the built module is untyped here on purpose
type Pkg = any;
let esm: Pkg;
let cjs: Pkg;
let outside: string; // a directory outside the package with node_modules/valve → the package
let typecheck: Promise<{ stdout?: string; stderr?: string }>;

beforeAll(async () => {
  execFileSync('npm', ['run', 'build'], { cwd: root, stdio: 'pipe' });
  esm = await import(/* @vite-ignore */ pathToFileURL(join(root, 'dist/index.js')).href);
  cjs = createRequire(import.meta.url)(join(root, 'dist/index.cjs'));
  outside = mkdtempSync(join(tmpdir(), 'valve-outside-'));
  mkdirSync(join(outside, 'node_modules'));
  symlinkSync(root, join(outside, 'node_modules/valve'), 'dir');
  typecheck = startTypecheck();
}, 120_000);

afterAll(async () => {
  await typecheck;
  if (outside) rmSync(outside, { recursive: true, force: true });
});

/** Type-checks a consumer of the built declarations, as an outside TypeScript user (ESM and CJS). */
function startTypecheck(): Promise<{ stdout?: string; stderr?: string }> {
  const consumer = `
    import { createValve, isValveError, memoryStore, redisStore, ValveError, type Store } from 'valve';
    import { storeContract } from 'valve/testing';
    import { instrument, instrumentStore, type Instrumentation } from 'valve/otel';
    import { requestHeader, valveInterceptor, type ValveInterceptorOptions } from 'valve/undici';
    import { valveAdapter, type ValveAdapterOptions } from 'valve/axios';
    import { describe, it } from 'node:test';
    const inner: Store = memoryStore();
    const mine: Store = {
      acquire: (r) => inner.acquire(r),
      pause: (id, ms) => inner.pause(id, ms),
      resume: (id) => inner.resume(id),
      renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
      release: (id, tokens) => inner.release(id, tokens),
    };
    const valve = createValve({ id: 'ts', rules: { limit: 1, interval: '1s' }, store: mine, concurrency: { limit: 2, scope: 'global', leaseTtl: 30_000 } });
    const n: Promise<number> = valve.run(async (ctx) => { ctx.signal.throwIfAborted(); return ctx.lease?.fence ?? 0; }, { cost: 1, priority: 2, maxWait: 1000 });
    const f: (a: string) => Promise<number> = valve.wrap((a: string) => a.length);
    const s = valve.stats();
    const p: number | null = s.pausedUntil;
    const counters: number[] = [s.queued, s.running, s.started, s.rejected];
    void valve.pause({ until: new Date() });
    valve.on('pause', (e) => { const u: number = e.until; void u; });
    void valve.close({ drain: true });
    const e: unknown = undefined;
    if (isValveError(e, 'LEASE_LOST')) { const c: 'QUEUE_FULL' | 'MAX_WAIT' | 'STORE_UNAVAILABLE' | 'LEASE_LOST' | 'CLOSED' = e.code; void c; }
    if (e instanceof ValveError) void e.code;
    void redisStore; void n; void f; void p; void counters;
    // valve/otel with the peer @opentelemetry/api (types from it, as a user has them).
    const handle: Instrumentation = instrument(valve, { attributes: { 'valve.name': 'ts' }, includeId: false });
    handle.stop();
    const timed: Store = instrumentStore(mine, { clock: { now: () => 0 } });
    void timed;
    // valve/testing with node:test's describe and it (vitest's are checked by the project's own tests).
    storeContract('typed', () => ({ store: memoryStore(), cleanup: async () => {} }), { describe, it, wakeUps: true });
    // The subpaths of the integrations, typed against the real undici and axios.
    const io: ValveInterceptorOptions = { valve, retries: 2, match: (r) => requestHeader(r, 'host') !== undefined };
    const interceptor = valveInterceptor(io);
    const ao: ValveAdapterOptions = { valve, adapter: 'http', cost: (config) => (config.method === 'post' ? 5 : 1) };
    const adapter = valveAdapter(ao);
    void interceptor; void adapter;
  `;
  writeFileSync(join(outside, 'consumer.mts'), consumer);
  writeFileSync(join(outside, 'consumer.cts'), consumer);
  const tsc = join(root, 'node_modules/typescript/bin/tsc');
  const args = [
    tsc,
    '--noEmit',
    '--strict',
    '--skipLibCheck',
    '--module',
    'nodenext',
    '--moduleResolution',
    'nodenext',
    '--target',
    'es2022',
    '--types',
    'node',
    '--typeRoots',
    join(root, 'node_modules/@types'),
    'consumer.mts',
    'consumer.cts',
  ];
  return run(process.execPath, args, { cwd: outside }).catch((e) => e);
}

const API_EXPORTS = ['createValve', 'isValveError', 'memoryStore', 'redisStore', 'ValveError'];

/** Settles after `ms` real milliseconds. */
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('the built package (dist/)', () => {
  it('both builds export the names of the API contract, and they are distinct copies', () => {
    for (const pkg of [esm, cjs]) {
      for (const name of API_EXPORTS) expect(typeof pkg[name], name).toBe('function');
    }
    expect(esm.ValveError).not.toBe(cjs.ValveError);
    expect(esm.createValve).not.toBe(cjs.createValve);
  });

  it('instanceof ValveError and isValveError hold across the ESM and CJS copies', async () => {
    for (const [from, to] of [
      [cjs, esm],
      [esm, cjs],
    ] as const) {
      const valve = from.createValve({ id: 'dual', maxQueue: 1 });
      const first = valve.run(() => sleep(5));
      const err = await valve.run(() => 1).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(to.ValveError);
      expect(err).toBeInstanceOf(from.ValveError);
      expect(err).toBeInstanceOf(Error);
      expect(to.isValveError(err)).toBe(true);
      expect(to.isValveError(err, 'QUEUE_FULL')).toBe(true);
      expect(to.isValveError(err, 'CLOSED')).toBe(false);
      expect(err).toMatchObject({ name: 'ValveError', code: 'QUEUE_FULL' });
      await first;
      // A programming error is never a ValveError, in either copy.
      const bad = await valve.run(() => 1, { cost: -1 }).catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(RangeError);
      expect(bad).not.toBeInstanceOf(to.ValveError);
      expect(to.isValveError(bad)).toBe(false);
      expect(to.isValveError(new Error('x'))).toBe(false);
      await valve.close();
    }
    // An error constructed by one copy is recognised by the other.
    const made = new cjs.ValveError('CLOSED', 'closed', { cause: 'c' });
    expect(made).toBeInstanceOf(esm.ValveError);
    expect(made.cause).toBe('c');
    expect({ code: 'CLOSED', name: 'ValveError' }).not.toBeInstanceOf(esm.ValveError);
  });

  it('invalid options throw synchronously: TypeError/RangeError naming the option and the value', () => {
    const cases: [unknown, ErrorConstructor, RegExp[]][] = [
      [{ id: '' }, TypeError, [/`id`/, /0 characters/]],
      [{ id: 'x'.repeat(201) }, TypeError, [/`id`/, /201/]],
      [{ id: 'a{b}' }, TypeError, [/`id`/, /a\{b\}/]],
      [{ id: 42 }, TypeError, [/`id`/, /42/]],
      [{ id: 'x', rules: { limit: 0, interval: '1s' } }, RangeError, [/`rules.limit`/, /got 0/]],
      [
        {
          id: 'x',
          rules: [
            { limit: 1, interval: '1s' },
            { limit: 1.5, interval: 1000 },
          ],
        },
        RangeError,
        [/`rules\[1\].limit`/, /1\.5/],
      ],
      [{ id: 'x', rules: { limit: 1, interval: '2 weeks' } }, RangeError, [/`rules.interval`/, /2 weeks/]],
      [{ id: 'x', rules: { limit: 1, interval: -5 } }, RangeError, [/`rules.interval`/, /-5/]],
      [
        { id: 'x', rules: { limit: 1, interval: '1s', algorithm: 'leaky' } },
        TypeError,
        [/`rules.algorithm`/, /leaky/],
      ],
      [{ id: 'x', rules: { limit: 1, interval: '1s', burst: 0 } }, RangeError, [/`rules.burst`/, /got 0/]],
      [
        { id: 'x', rules: { limit: 5, interval: '1s', algorithm: 'fixed-window', burst: 2 } },
        TypeError,
        [/`rules.burst`/, /fixed-window/],
      ],
      [{ id: 'x', batch: 0 }, RangeError, [/`batch`/, /got 0/]],
      [{ id: 'x', concurrency: 2.5 }, RangeError, [/`concurrency`/, /2\.5/]],
      [
        { id: 'x', concurrency: { limit: 2, scope: 'global', leaseTtl: 999 } },
        RangeError,
        [/`concurrency.leaseTtl`/, /999/, /1000/],
      ],
      [{ id: 'x', concurrency: { limit: 2, scope: 'planet' } }, TypeError, [/`concurrency.scope`/, /planet/]],
      [{ id: 'x', maxQueue: -1 }, RangeError, [/`maxQueue`/, /-1/]],
      [{ id: 'x', maxWait: 0 }, RangeError, [/`maxWait`/, /got 0/]],
      [{ id: 'x', onStoreError: 'ignore' }, TypeError, [/`onStoreError`/, /ignore/]],
      [
        { id: 'x', onStoreError: 'open', concurrency: { limit: 1, scope: 'global' } },
        TypeError,
        [/onStoreError/, /'open'/, /global/],
      ],
      [{ id: 'x', store: {} }, TypeError, [/`store/]],
    ];
    for (const pkg of [esm, cjs]) {
      for (const [options, type, patterns] of cases) {
        let thrown: unknown;
        try {
          pkg.createValve(options);
        } catch (e) {
          thrown = e;
        }
        expect(thrown, JSON.stringify(options)).toBeInstanceOf(type);
        for (const p of patterns) expect((thrown as Error).message, JSON.stringify(options)).toMatch(p);
        expect(pkg.isValveError(thrown)).toBe(false);
      }
    }
  });

  it('accepts every documented option shape', () => {
    const store = esm.memoryStore();
    const shapes = [
      { id: 'github:app-42' },
      { id: 'x'.repeat(200), rules: [] },
      {
        id: 'github:app-42',
        rules: [
          { limit: 10, interval: '1s' },
          { limit: 100, interval: 60_000, burst: 20 },
          { limit: 5000, interval: '1h', algorithm: 'fixed-window' },
        ],
        store,
        concurrency: 4,
        maxQueue: Number.POSITIVE_INFINITY,
        maxWait: Number.POSITIVE_INFINITY,
        batch: 32,
        onStoreError: 'wait',
      },
      { id: 'a', rules: { limit: 1, interval: '250ms' }, concurrency: { limit: 4, scope: 'local' } },
      {
        id: 'a',
        rules: { limit: 1, interval: '1.5s' },
        concurrency: { limit: 4, scope: 'global', leaseTtl: 30_000 },
      },
      {
        id: 'a',
        rules: [
          { limit: 1, interval: '5m' },
          { limit: 1, interval: '1d' },
        ],
        onStoreError: 'throw',
      },
      { id: 'a', onStoreError: 'open', concurrency: 3 },
    ];
    for (const pkg of [esm, cjs]) for (const o of shapes) expect(() => pkg.createValve(o)).not.toThrow();
  });

  it('run(): result, rejection, priority order, wrap(), stats() shape; counters only grow', async () => {
    const valve = esm.createValve({ id: 'run', rules: { limit: 50, interval: '1s' }, concurrency: 1 });
    const order: string[] = [];
    const samples: Record<string, unknown>[] = [];
    const sample = () => samples.push(valve.stats());
    valve.on('idle', sample);
    const jobs = [
      valve.run(() => order.push('first')),
      valve.run(() => order.push('low'), { priority: -1 }),
      valve.run(() => order.push('a')),
      valve.run(() => order.push('high'), { priority: 5 }),
      valve.run(() => order.push('b')),
    ];
    sample();
    const stats = valve.stats();
    expect(stats).toMatchObject({ queued: 5, running: 0, pausedUntil: null, started: 0, rejected: 0 });
    await Promise.all(jobs);
    // Admission happens in a microtask: all five are queued before the first start.
    expect(order).toEqual(['high', 'first', 'a', 'b', 'low']);
    await expect(valve.run(async () => 'value')).resolves.toBe('value');
    const boom = new Error('boom');
    await expect(
      valve.run(() => {
        throw boom;
      }),
    ).rejects.toBe(boom);
    const add = valve.wrap((a: number, b: number) => a + b, { priority: 1 });
    await expect(Promise.all([add(1, 2), add(3, 4)])).resolves.toEqual([3, 7]);
    await valve.run(() => 1, { cost: 0 }).catch(() => {});
    sample();
    const last = valve.stats();
    expect(last).toMatchObject({ queued: 0, running: 0, pausedUntil: null, started: 9, rejected: 1 });
    for (const key of ['queued', 'running', 'started', 'rejected']) expect(typeof last[key]).toBe('number');
    for (let i = 1; i < samples.length; i++) {
      for (const key of ['started', 'rejected'] as const) {
        expect(samples[i]![key] as number).toBeGreaterThanOrEqual(samples[i - 1]![key] as number);
      }
    }
    expect(() => valve.wrap('not a function')).toThrow(TypeError);
    await valve.close();
  });

  it('GCRA spacing on the memory store; a memoryStore instance from one copy shares a budget with the other', async () => {
    const store = cjs.memoryStore();
    // The bound is on the store's clock at admission ("Guarantees"): log each grant's time there.
    // (The job's first line can come later by a stall of the machine, so observed start times
    // are not what is bounded.) The instance stays the CJS copy's own memoryStore.
    const grants: number[] = [];
    const acquire = store.acquire.bind(store);
    store.acquire = (request: Parameters<typeof acquire>[0]) => {
      const result = acquire(request) as { granted: number; now: number };
      if ((request as { id: string }).id === 'shared')
        for (let k = 0; k < result.granted; k++) grants.push(result.now);
      return result as ReturnType<typeof acquire>;
    };
    const rules = { limit: 20, interval: '1s' }; // one start every 50 ms
    const a = esm.createValve({ id: 'shared', rules, store });
    const b = cjs.createValve({ id: 'shared', rules, store });
    const other = esm.createValve({ id: 'other', rules, store });
    const starts: number[] = [];
    const t0 = performance.now();
    const jobs = [];
    for (let i = 0; i < 4; i++) {
      jobs.push(a.run(() => starts.push(performance.now() - t0)));
      jobs.push(b.run(() => starts.push(performance.now() - t0)));
    }
    const otherStart = other.run(() => performance.now() - t0);
    await Promise.all(jobs);
    expect(starts.length).toBe(8);
    expect(grants.length).toBe(8);
    for (let i = 1; i < grants.length; i++) expect(grants[i]! - grants[i - 1]!).toBeGreaterThanOrEqual(50);
    expect(await otherStart).toBeLessThan(40); // another id: its own budget
    for (const v of [a, b, other]) await v.close();
  });

  it('a cost no rule can ever admit rejects at once with a RangeError naming the rule', async () => {
    const valve = cjs.createValve({
      id: 'cost',
      rules: [
        { limit: 10, interval: '1s', burst: 5 },
        { limit: 3, interval: '1m', algorithm: 'fixed-window' },
      ],
    });
    const t0 = performance.now();
    const err = await valve.run(() => 1, { cost: 4 }).catch((e: unknown) => e);
    expect(performance.now() - t0).toBeLessThan(100);
    expect(err).toBeInstanceOf(RangeError);
    expect((err as Error).message).toMatch(/cost/);
    expect((err as Error).message).toMatch(/3 per 60000ms \(fixed-window\)/);
    expect((err as Error).message).toMatch(/got 4/);
    await expect(valve.run(() => 'ok', { cost: 3 })).resolves.toBe('ok');
    await valve.close();
  });

  it('ctx.signal: caller abort before the start rejects with signal.reason and never runs; after the start it aborts ctx.signal', async () => {
    const valve = esm.createValve({ id: 'signal', rules: { limit: 10, interval: '1s' } });
    await valve.run(() => {}); // spend the budget: the next start is 100 ms away
    const before = new AbortController();
    const ran = vi.fn();
    const queued = valve.run(ran, { signal: before.signal });
    const reason = new Error('caller gave up');
    before.abort(reason);
    await expect(queued).rejects.toBe(reason);
    const already = new AbortController();
    already.abort('already');
    await expect(valve.run(ran, { signal: already.signal })).rejects.toBe('already');
    expect(ran).not.toHaveBeenCalled();

    const after = new AbortController();
    const seen = valve.run(
      (ctx: { signal: AbortSignal; lease?: unknown }) =>
        new Promise((resolve) => {
          expect(ctx.lease).toBeUndefined();
          ctx.signal.addEventListener('abort', () => resolve(ctx.signal.reason));
          after.abort('stop now');
        }),
      { signal: after.signal },
    );
    await expect(seen).resolves.toBe('stop now');
    await valve.close();
  });

  it('a user-written Store: ctx.signal aborts when its lease is lost; the job rejects LEASE_LOST once it settles', async () => {
    const inner = cjs.memoryStore();
    // biome-ignore lint/suspicious/noExplicitAny: a plain object implementing the Store contract
    const store: any = {
      acquire: (r: unknown) => inner.acquire(r),
      pause: (id: string, ms: number) => inner.pause(id, ms),
      resume: (id: string) => inner.resume(id),
      renew: async (_id: string, tokens: string[]) => tokens.map(() => false), // the store lost them
      release: (id: string, tokens: string[]) => inner.release(id, tokens),
    };
    const valve = esm.createValve({
      id: 'lost',
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 1000 },
    });
    const lost: unknown[] = [];
    valve.on('lease-lost', (e: unknown) => lost.push(e));
    let reason: unknown;
    const job = valve.run(
      (ctx: { signal: AbortSignal; lease?: { token: string; fence: number } }) =>
        new Promise((resolve) => {
          ctx.signal.addEventListener('abort', () => {
            reason = ctx.signal.reason;
            resolve('finished anyway');
          });
        }),
    );
    const err = await job.catch((e: unknown) => e);
    expect(cjs.isValveError(reason, 'LEASE_LOST')).toBe(true);
    expect(err).toBeInstanceOf(esm.ValveError);
    expect(err).toMatchObject({ code: 'LEASE_LOST' });
    expect(lost).toEqual([expect.objectContaining({ token: expect.any(String), fence: expect.any(Number) })]);
    expect(valve.stats()).toMatchObject({ running: 0, started: 1 });
    await valve.close();
  });

  it('close(): queued jobs reject CLOSED, running ones see ctx.signal abort; close({ drain: true }) runs them first', async () => {
    const valve = esm.createValve({ id: 'close', rules: { limit: 10, interval: '1s' } });
    const running = valve.run(
      (ctx: { signal: AbortSignal }) =>
        new Promise((resolve) => ctx.signal.addEventListener('abort', () => resolve(ctx.signal.reason))),
    );
    await sleep(5);
    const queued = valve.run(() => 'never');
    await valve.close();
    const reason = await running;
    expect(cjs.isValveError(reason, 'CLOSED')).toBe(true);
    const err = await queued.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(cjs.ValveError);
    expect(err).toMatchObject({ code: 'CLOSED' });
    await expect(valve.run(() => 1)).rejects.toMatchObject({ code: 'CLOSED' });

    const draining = cjs.createValve({ id: 'drain', rules: { limit: 50, interval: '1s' } });
    const results = [draining.run(() => 1), draining.run(() => 2), draining.run(() => 3)];
    await draining.close({ drain: true });
    await expect(Promise.all(results)).resolves.toEqual([1, 2, 3]);
    expect(draining.stats()).toMatchObject({ queued: 0, running: 0, started: 3 });
  });

  it('pause({ until: Date }) holds starts, shows in stats().pausedUntil (epoch ms), emits pause; resume() lets them start', async () => {
    const valve = esm.createValve({ id: 'pause' });
    const events: unknown[] = [];
    valve.on('pause', (e: unknown) => events.push(['pause', e]));
    valve.on('resume', (e: unknown) => events.push(['resume', e]));
    const until = new Date(Date.now() + 60_000);
    await valve.pause({ until });
    const paused = valve.stats().pausedUntil;
    expect(typeof paused).toBe('number');
    expect(Math.abs(paused - until.getTime())).toBeLessThan(50);
    let started = false;
    const job = valve.run(() => {
      started = true;
    });
    await sleep(30);
    expect(started).toBe(false);
    await valve.resume();
    await job;
    expect(started).toBe(true);
    expect(valve.stats().pausedUntil).toBeNull();
    expect(events[0]).toEqual(['pause', { until: expect.any(Number), source: 'manual' }]);
    expect(Math.abs((events[0] as [string, { until: number }])[1].until - until.getTime())).toBeLessThan(50);
    expect(events[1]).toEqual(['resume', expect.anything()]);
    await valve.close();
  });

  it('observe() and wrapFetch(): a 429 pauses the valve, the request is retried and its final response returned', async () => {
    const valve = cjs.createValve({ id: 'fetch' });
    const pauses: { until: number; source: string }[] = [];
    const retries: { attempt: number; status: number }[] = [];
    valve.on('pause', (e: { until: number; source: string }) => pauses.push(e));
    valve.on('retry', (e: { attempt: number; status: number }) => retries.push(e));
    const calls: number[] = [];
    const fakeFetch = async (_url: string) => {
      calls.push(performance.now());
      return calls.length === 1
        ? new Response('slow down', { status: 429, headers: { 'retry-after-ms': '60' } })
        : new Response('ok', { status: 200 });
    };
    const fetchThroughValve = valve.wrapFetch(fakeFetch);
    const res = await fetchThroughValve('https://api.example.test/x');
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('ok');
    expect(calls).toHaveLength(2);
    expect(calls[1]! - calls[0]!).toBeGreaterThanOrEqual(55);
    expect(retries).toEqual([expect.objectContaining({ attempt: 1, status: 429 })]);
    expect(pauses).toEqual([
      {
        until: expect.any(Number),
        source: 'retry-after',
        header: 'retry-after-ms',
        model: 'wait',
        detail: expect.anything(),
      },
    ]);

    // observe(): returns what it read at once and writes the pause in the background.
    const reading = valve.observe(new Response(null, { status: 429, headers: { 'retry-after': '30' } }));
    expect(reading).toMatchObject({ waitMs: 30_000 });
    expect(valve.observe(new Response('fine'))).toBeUndefined();
    await sleep(1);
    expect(valve.stats().pausedUntil).toBeGreaterThan(Date.now() + 25_000);
    expect(pauses.at(-1)).toMatchObject({ until: expect.any(Number) });
    await valve.close();
  });

  it("events: no 'error' event; a throwing listener neither crashes the process nor stops the valve", async () => {
    const valve = cjs.createValve({ id: 'events' });
    expect(() => valve.on('error', () => {})).toThrow(TypeError);
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      valve.on('idle', () => {
        throw new Error('listener bug');
      });
      await expect(valve.run(() => 1)).resolves.toBe(1);
      await sleep(1);
      await expect(valve.run(() => 2)).resolves.toBe(2);
      expect(warn).toHaveBeenCalled();
    } finally {
      warn.mockRestore();
    }
    await valve.close();
  });

  it('from a plain Node process outside the package: import and require by name, one instanceof across both', async () => {
    const script = `
      import { createRequire } from 'node:module';
      const require = createRequire(import.meta.url);
      const esm = await import('valve');
      const cjs = require('valve');
      const out = { esmKeys: Object.keys(esm).sort(), cjsKeys: Object.keys(cjs).sort() };
      const v = cjs.createValve({ id: 'outside', maxQueue: 1 });
      const first = v.run(() => new Promise((r) => setTimeout(r, 5)));
      const err = await v.run(() => 1).catch((e) => e);
      out.crossInstanceof = err instanceof esm.ValveError && err instanceof cjs.ValveError;
      out.isValveError = esm.isValveError(err, 'QUEUE_FULL');
      out.sameClass = esm.ValveError === cjs.ValveError;
      await first;
      // A listener that throws, with no 'warning' handler installed: the process must live on.
      v.on('idle', () => { throw new Error('listener bug'); });
      v.on('idle', async () => { throw new Error('async listener bug'); });
      out.after = await v.run(() => 'alive');
      await new Promise((r) => setTimeout(r, 20));
      await v.close();
      console.log(JSON.stringify(out));
    `;
    writeFileSync(join(outside, 'outside.mjs'), script);
    const { stdout, stderr } = await run(process.execPath, ['outside.mjs'], { cwd: outside });
    const out = JSON.parse(stdout.trim().split('\n').pop()!);
    for (const keys of [out.esmKeys, out.cjsKeys]) expect(keys).toEqual(expect.arrayContaining(API_EXPORTS));
    expect(out).toMatchObject({
      crossInstanceof: true,
      isValveError: true,
      sameClass: false,
      after: 'alive',
    });
    expect(stderr).toMatch(/listener/i); // reported as a process warning, not thrown
  });

  it('valve/otel: the package root never loads @opentelemetry/api; without it installed only valve/otel fails to load', async () => {
    for (const file of ['dist/index.js', 'dist/index.cjs', 'dist/testing.js', 'dist/testing.cjs']) {
      expect(readFileSync(join(root, file), 'utf8'), file).not.toMatch(/@opentelemetry/);
    }
    // A project where valve is installed (a copy: no node_modules of this repository to fall back on) and OpenTelemetry is not.
    const bare = mkdtempSync(join(tmpdir(), 'valve-no-otel-'));
    try {
      const pkg = join(bare, 'node_modules/valve');
      mkdirSync(join(pkg, 'dist'), { recursive: true });
      copyFileSync(join(root, 'package.json'), join(pkg, 'package.json'));
      for (const f of ['index.js', 'index.cjs', 'testing.js', 'testing.cjs', 'otel.js', 'otel.cjs']) {
        copyFileSync(join(root, 'dist', f), join(pkg, 'dist', f));
      }
      for (const f of readdirSync(join(root, 'dist')).filter((f) => /^chunk-.*\.js$/.test(f))) {
        copyFileSync(join(root, 'dist', f), join(pkg, 'dist', f));
      }
      const script = `
        import { createRequire } from 'node:module';
        const require = createRequire(import.meta.url);
        const esm = await import('valve');
        const cjs = require('valve');
        const v = esm.createValve({ id: 'bare' });
        const out = { ran: await v.run(() => 'ran'), cjs: typeof cjs.createValve };
        out.esmOtel = await import('valve/otel').then(() => 'loaded', (e) => e.code + ' ' + e.message);
        try { require('valve/otel'); out.cjsOtel = 'loaded'; } catch (e) { out.cjsOtel = e.code + ' ' + e.message; }
        console.log(JSON.stringify(out));
      `;
      writeFileSync(join(bare, 'bare.mjs'), script);
      const { stdout } = await run(process.execPath, ['bare.mjs'], { cwd: bare });
      const out = JSON.parse(stdout.trim());
      expect(out).toMatchObject({ ran: 'ran', cjs: 'function' });
      expect(out.esmOtel).toMatch(/^ERR_MODULE_NOT_FOUND .*@opentelemetry\/api/);
      expect(out.cjsOtel).toMatch(/^MODULE_NOT_FOUND .*@opentelemetry\/api/);
    } finally {
      rmSync(bare, { recursive: true, force: true });
    }
  });

  it('valve/otel (ESM build) instruments a valve of the CJS build: one hook across two copies of the package', async () => {
    const otel = await import(/* @vite-ignore */ pathToFileURL(join(root, 'dist/otel.js')).href);
    const { MeterProvider, MetricReader } = await import('@opentelemetry/sdk-metrics');
    class Reader extends MetricReader {
      protected async onForceFlush() {}
      protected async onShutdown() {}
    }
    const reader = new Reader();
    const provider = new MeterProvider({ readers: [reader] });
    const valve = cjs.createValve({ id: 'two-copies' });
    otel.instrument(valve, { meter: provider.getMeter('valve') });
    await Promise.all([valve.run(() => 1), valve.run(() => 2)]);
    const { resourceMetrics } = await reader.collect();
    const started = resourceMetrics.scopeMetrics
      .flatMap((s) => s.metrics)
      .find((m) => m.descriptor.name === 'valve.job.started');
    expect(started?.dataPoints.map((p) => p.value)).toEqual([2]);
    await valve.close();
    await provider.shutdown();
  });

  it('valve/testing: the conformance suite runs under node:test (ESM and CJS) and vitest from outside, importing no test runner', async () => {
    for (const file of ['dist/testing.js', 'dist/testing.cjs']) {
      expect(readFileSync(join(root, file), 'utf8'), file).not.toMatch(/vitest/);
    }
    // The examples docs/testing.md shows, as an author's project has them.
    copyFileSync(join(root, 'examples/store-contract/node-test.mjs'), join(outside, 'contract.test.mjs'));
    copyFileSync(
      join(root, 'examples/store-contract/vitest.test.mjs'),
      join(outside, 'contract.vitest.test.mjs'),
    );
    writeFileSync(
      join(outside, 'contract.test.cjs'),
      `const { describe, test } = require('node:test');
      const { memoryStore } = require('valve');
      const { storeContract } = require('valve/testing');
      storeContract('memory (cjs)', () => ({ store: memoryStore() }), { describe, it: test, wakeUps: false });`,
    );
    const { stdout } = await run(
      process.execPath,
      ['--test', '--test-reporter=tap', 'contract.test.mjs', 'contract.test.cjs'],
      { cwd: outside },
    ).catch((e: { stdout?: string; stderr?: string }) => {
      throw new Error(`node --test failed:\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
    });
    const count = (what: string) => Number(new RegExp(`^# ${what} (\\d+)$`, 'm').exec(stdout)?.[1]);
    expect(count('fail')).toBe(0);
    expect(count('cancelled')).toBe(0);
    expect(count('skipped')).toBe(0);
    // Every case of the three suites passed: counted by registering them on a runner of our own.
    const testing = await import(/* @vite-ignore */ pathToFileURL(join(root, 'dist/testing.js')).href);
    const cases = (options: object): number => {
      let n = 0;
      testing.storeContract('count', () => ({ store: esm.memoryStore() }), {
        describe: (_: string, body: () => void) => body(),
        it: () => {
          n++;
        },
        ...options,
      });
      return n;
    };
    const expected = cases({}) + cases({ controlledClock: true }) + cases({ wakeUps: false });
    expect(cases({ controlledClock: true })).toBeGreaterThan(cases({}));
    expect(count('pass')).toBe(expected);
    for (const name of ['memory store', 'memory store on a controlled clock', 'memory (cjs)']) {
      expect(stdout).toContain(`Store contract: ${name}`);
    }
    expect(stdout).toMatch(/exact retry hints \(controlled clock\)/);

    // vitest, with no config, from the author's directory (vitest itself linked in as a dependency).
    symlinkSync(join(root, 'node_modules/vitest'), join(outside, 'node_modules/vitest'), 'dir');
    const vitest = await run(
      process.execPath,
      [join(root, 'node_modules/vitest/vitest.mjs'), 'run', 'contract.vitest.test.mjs', '--reporter=json'],
      { cwd: outside, env: { ...process.env, NO_COLOR: '1' } },
    ).catch((e: { stdout?: string; stderr?: string }) => {
      throw new Error(`vitest failed:\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
    });
    const report = JSON.parse(vitest.stdout.slice(vitest.stdout.indexOf('{')));
    expect(report).toMatchObject({ numFailedTests: 0, numPendingTests: 0, numPassedTests: cases({}) });
  }, 60_000);

  it('valve/undici and valve/axios resolve from outside (ESM and CJS), import none of the core, and work with a valve of the other format', async () => {
    for (const entry of ['undici', 'axios']) {
      for (const ext of ['js', 'cjs']) {
        const code = readFileSync(join(root, `dist/${entry}.${ext}`), 'utf8');
        // Only the shared integration helpers: no copy of the scheduler (they reach it through wrapFetch).
        expect(code, `dist/${entry}.${ext}`).not.toMatch(/function (createValve|memoryStore|redisStore)\b/);
        expect(code).not.toMatch(/from ['"]undici['"]|require\(['"]undici['"]\)/);
      }
    }
    const server = await import('node:http').then(({ createServer }) =>
      createServer((req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ path: req.url }));
      }),
    );
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    const port = (server.address() as { port: number }).port;
    const resolveFromRoot = (name: string) => createRequire(join(root, 'package.json')).resolve(name);
    const script = (kind: 'esm' | 'cjs') => `
      ${kind === 'esm' ? "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);" : ''}
      const { createValve } = ${kind === 'esm' ? "await import('valve')" : "require('valve')"};
      // The other format's subpaths: they drive the valve through its public wrapFetch only.
      const { valveInterceptor } = ${kind === 'esm' ? "require('valve/undici')" : "await import('valve/undici')"};
      const { valveAdapter } = ${kind === 'esm' ? "require('valve/axios')" : "await import('valve/axios')"};
      const { Agent, request } = require(${JSON.stringify(resolveFromRoot('undici'))});
      const axios = require(${JSON.stringify(resolveFromRoot('axios'))});
      const valve = createValve({ id: 'outside' });
      const agent = new Agent().compose(valveInterceptor({ valve }));
      const viaUndici = await request('http://127.0.0.1:${port}/u', { dispatcher: agent });
      const viaAxios = await axios.create({ adapter: valveAdapter({ valve }) }).get('http://127.0.0.1:${port}/a');
      console.log(viaUndici.statusCode, JSON.stringify(await viaUndici.body.json()), viaAxios.data.path, valve.stats().started);
      await valve.close();
      await agent.close();
    `;
    try {
      writeFileSync(join(outside, 'subpaths.mjs'), script('esm'));
      writeFileSync(join(outside, 'subpaths.cjs'), `(async () => {${script('cjs')}})();`);
      for (const file of ['subpaths.mjs', 'subpaths.cjs']) {
        const { stdout } = await run(process.execPath, [file], { cwd: outside });
        expect(stdout.trim(), file).toBe('200 {"path":"/u"} /a 2');
      }
    } finally {
      server.close();
    }
  }, 60_000);

  it('valve/octokit resolves from outside (ESM and CJS) and loads no @octokit package itself', async () => {
    const script = `
      import { createRequire } from 'node:module';
      const esm = await import('valve/octokit');
      const cjs = createRequire(import.meta.url)('valve/octokit');
      console.log(JSON.stringify({ esm: typeof esm.throttling, cjs: typeof cjs.throttling, core: esm.githubLimits.core[0].limit }));
    `;
    writeFileSync(join(outside, 'octokit.mjs'), script);
    const { stdout } = await run(process.execPath, ['octokit.mjs'], { cwd: outside });
    expect(JSON.parse(stdout.trim())).toEqual({ esm: 'function', cjs: 'function', core: 5000 });
    for (const file of ['dist/octokit.js', 'dist/octokit.cjs']) {
      expect(readFileSync(join(root, file), 'utf8')).not.toMatch(/(require\(|from |import\()\s*["']@octokit/);
    }
  });

  it('the package ships dist/ (both entries, ESM, CJS, types), built by prepack on a fresh clone or git install', async () => {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    expect(pkg.scripts.prepack).toBe('npm run build');
    // The file list npm packs (prepack itself is skipped here: dist/ was built in beforeAll).
    const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root });
    const files: string[] = JSON.parse(stdout)[0].files.map((f: { path: string }) => f.path);
    for (const entry of ['index', 'testing', 'otel', 'undici', 'axios', 'octokit']) {
      for (const ext of ['js', 'cjs', 'd.ts', 'd.cts']) expect(files).toContain(`dist/${entry}.${ext}`);
    }
    expect(files.filter((f) => !f.startsWith('dist/')).sort()).toEqual([
      'CHANGELOG.md',
      'LICENSE',
      'README.md',
      'package.json',
    ]);
    // The command: bin → an executable ESM file with a node shebang (tested in test/cli/).
    expect(pkg.bin).toEqual({ valve: './dist/cli.js' });
    expect(files).toContain('dist/cli.js');
    expect(readFileSync(join(root, 'dist/cli.js'), 'utf8').split('\n', 1)[0]).toBe('#!/usr/bin/env node');
    const help = await run(join(outside, 'node_modules/valve/dist/cli.js'), ['--help'], { cwd: outside });
    expect(help.stdout).toMatch(/^Usage: valve <command>/);
  });

  it('type-checks a TypeScript consumer (ESM and CJS) against the bundled declarations, Store type included', async () => {
    // Started in beforeAll, right after the build, so it overlaps the other tests.
    const result = await typecheck;
    expect(`${result.stdout ?? ''}${result.stderr ?? ''}`).toBe('');
  });
});

describe('the built package over Redis (redisStore with an ioredis client)', () => {
  let clients: IORedis[] = [];
  const connect = () => {
    const { host, port } = sharedRedis();
    const client = new IORedis({ host, port, lazyConnect: false, maxRetriesPerRequest: 1 });
    clients.push(client);
    return client;
  };
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.quit().catch(() => {})));
    clients = [];
  });

  it('an ESM valve and a CJS valve on two connections share one GCRA budget (same server, prefix, id, rules)', async () => {
    const prefix = uniquePrefix('built');
    const rules = { limit: 20, interval: '1s' };
    // Bounds are stated on the store's clock at admission: record it for every grant.
    const grants: number[] = [];
    // biome-ignore lint/suspicious/noExplicitAny: a recording wrapper around the built store
    const recording = (store: any) => ({
      acquire: async (r: unknown) => {
        const result = await store.acquire(r);
        for (let i = 0; i < result.granted; i++) grants.push(result.now);
        return result;
      },
      pause: (id: string, ms: number) => store.pause(id, ms),
      resume: (id: string) => store.resume(id),
      renew: (id: string, t: string[], ttl: number) => store.renew(id, t, ttl),
      release: (id: string, t: string[]) => store.release(id, t),
    });
    const a = esm.createValve({
      id: 'api:1',
      rules,
      store: recording(esm.redisStore({ client: connect(), prefix })),
    });
    const b = cjs.createValve({
      id: 'api:1',
      rules,
      store: recording(cjs.redisStore({ client: connect(), prefix })),
    });
    const jobs = [];
    for (let i = 0; i < 5; i++)
      jobs.push(
        a.run(() => 'a'),
        b.run(() => 'b'),
      );
    await Promise.all(jobs);
    expect(grants).toHaveLength(10);
    grants.sort((x, y) => x - y);
    // Redis TIME spaces the grants one emission (50 ms) apart, whichever copy asked.
    for (let i = 1; i < grants.length; i++)
      expect(grants[i]! - grants[i - 1]!).toBeGreaterThanOrEqual(49.999);
    expect(a.stats().started + b.stats().started).toBe(10);
    await Promise.all([a.close(), b.close()]);
  });

  it("valve/otel's instrumentStore keeps the Redis store's promise-free acquire, in either format and across them", async () => {
    const { MeterProvider } = await import('@opentelemetry/sdk-metrics');
    const provider = new MeterProvider();
    const otelEsm = await import(/* @vite-ignore */ pathToFileURL(join(root, 'dist/otel.js')).href);
    const otelCjs = createRequire(import.meta.url)(join(root, 'dist/otel.cjs'));
    const withForm = Symbol.for('valve.acquireWith');
    for (const [name, core, otel] of [
      ['esm', esm, otelEsm],
      ['cjs', cjs, otelCjs],
      ['cjs valve, esm otel', cjs, otelEsm],
    ] as const) {
      const wrapped = otel.instrumentStore(
        core.redisStore({ client: connect(), prefix: uniquePrefix('builtotel') }),
        {
          meter: provider.getMeter('valve'),
        },
      );
      // Count which form of the wrapper's acquire the valve calls.
      const calls = { promise: 0, callback: 0 };
      const { acquire } = wrapped;
      const callbackForm = acquire[withForm];
      // biome-ignore lint/suspicious/noExplicitAny: the built store's request
      const spy = (request: any) => {
        calls.promise++;
        return acquire.call(wrapped, request);
      };
      if (typeof callbackForm === 'function') {
        Object.defineProperty(spy, withForm, {
          // biome-ignore lint/suspicious/noExplicitAny: the built store's callback form
          value(this: unknown, ...args: any[]) {
            calls.callback++;
            return callbackForm.apply(this, args);
          },
        });
      }
      wrapped.acquire = spy;
      const valve = core.createValve({
        id: 'otel-form',
        rules: { limit: 1000, interval: '1s' },
        store: wrapped,
      });
      await Promise.all([1, 2, 3, 4, 5].map((i) => valve.run(() => i)));
      expect(calls, name).toMatchObject({ promise: 0 });
      expect(calls.callback, name).toBeGreaterThan(0);
      await valve.close();
    }
    await provider.shutdown();
  });

  it('global concurrency: ctx.lease { token, fence } with growing fences, the limit across copies, leases released on close', async () => {
    const prefix = uniquePrefix('builtlease');
    const concurrency = { limit: 2, scope: 'global', leaseTtl: 3000 };
    const a = esm.createValve({
      id: 'lease',
      concurrency,
      store: esm.redisStore({ client: connect(), prefix }),
    });
    const b = cjs.createValve({
      id: 'lease',
      concurrency,
      store: cjs.redisStore({ client: connect(), prefix }),
    });
    let active = 0;
    let peak = 0;
    const leases: { token: string; fence: number }[] = [];
    const perValve: number[][] = [[], []];
    const job = (which: number) => async (ctx: { lease?: { token: string; fence: number } }) => {
      active++;
      peak = Math.max(peak, active);
      leases.push({ token: ctx.lease!.token, fence: ctx.lease!.fence });
      perValve[which]!.push(ctx.lease!.fence);
      await sleep(30);
      active--;
    };
    const jobs = [];
    for (let i = 0; i < 4; i++) jobs.push(a.run(job(0)), b.run(job(1)));
    await Promise.all(jobs);
    expect(peak).toBeLessThanOrEqual(2);
    expect(leases).toHaveLength(8);
    for (const l of leases) {
      expect(typeof l.token).toBe('string');
      expect(Number.isSafeInteger(l.fence)).toBe(true);
    }
    expect(new Set(leases.map((l) => l.token)).size).toBe(8);
    const fences = leases.map((l) => l.fence);
    expect(new Set(fences).size).toBe(8);
    // Each valve sees its fences grow in start order.
    for (const seen of perValve) expect(seen).toEqual([...seen].sort((x, y) => x - y));
    await Promise.all([a.close(), b.close()]);
    const redis = connect();
    expect(await redis.zcard(`${prefix}:{lease}:leases`)).toBe(0);
  });

  it("the default prefix is 'valve' and every key of a valve lives under the hash tag {id}", async () => {
    const id = `acc-${uniquePrefix('id').replace(/:/g, '-')}`;
    const valve = cjs.createValve({
      id,
      rules: [
        { limit: 5, interval: '250ms' },
        { limit: 9, interval: '250ms', algorithm: 'fixed-window' },
      ],
      concurrency: { limit: 1, scope: 'global', leaseTtl: 1000 },
      store: cjs.redisStore({ client: connect() }),
    });
    const redis = connect();
    let during: string[] = [];
    await valve.run(async () => {
      during = await redis.keys(`*${id}*`);
    });
    await valve.pause(200);
    const after = await redis.keys(`*${id}*`);
    await valve.close();
    const all = [...new Set([...during, ...after])];
    expect(all.length).toBeGreaterThanOrEqual(4); // two rules, the leases, the pause
    for (const key of all) expect(key.startsWith(`valve:{${id}}:`)).toBe(true);
    expect(all.filter((k) => k.startsWith(`valve:{${id}}:r:`))).toHaveLength(2); // one key per rule (digest)
    for (const key of all) expect(await redis.pttl(key)).not.toBe(-1); // every key expires
  });

  it('a pause written by one copy stops the other (shared pause); resume() lets it start', async () => {
    const prefix = uniquePrefix('builtpause');
    const a = esm.createValve({ id: 'p', store: esm.redisStore({ client: connect(), prefix }) });
    const b = cjs.createValve({ id: 'p', store: cjs.redisStore({ client: connect(), prefix }) });
    await a.pause(60_000);
    expect(a.stats().pausedUntil).toBeGreaterThan(Date.now() + 50_000);
    let started = false;
    const job = b.run(() => {
      started = true;
    });
    await sleep(100);
    expect(started).toBe(false);
    expect(b.stats().pausedUntil).toBeGreaterThan(Date.now() + 50_000);
    await a.resume();
    await b.resume(); // b cached the pause; its own resume (or the pause's end) lets it go
    await job;
    expect(started).toBe(true);
    await Promise.all([a.close(), b.close()]);
  });
});
