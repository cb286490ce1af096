import { describe } from './duration.js';
import type { ValveEventName } from './events.js';
import type { FetchLike, WrapFetchOptions } from './feedback/fetch.js';
import type { ValveGroupListener } from './group-events.js';
import { isThenable } from './maybe-promise.js';
import { type ConcurrencyOption, normalizeRules, type ValveOptions } from './options.js';
import type { Rule } from './rules/rule.js';
import { recordOf } from './rulesets.js';
import { checkKnownKeys } from './stores/checks.js';
import type { JobContext, RunOptions, Valve, ValveStats } from './types.js';

/*
 * The public types of a valve group (createValveGroup() is in group.ts), and the checks of what
 * `options(key)` returns.
 */

/** What `options(key)` may return for one key: these options replace the group's for that key. */
export interface ValveOverrides {
  rules?: Rule | readonly Rule[];
  concurrency?: ConcurrencyOption;
  maxWait?: number | string;
}

/** Options of createValveGroup(): every createValve() option but `id`, plus the group's own. */
export interface ValveGroupOptions extends Omit<ValveOptions, 'id'> {
  /**
   * A valve with nothing queued or running for this long is closed and dropped (one holding a
   * pause the store has not confirmed is kept until that pause ends; a confirmed pause stays
   * with the key, for its next valve, until it ends). Default '5m'; Infinity keeps valves until
   * close().
   */
  idleTimeout?: number | string;
  /**
   * Per-key overrides of `rules`, `concurrency` or `maxWait`, asked once when the key's valve is
   * created: a plain object or undefined, synchronously (a Promise is a TypeError). Rules set
   * with `group.valve(key).setRules()` win over these for the key's later valves.
   */
  options?: (key: string) => ValveOverrides | undefined;
}

/** group.wrapFetch() options: wrapFetch's, plus the key of each request. */
export interface GroupFetchOptions<I = string | URL | Request, N = RequestInit>
  extends WrapFetchOptions<I, N> {
  /** The key (the valve) a request goes through, from fetch's arguments. */
  key: (input: I, init: N | undefined) => string;
}

/** A snapshot of a group. Totals count every valve the group ever had; counters only grow. */
export interface ValveGroupStats {
  /** Live valves. */
  size: number;
  /** Valves created (only grows). */
  created: number;
  /** Valves closed and dropped after idleTimeout (only grows). */
  evicted: number;
  /** Live valves with jobs queued or running. */
  busy: number;
  /** Keys paused: live valves that know of a shared pause, and keys dropped while their pause lasts. */
  paused: number;
  /** Jobs queued, and running, in the live valves. */
  queued: number;
  running: number;
  /** Totals over every valve of the group, evicted ones included (as in ValveStats). */
  started: number;
  succeeded: number;
  failed: number;
  /** Also counts the calls the group refused itself (group.run(), a wrapped fetch: CLOSED, a bad key). */
  rejected: number;
  storeErrors: number;
  leasesLost: number;
  /** close() was called. */
  closed: boolean;
}

/** Valves by key, sharing one store: see createValveGroup(). */
export interface ValveGroup {
  /** The valve whose id is `key`: created on first use, the same instance while it lives. Counts as activity. */
  valve(key: string): Valve;
  /** `group.valve(key).run(job, options)`, as one call: never throws, never hits a dropped valve. */
  run<T>(
    key: string,
    job: (ctx: JobContext) => T | PromiseLike<T>,
    options?: RunOptions,
  ): Promise<Awaited<T>>;
  /** Returns fetch where each request goes through the valve of `options.key(input, init)` (see Valve.wrapFetch). */
  wrapFetch<F extends FetchLike = typeof fetch>(
    fetchFn: F | undefined,
    options: GroupFetchOptions<Parameters<F>[0], Parameters<F>[1]>,
  ): F;
  /** Live valves. */
  readonly size: number;
  /** Totals and counts over the valves; O(live valves + dropped paused keys), one small object per live valve. */
  stats(): ValveGroupStats;
  /** Listens to an event of every valve; the listener gets the valve's arguments, then its key. */
  on<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this;
  once<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this;
  off<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this;
  /** Closes every valve (as Valve.close); afterwards every call rejects (or throws) CLOSED. */
  close(options?: { drain?: boolean }): Promise<void>;
}

// ---------------------------------------------------------------- options(key), checked

const OVERRIDES = ['rules', 'concurrency', 'maxWait'];

/**
 * What options(key) returned, checked: a plain object (or undefined, handled by the caller) of
 * known overrides; the ones left undefined are left out. Throws TypeError naming options(key).
 */
export function checkOverrides(value: unknown, key: string): ValveOverrides {
  const name = `options(${JSON.stringify(key)})`;
  if (isThenable(value)) {
    // Never awaited: its rejection must not become an unhandled one besides this error.
    if (value instanceof Promise) value.catch(() => {});
    throw new TypeError(
      `\`${name}\` must return the overrides synchronously, got a Promise: it is called when the key's valve is created, which cannot wait; look the overrides up beforehand (e.g. before group.run())`,
    );
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(
      `Expected \`${name}\` to return an object like { rules, concurrency, maxWait } or undefined, got ${describe(value)}`,
    );
  }
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    const ctor = (proto as { constructor?: { name?: unknown } }).constructor?.name;
    throw new TypeError(
      `Expected \`${name}\` to return a plain object like { rules, concurrency, maxWait } or undefined, got ${typeof ctor === 'string' && ctor !== '' ? `an instance of ${ctor}` : 'an object with a prototype'}`,
    );
  }
  checkKnownKeys(value, OVERRIDES, name);
  // An override left undefined keeps the group's own (`{ rules: special.get(key) }` for an
  // ordinary key must not drop the group's rules).
  const own: Record<string, unknown> = {};
  for (const option of OVERRIDES) {
    const v = (value as Record<string, unknown>)[option];
    if (v !== undefined) own[option] = v;
  }
  return own as ValveOverrides;
}

/**
 * Calls `options(key)` for a key whose valve is being created: its overrides, checked (undefined:
 * none). `asking` holds the keys being asked: options(key) calling the group for the same key
 * (group.valve(key), group.run(key), a wrapped fetch of it) would create a second valve for it,
 * both running the key's jobs; that call is a TypeError instead.
 */
export function askOverrides(
  options: (key: string) => ValveOverrides | undefined,
  key: string,
  asking: Set<string>,
): ValveOverrides | undefined {
  if (asking.has(key)) {
    throw new TypeError(
      `\`options(${JSON.stringify(key)})\` called the group for the key it is asked about, whose valve it is creating: look the overrides up without group.valve(), group.run() or a wrapped fetch of that key`,
    );
  }
  asking.add(key);
  let value: unknown;
  try {
    value = options(key);
  } finally {
    asking.delete(key);
  }
  return value === undefined ? undefined : checkOverrides(value, key);
}

/** A TypeError/RangeError from a key's overrides, naming the key. */
export function overrideError(err: unknown, key: string): unknown {
  const where = ` (in what options(${JSON.stringify(key)}) returned)`;
  if (err instanceof RangeError) return new RangeError(err.message + where, { cause: err });
  if (err instanceof TypeError) return new TypeError(err.message + where, { cause: err });
  return err;
}

/**
 * What a group keeps for a key whose valve's setRules(rules) was called: a plain copy of the
 * rules (the caller may change its objects later); null when they are what the key gets
 * without them (`defaults`: the same digests); undefined for rules setRules() refuses.
 */
export function rulesToKeep(rules: unknown, defaults: unknown): Rule[] | null | undefined {
  let record: string;
  try {
    record = recordOf(normalizeRules(rules).rules);
    if (record === recordOf(normalizeRules(defaults).rules)) return null;
  } catch {
    return undefined;
  }
  const list = (Array.isArray(rules) ? rules : [rules]) as Rule[];
  return list.map(({ limit, interval, algorithm, burst }) => ({ limit, interval, algorithm, burst }));
}

/** Counters of the valves no longer live (evicted, or closed with the group); `rejected` also counts the group's own refusals. */
export type Retired = Pick<
  ValveStats,
  'started' | 'succeeded' | 'failed' | 'rejected' | 'storeErrors' | 'leasesLost'
>;

/** Adds a valve's counters to `into` (the group's totals, or its stats). */
export function addCounters(into: Retired, s: ValveStats): void {
  into.started += s.started;
  into.succeeded += s.succeeded;
  into.failed += s.failed;
  into.rejected += s.rejected;
  into.storeErrors += s.storeErrors;
  into.leasesLost += s.leasesLost;
}

/** Adds a valve's counters and its queued and running jobs to a group's stats. */
export function add(out: ValveGroupStats, s: ValveStats): void {
  out.queued += s.queued;
  out.running += s.running;
  addCounters(out, s);
}
