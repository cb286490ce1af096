import type { ValveEventName } from './events.js';
import type { FetchLike, WrapFetchOptions } from './feedback/fetch.js';
import type { ValveGroupListener } from './group-events.js';
import type { ConcurrencyOption, ValveOptions } from './options.js';
import type { Rule } from './rules/rule.js';
import type { JobContext, RunOptions, Valve } from './types.js';

/* The public types of a valve group (createValveGroup() is in group.ts). */

/** What `options(key)` may return for one key: these options replace the group's for that key. */
export interface ValveOverrides {
  rules?: Rule | readonly Rule[];
  concurrency?: ConcurrencyOption;
  maxWait?: number | string;
}

/** Options of createValveGroup(): every createValve() option but `id`, plus the group's own. */
export interface ValveGroupOptions extends Omit<ValveOptions, 'id'> {
  /** A valve with nothing queued or running for this long is closed and dropped. Default '5m'; Infinity keeps valves until close(). */
  idleTimeout?: number | string;
  /** Per-key overrides of `rules`, `concurrency` or `maxWait`, asked once when the key's valve is created. */
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
  /** Live valves that know of a shared pause. */
  paused: number;
  /** Jobs queued, and running, in the live valves. */
  queued: number;
  running: number;
  /** Totals over every valve of the group, evicted ones included (as in ValveStats). */
  started: number;
  succeeded: number;
  failed: number;
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
  /** Totals and counts over the valves; O(live valves), one small object per live valve. */
  stats(): ValveGroupStats;
  /** Listens to an event of every valve; the listener gets the valve's arguments, then its key. */
  on<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this;
  once<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this;
  off<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this;
  /** Closes every valve (as Valve.close); afterwards every call rejects (or throws) CLOSED. */
  close(options?: { drain?: boolean }): Promise<void>;
}
