import { AssertionError } from 'node:assert';
import { checkAcquireAnswer } from '../answers.js';
import { describe as describeValue } from '../duration.js';
import type { Rule, StoreRule } from '../rules/rule.js';
import { normalizeRule } from '../rules/rule.js';
import type {
  AcquireRequest,
  AcquireResult,
  Lease,
  MaybePromise,
  Store,
  WindowTicket,
} from '../stores/store.js';
import { expectMs, guarded, type Pending, seconds, sleep, waitFor, within } from './deadlines.js';
import { expect } from './expect.js';

export { expectMs, seconds, sleep, waitFor };

/** What `makeStore` returns: the store, and optionally a controlled clock and a cleanup. */
export interface StoreUnderTest {
  store: Store;
  /**
   * Moves the store's clock forward by exactly `ms` (e.g. a fake clock the store reads).
   * The clock must not move otherwise. Required with `controlledClock: true`.
   */
  advance?: ((ms: number) => MaybePromise<void>) | undefined;
  /** Called after each case, pass or fail (close connections, delete keys). */
  cleanup?: (() => MaybePromise<void>) | undefined;
}

/** Your test runner's `describe`: vitest's, node:test's, jest's or mocha's. */
export type DescribeFunction = (name: string, body: () => void) => unknown;
/** Your test runner's `it` (or `test`): vitest's, node:test's, jest's or mocha's. */
export type TestFunction = (name: string, body: () => Promise<void>) => unknown;

/** What one case sees: a fresh store from `makeStore`, and helpers. */
export interface CaseContext {
  store: Store;
  advance: ((ms: number) => MaybePromise<void>) | undefined;
  /** `store.acquire` with `count` defaulting to `costs.length`. */
  acquire(request: Omit<AcquireRequest, 'count'> & { count?: number }): Promise<AcquireResult>;
  /** Lets time pass: exactly `ms` with a controlled clock, else a real wait of `ms`. */
  pass(ms: number): Promise<void>;
  /** Runs `fn` after the case (before the store's own cleanup). */
  defer(fn: () => MaybePromise<void>): void;
}

/** A case that runs only with `shared: true`: a second store from `makeStore()`, on the same state. */
export interface SharedCaseContext extends CaseContext {
  /** A second store from `makeStore()` (its cleanup runs after the case too). */
  other: Store;
}

/** A case that runs only with a controlled clock: `advance` is there. */
export interface ClockCaseContext extends CaseContext {
  advance: (ms: number) => MaybePromise<void>;
}

/** A fleet-window case: the store's window methods, bound and awaited. */
export interface WindowCaseContext extends CaseContext {
  /** `store.windowSend(id, probeTtl)`. */
  send(id: string, probeTtl?: number): Promise<WindowTicket>;
  /** `store.windowReport(id, seq, remaining, resetMs)`. */
  report(id: string, seq: number, remaining: number, resetMs: number): Promise<number>;
}

/** How case files register their cases; capabilities the store lacks register nothing. */
export interface CaseRegistry {
  describe(name: string, body: () => void): void;
  it(name: string, body: (s: CaseContext) => Promise<unknown>): void;
  /** Registered only with `controlledClock: true`. */
  itClock(name: string, body: (s: ClockCaseContext) => Promise<unknown>): void;
  /** Registered only with `turns: true` and `controlledClock: true`. */
  itTurns(name: string, body: (s: ClockCaseContext) => Promise<unknown>): void;
  /** Registered only with `shared: true`: the case gets a second store from `makeStore()`. */
  itShared(name: string, body: (s: SharedCaseContext) => Promise<unknown>): void;
  /** Registered unless `wakeUps: false`; fails when the store has no `subscribe()`. */
  itWake(name: string, body: (s: CaseContext) => Promise<unknown>): void;
  /**
   * The fleet-window cases (`windowSend`/`windowReport`), registered unless `window: false`.
   * With `window: true` a store without both methods fails them; by default they check a store
   * that has them and pass with nothing to check on one that has neither (valve then keeps no
   * fleet window: its wrapFetch never calls them). One method without the other always fails.
   */
  itWindow(name: string, body: (s: WindowCaseContext) => Promise<unknown>): void;
  /** itWindow, registered only with `controlledClock: true` too. */
  itWindowClock(name: string, body: (s: WindowCaseContext & ClockCaseContext) => Promise<unknown>): void;
  /** A fresh id, unique to this run of the suite (so a shared server can hold many runs). */
  newId(): string;
  /** Whether the controlled-clock cases are registered. */
  readonly controlledClock: boolean;
  /** Whether the wake-up cases are registered. */
  readonly wakeUps: boolean;
  /** Whether the line-of-turns cases are registered (`turns` and `controlledClock`). */
  readonly turns: boolean;
  /** Whether the two-store cases are registered (`shared`). */
  readonly shared: boolean;
  /** Whether the fleet-window cases are registered (unless `window: false`). */
  readonly window: boolean;
}

export const rule = (r: Rule): StoreRule => normalizeRule(r, 'rule');
export const ones = (n: number): number[] => Array.from({ length: n }, () => 1);

/**
 * `store.acquire` with `count` defaulting to `costs.length`, its answer checked as valve checks
 * it (src/answers.ts): an answer valve would reject as a store failure fails the case with
 * valve's own message.
 */
export const acquireOn = async (
  store: Store,
  request: Omit<AcquireRequest, 'count'> & { count?: number },
): Promise<AcquireResult> => {
  const full: AcquireRequest = { ...request, count: request.count ?? request.costs.length };
  const r = await store.acquire(full);
  const invalid = checkAcquireAnswer(r, full.count, full.lease !== undefined);
  if (invalid !== undefined) {
    throw new AssertionError({
      message: `${invalid.message} (to a call for ${full.count} job(s)${full.lease ? ' with leases' : ''}): valve treats such an answer as a failed call (a 'store-error') and grants nothing`,
      actual: r,
      operator: 'checkAcquireAnswer',
    });
  }
  return r;
};

/** What a call did, for a message: "threw RangeError: …" or "nothing was thrown (granted 2)". */
export async function outcomeOf(
  call: () => Promise<AcquireResult>,
): Promise<{ thrown: unknown; what: string }> {
  try {
    const r = await call();
    const granted = (r as Partial<AcquireResult> | null | undefined)?.granted;
    return { thrown: undefined, what: `nothing was thrown (granted ${describeValue(granted)})` };
  } catch (err) {
    const name = err instanceof Error ? err.name : typeof err;
    const message = err instanceof Error ? err.message : describeValue(err);
    return { thrown: err, what: `threw ${name}: ${message}` };
  }
}

/** The lease of the `index`th granted job: a labelled failure when the store granted fewer. */
export function leaseOf(r: AcquireResult, index: number, what = 'the lease'): Lease {
  const lease = r.leases?.[index];
  if (lease === undefined) {
    expect(
      r.leases?.length ?? 0,
      `${what}: the answer holds ${r.leases === undefined ? 'no leases' : `${r.leases.length} lease(s)`} (granted ${r.granted}, blocked ${JSON.stringify(r.blocked)}), so lease #${index + 1} is missing; leases`,
    ).toBeGreaterThan(index);
  }
  return lease!;
}

/** The methods every store has (docs/api.md, "The Store contract"); the others are optional. */
const REQUIRED = ['acquire', 'pause', 'resume', 'renew', 'release'] as const;

// Slow rules: their answers do not change over the few ms a case takes.
/** 3600 per hour, burst 3: one unit per second, three back to back. */
export const hourly3 = rule({ limit: 3600, interval: '1h', burst: 3 });
/** 3 units per aligned hour. */
export const hourlyWindow = rule({ limit: 3, interval: '1h', algorithm: 'fixed-window' });

export interface RegistryOptions {
  name: string;
  /** The deadline (ms) of each store call, makeStore(), advance(), cleanup and deferred work. */
  callTimeout: number;
  /** The deadline (ms) of one case (makeStore() and the case's body; cleanups run after it). */
  caseTimeout: number;
  makeStore: () => MaybePromise<StoreUnderTest>;
  describe: DescribeFunction;
  it: TestFunction;
  controlledClock: boolean;
  wakeUps: boolean;
  turns: boolean;
  /** Two stores from makeStore() share their state: adds the cases that use two. */
  shared: boolean;
  /** true: the store must keep a fleet window; false: no window case; undefined: checked if present. */
  window: boolean | undefined;
}

/** Builds the registry the case files use, on the caller's runner. */
export function createRegistry(options: RegistryOptions): CaseRegistry {
  const { name, makeStore } = options;
  let seq = 0;
  const run = Math.random().toString(36).slice(2, 8);
  const idName = name.replace(/[^A-Za-z0-9_.:-]/g, '_').slice(0, 40);
  const missing = (what: string, hint = ''): Error =>
    new Error(
      `storeContract(${JSON.stringify(name)}): the store was declared with ${what} but has none${hint}`,
    );
  const noClock = () =>
    missing(
      'a controlled clock',
      ' (`controlledClock: true`, but makeStore() returned no `advance`): return `advance(ms)` from makeStore(), or leave `controlledClock` out',
    );

  const prefix = `storeContract(${JSON.stringify(name)})`;

  /** Calls makeStore() (under the call deadline) and checks what it returned: a TypeError naming what is wrong. */
  async function make(
    timed: <T>(what: string, run: () => MaybePromise<T>) => Promise<T>,
  ): Promise<StoreUnderTest> {
    const made: unknown = await timed('makeStore()', makeStore);
    const store = (made as { store?: unknown } | null)?.store;
    if (typeof made !== 'object' || made === null || typeof store !== 'object' || store === null) {
      throw new TypeError(
        `${prefix}: makeStore() must return { store } with a valve Store, got ${describeMade(made)}`,
      );
    }
    const absent = REQUIRED.filter(
      (method) => typeof (store as Record<string, unknown>)[method] !== 'function',
    );
    if (absent.length > 0) {
      throw new TypeError(
        `${prefix}: makeStore() returned a store without ${absent.map((m) => `${m}()`).join(', ')}: a valve Store has acquire(), pause(), resume(), renew() and release() (subscribe(), windowSend(), windowReport() and listening() are optional)`,
      );
    }
    for (const key of ['advance', 'cleanup'] as const) {
      const value = (made as Record<string, unknown>)[key];
      if (value !== undefined && typeof value !== 'function') {
        throw new TypeError(
          `${prefix}: expected \`${key}\` from makeStore() to be a function or absent, got ${describeValue(value)}`,
        );
      }
    }
    return made as StoreUnderTest;
  }

  /**
   * Runs one case on a fresh store, then its deferred work and the store's cleanup, pass or fail.
   *
   * Every store call the suite makes (and makeStore(), advance(), each cleanup and deferred
   * function) must settle within `callTimeout`, and the case (makeStore() and its body) within
   * `caseTimeout`, a little below the runner timeout the docs ask for: a store that never
   * answers fails the case with a message naming the call, and the cleanups run all the same,
   * also when the runner's own timeout gave up on the case first.
   */
  async function runCase<C extends CaseContext>(
    body: (s: C) => Promise<unknown>,
    check: (s: CaseContext) => void,
    two = false,
  ): Promise<void> {
    const { callTimeout, caseTimeout } = options;
    const pending = new Set<Pending>();
    let over = false;
    const timed = <T>(what: string, run: () => MaybePromise<T>): Promise<T> =>
      over
        ? Promise.reject(new Error(`${prefix}: ${what} called after the case ended (it ran out of time)`))
        : within(what, callTimeout, run, pending);
    const deferred: (() => MaybePromise<void>)[] = [];
    const cleanups: (() => MaybePromise<void>)[] = [];
    const work = async () => {
      const made = await make(timed);
      if (made.cleanup) cleanups.push(made.cleanup);
      const store = guarded(made.store, timed);
      const own = made.advance;
      const advance = own && ((ms: number) => timed(`advance(${ms})`, () => own(ms)));
      const s: CaseContext = {
        store,
        advance,
        acquire: async (request) => await acquireOn(store, request),
        pass: async (ms) => {
          if (advance) await advance(ms);
          else await sleep(ms);
        },
        defer: (fn) => {
          deferred.push(fn);
        },
      };
      if (two) {
        const other = await make(timed);
        if (other.cleanup) cleanups.unshift(other.cleanup);
        (s as SharedCaseContext).other = guarded(other.store, timed);
      }
      check(s);
      await body(s as C);
    };
    let failed = false;
    let error: unknown;
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        work(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const waiting = [...pending].map(
              (p) => `${p.what} (called ${seconds(Date.now() - p.since)} ago)`,
            );
            reject(
              new Error(
                `${prefix}: the case did not finish within ${seconds(caseTimeout)} (the suite's \`caseTimeout\`; give your runner a longer timeout than this)${waiting.length > 0 ? `: still waiting for ${waiting.join(', ')}` : ''}`,
              ),
            );
          }, caseTimeout);
        }),
      ]);
    } catch (err) {
      failed = true;
      error = err;
    } finally {
      clearTimeout(timer);
    }
    // A body still running (out of time) makes no more store calls; the ones in flight are let go.
    over = true;
    for (const p of pending) clearTimeout(p.timer);
    pending.clear();
    const last = [
      ...deferred.reverse().map((fn) => ['deferred work of the case', fn] as const),
      ...cleanups.map((fn) => ['cleanup()', fn] as const),
    ];
    for (const [what, fn] of last) {
      try {
        await within(what, callTimeout, fn);
      } catch (err) {
        // The case's own failure is the one to report; a cleanup failure fails a passing case.
        if (!failed) {
          failed = true;
          error = err;
        }
      }
    }
    if (failed) throw error;
  }

  const register = <C extends CaseContext>(
    title: string,
    body: (s: C) => Promise<unknown>,
    check: (s: CaseContext) => void,
  ) => {
    options.it(title, () => runCase(body, check));
  };
  const none = () => {};

  /** Registers a fleet-window case (see CaseRegistry.itWindow). */
  function windowCase<C extends WindowCaseContext>(
    title: string,
    body: (s: C) => Promise<unknown>,
    clock: boolean,
  ): void {
    if (options.window === false || (clock && !options.controlledClock)) return;
    options.it(title, () =>
      runCase(
        async (s: CaseContext) => {
          const { store } = s;
          const hasSend = typeof store.windowSend === 'function';
          const hasReport = typeof store.windowReport === 'function';
          if (hasSend !== hasReport) {
            throw new Error(
              `storeContract(${JSON.stringify(name)}): the store has ${hasSend ? 'windowSend' : 'windowReport'} without ${hasSend ? 'windowReport' : 'windowSend'} (valve uses the fleet window only with both)`,
            );
          }
          if (!hasSend) {
            if (options.window === true) throw missing('a fleet window (windowSend/windowReport)');
            return;
          }
          const w: WindowCaseContext = {
            ...s,
            send: async (id, probeTtl = 2000) => await store.windowSend!(id, probeTtl),
            report: async (id, seqNo, remaining, resetMs) =>
              await store.windowReport!(id, seqNo, remaining, resetMs),
          };
          await body(w as C);
        },
        (s) => {
          if (clock && !s.advance) throw noClock();
        },
      ),
    );
  }

  return {
    describe: (title, body) => {
      options.describe(title, body);
    },
    it: (title, body) => register(title, body, none),
    itClock: (title, body) => {
      if (!options.controlledClock) return;
      register(title, body, (s) => {
        if (!s.advance) throw noClock();
      });
    },
    itTurns: (title, body) => {
      if (!options.turns || !options.controlledClock) return;
      register(title, body, (s) => {
        if (!s.advance) throw noClock();
      });
    },
    itShared: (title, body) => {
      if (!options.shared) return;
      options.it(title, () => runCase(body, none, true));
    },
    itWake: (title, body) => {
      if (!options.wakeUps) return;
      register(title, body, (s) => {
        if (typeof s.store.subscribe !== 'function') {
          throw missing(
            'wake-ups',
            ' (no subscribe(); `wakeUps` is true by default): pass `wakeUps: false` for a store without subscribe()',
          );
        }
      });
    },
    itWindow: (title, body) => windowCase(title, body, false),
    itWindowClock: (title, body) => windowCase(title, body, true),
    // The name as it may stand in an id (no braces, at most 40 characters): any name works.
    newId: () => `contract:${idName}:${run}:${++seq}`,
    controlledClock: options.controlledClock,
    wakeUps: options.wakeUps,
    turns: options.turns && options.controlledClock,
    shared: options.shared,
    window: options.window !== false,
  };
}

/** What makeStore() returned, for the message of a wrong one. */
function describeMade(made: unknown): string {
  if (typeof made !== 'object' || made === null) return String(made);
  const store = (made as { store?: unknown }).store;
  return store === undefined ? 'an object without `store`' : `{ store: ${typeof store} }`;
}
