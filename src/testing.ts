/**
 * `valve/testing`: the Store conformance suite, for authors of their own `Store`.
 *
 * It registers its cases on the test runner you hand it (vitest, node:test, jest, mocha: any
 * runner with `describe(name, fn)` and `it(name, async fn)`), and checks with node:assert only,
 * so it imports no test runner itself. valve runs its own stores (memory, Redis and Valkey
 * through every client, standalone and cluster) through this same export.
 *
 * ```ts
 * import { describe, it } from 'node:test'; // or from 'vitest'
 * import { storeContract } from 'valve/testing';
 *
 * storeContract('my store', () => ({ store: myStore() }), { describe, it });
 * ```
 */
import { describe } from './duration.js';
import type { MaybePromise } from './stores/store.js';
import { admissionCases } from './testing/admission.js';
import { clockCases } from './testing/clock.js';
import { leaseCases } from './testing/leases.js';
import { pauseCases } from './testing/pauses.js';
import { realTimeCases } from './testing/realtime.js';
import { sharingCases } from './testing/sharing.js';
import {
  createRegistry,
  type DescribeFunction,
  type StoreUnderTest,
  type TestFunction,
} from './testing/suite.js';
import { turnCases } from './testing/turns.js';
import { windowCases } from './testing/windows.js';

export type { DescribeFunction, StoreUnderTest, TestFunction } from './testing/suite.js';

/** The runner to register the cases on, and what the store under test can do. */
export interface StoreContractOptions {
  /** Your runner's `describe`. */
  describe: DescribeFunction;
  /** Your runner's `it` (or `test`). */
  it: TestFunction;
  /**
   * `makeStore` returns `advance`, and the store's clock moves only when `advance` is called.
   * Adds the exact-time cases (retry hints to the µs, pause ends, lease expiry hints, fences
   * after a long idle). Default false.
   */
  controlledClock?: boolean;
  /**
   * The store implements `subscribe()`: adds the wake-up cases. Default true: pass `false` for a
   * store without `subscribe()`.
   */
  wakeUps?: boolean;
  /**
   * The store keeps a line of turns (`AcquireRequest.turn`, docs/architecture.md "Turns"), like
   * valve's memory and Redis stores: adds its cases, which need `controlledClock: true` (without
   * it, storeContract() throws a TypeError). Default false: a store may ignore `turn`.
   */
  turns?: boolean;
  /**
   * Two stores from two `makeStore()` calls share their state, as two processes on one server
   * do (e.g. two clients of one database with the same key prefix): adds the cases that make
   * two stores in one case and check that pauses, budgets and leases are shared, also under
   * concurrent calls. Default false (each `makeStore()` may return a store of its own, like
   * `memoryStore()`).
   */
  shared?: boolean;
  /**
   * The fleet window (`windowSend`/`windowReport`, which wrapFetch uses when a store has both).
   * Default: its cases check a store that has them and have nothing to check on one that has
   * neither. `true`: the store must keep one (a store without fails them). `false`: no case.
   */
  window?: boolean;
  /**
   * How long (ms) each store call the suite makes may take to settle, and `makeStore()`,
   * `advance()`, `cleanup()` too: past it the case fails naming the call ("store.acquire() did
   * not settle within 5 s"). Default 5000.
   */
  callTimeout?: number;
  /**
   * How long (ms) one case may take (`makeStore()` and its checks): past it the case fails,
   * naming the store calls still in flight, after its cleanups ran. Keep it below your runner's
   * timeout per test (the runner's own timeout does not let the suite say why). Default 9000,
   * below the 10 s the docs ask the runner for.
   */
  caseTimeout?: number;
}

const OPTIONS = [
  'describe',
  'it',
  'controlledClock',
  'wakeUps',
  'turns',
  'shared',
  'window',
  'callTimeout',
  'caseTimeout',
];

/** The deadlines without options: a call 5 s, a case 9 s (the docs ask the runner for 10 s). */
const CALL_TIMEOUT = 5000;
const CASE_TIMEOUT = 9000;

function check(name: unknown, makeStore: unknown, options: unknown): asserts options is StoreContractOptions {
  if (typeof name !== 'string')
    throw new TypeError(`Expected \`name\` to be a string, got ${describe(name)}`);
  if (typeof makeStore !== 'function') {
    throw new TypeError(`Expected \`makeStore\` to be a function, got ${describe(makeStore)}`);
  }
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(
      `Expected \`options\` to be an object with your test runner's \`describe\` and \`it\`, got ${describe(options)}`,
    );
  }
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!OPTIONS.includes(key)) {
      throw new TypeError(
        `Unknown option \`${key}\`; storeContract() takes \`describe\`, \`it\`, \`controlledClock\`, \`wakeUps\`, \`turns\`, \`shared\`, \`window\`, \`callTimeout\` and \`caseTimeout\``,
      );
    }
  }
  for (const key of ['describe', 'it'] as const) {
    if (typeof o[key] !== 'function') {
      throw new TypeError(
        `Expected \`${key}\` to be your test runner's ${key} function, got ${describe(o[key])}`,
      );
    }
  }
  for (const key of ['controlledClock', 'wakeUps', 'turns', 'shared', 'window'] as const) {
    if (o[key] !== undefined && typeof o[key] !== 'boolean') {
      throw new TypeError(`Expected \`${key}\` to be a boolean, got ${describe(o[key])}`);
    }
  }
  for (const key of ['callTimeout', 'caseTimeout'] as const) {
    const value = o[key];
    // setTimeout's largest delay: 2^31 − 1 ms (about 24.8 days).
    if (value !== undefined && (typeof value !== 'number' || !(value > 0) || value > 2_147_483_647)) {
      throw new TypeError(
        `Expected \`${key}\` to be a number of ms from 1 to 2147483647, got ${describe(value)}`,
      );
    }
  }
  if (o.turns === true && o.controlledClock !== true) {
    throw new TypeError(
      'Expected `controlledClock: true` with `turns: true`: the line-of-turns cases are exact-time cases, so without a controlled clock none would run. Return `advance(ms)` from makeStore() and pass `controlledClock: true`, or leave `turns` out',
    );
  }
}

/**
 * Registers the Store conformance suite under `describe('Store contract: <name>')`.
 *
 * `makeStore` runs once per case (twice in the `shared` cases) and returns a fresh store (it may
 * share a server: every case uses fresh random ids); a store without `acquire`, `pause`,
 * `resume`, `renew` or `release` fails every case with a `TypeError` naming them. A capability
 * declared in `options` that the store lacks fails its cases; a capability not declared
 * registers no case (nothing is skipped at run time), but for two that valve uses whenever a
 * store has them: the fleet window, whose cases by default check the store's
 * `windowSend`/`windowReport` when it has them, and `listening(id)`, checked (with `wakeUps`)
 * when the store has it.
 * Most cases take a few ms. Without a controlled clock eight wait real time: "renew extends a
 * held lease" 1.65 s, "a pause ends by itself" 0.5 s, "spent budget stays spent" 0.3 s,
 * "fixed and sliding windows of 100 ms" 0.1 s, four others under 0.1 s (and the fleet window's
 * real-time case 0.15 s); the wake-up cases wait up to 5 s for a subscription to become active.
 * Every store call must settle within `callTimeout` (5 s) and each case finish within
 * `caseTimeout` (9 s), or the case fails naming the call; its cleanups run either way. Give
 * each test a runner timeout of at least 10 s (above `caseTimeout`).
 */
export function storeContract(
  name: string,
  makeStore: () => MaybePromise<StoreUnderTest>,
  options: StoreContractOptions,
): void {
  check(name, makeStore, options);
  const registry = createRegistry({
    name,
    makeStore,
    describe: options.describe,
    it: options.it,
    controlledClock: options.controlledClock === true,
    wakeUps: options.wakeUps !== false,
    turns: options.turns === true,
    shared: options.shared === true,
    window: options.window,
    callTimeout: options.callTimeout ?? CALL_TIMEOUT,
    caseTimeout: options.caseTimeout ?? CASE_TIMEOUT,
  });
  registry.describe(`Store contract: ${name}`, () => {
    clockCases(registry);
    admissionCases(registry);
    realTimeCases(registry);
    pauseCases(registry);
    leaseCases(registry);
    sharingCases(registry);
    turnCases(registry);
    windowCases(registry);
  });
}
