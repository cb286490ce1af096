/*
 * The one internal hook of a valve and of a valve group, for valve/otel (the metrics subpath).
 * Not exported from the package root: valve/otel reaches it through a Symbol.for key, so it
 * works across two copies of the package (ESM and CJS) and costs one null check per job start
 * or rejection while nothing observes. A leaf: it imports only types.
 */
import type { Valve } from './types.js';

/** What a valve tells its observer. Called synchronously from the scheduler: must be cheap and must not throw. */
export interface ValveObserver {
  /**
   * A job started at `now` (the valve's clock, ms). `queuedAt` is when run() queued it, or -1
   * when it was queued before the observer was set.
   */
  started(queuedAt: number, now: number): void;
  /** A job ended without starting, or run() refused the call, with this reason. */
  rejected(reason: unknown): void;
  /**
   * The valve's close() resolved (nothing queued or running any more): called once, after
   * which the valve calls nothing more. The observer may detach itself here.
   */
  closed?(): void;
}

/** What a valve group tells its watcher: each valve as it joins the group and as it leaves it. */
export interface GroupWatcher {
  /** A valve was created for `key` (also called, on set, for every live valve). */
  added(key: string, valve: Valve): void;
  /** The valve of `key` was dropped (evicted after idleTimeout, or closed with the group). */
  removed(key: string, valve: Valve): void;
  /**
   * The group refused a call itself (group.run(), a wrapped fetch: closed group, bad key, bad
   * overrides), before any valve had it, with this reason. `key` is the call's key, or undefined
   * when it is not a valid key (or the key function threw).
   */
  rejected?(key: string | undefined, reason: unknown): void;
  /** The group's close() resolved, after `removed` for each of its valves. The watcher may detach itself here. */
  closed?(): void;
}

/**
 * The key of a valve's method `(observer | null) → previous observer`, and of a group's method
 * `(watcher | null) → previous watcher`.
 */
export const OBSERVE: unique symbol = Symbol.for('valve.observe');

/**
 * The key of a valve group's method `(visit) → void`: calls `visit(key, source)` for each key
 * whose valve the group dropped while the pause it knew lasts (valve/otel's valve.paused).
 */
export const PAUSED_KEYS: unique symbol = Symbol.for('valve.pausedKeys');
