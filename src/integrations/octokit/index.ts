/**
 * `valve/octokit`: `throttling`, an Octokit plugin that takes @octokit/plugin-throttling's
 * `throttle` options and keeps GitHub's documented limits with valve: one budget per id (and per
 * installation or token with `key`), shared by every process on the same store. A rate-limit
 * answer pauses the budget (in every process) and the request is retried at its place in the
 * queue when the handler says so. See docs/octokit.md.
 *
 * ```ts
 * import { Octokit } from '@octokit/core';
 * import { throttling } from 'valve/octokit';
 *
 * const MyOctokit = Octokit.plugin(throttling);
 * ```
 *
 * This module imports nothing from @octokit/* at run time (one type-only import, for the
 * `throttle` option's types): the Octokit instance and its hook are used as they are handed to
 * the plugin.
 *
 * This file is the plugin's entry (throttling(), ThrottleControl, the `throttle` option's
 * types); the request flow is throttle.ts, the pauses pauses.ts, the waiting primitives
 * waiting.ts, the options options.ts, GitHub's limits limits.ts, its answers answers.ts and the
 * valves lanes.ts.
 */
// Types only (erased): the augmentation below needs the module in the program.
import type {} from '@octokit/core';
import { isEnabled, readSettings } from './options.js';
import { type OctokitLike, Throttle } from './throttle.js';

export type { GitHubLimits, RateLane } from './limits.js';
export { githubLimits } from './limits.js';
export type { LimitHandler, ThrottledRequestOptions, ThrottleOptions } from './options.js';

import type { ThrottleOptions } from './options.js';

/** The installation an Octokit was created for (`auth: { installationId }`), as a key. */
function installationKey(octokitOptions: Record<string, unknown>): string | undefined {
  const auth = octokitOptions.auth as { installationId?: unknown } | null | undefined;
  const installationId = auth !== null && typeof auth === 'object' ? auth.installationId : undefined;
  if (typeof installationId === 'number' || (typeof installationId === 'string' && installationId !== '')) {
    return `installation:${installationId}`;
  }
  return undefined;
}

/**
 * Octokit applies plugins in order and each one's `hook.wrap` goes around the ones before it.
 * @octokit/plugin-retry applied before this plugin (`Octokit.plugin(retry, throttling)`, the order
 * @octokit/plugin-throttling's users know) retries inside valve's wrap: its retries reach GitHub
 * with no grant, and a 429 is retried before valve sees it. Said once per client, as a warning
 * (a framework may fix the order); `retry: { enabled: false }` registers no hook, so no warning.
 */
function warnIfRetryIsOuter(octokit: OctokitLike & { retry?: unknown }, retryOptions: unknown): void {
  const retry = octokit.retry as { retryRequest?: unknown } | null | undefined;
  if (retry === null || typeof retry !== 'object' || typeof retry.retryRequest !== 'function') return;
  if (
    retryOptions !== null &&
    typeof retryOptions === 'object' &&
    (retryOptions as { enabled?: unknown }).enabled === false
  ) {
    return;
  }
  octokit.log?.warn?.(
    'valve/octokit: @octokit/plugin-retry was applied before throttling, so its retries are sent without valve (no grant, no pause). Apply it after: Octokit.plugin(throttling, retry).',
  );
}

/**
 * The Octokit plugin: `Octokit.plugin(throttling)`, configured by the `throttle` option (see
 * ThrottleOptions). Throws, at `new Octokit(…)`, an Error when a handler is missing and a
 * TypeError/RangeError for a bad option.
 */
// biome-ignore lint/suspicious/noExplicitAny: Octokit's own plugin signature
export function throttling(octokit: any, octokitOptions: any): { throttle: ThrottleControl } {
  const options = (octokitOptions ?? {}) as Record<string, unknown>;
  if (!isEnabled(options.throttle)) return { throttle: { close: () => Promise.resolve() } };
  const settings = readSettings(options.throttle);
  warnIfRetryIsOuter(octokit as OctokitLike & { retry?: unknown }, options.retry);
  const throttle = new Throttle(settings, octokit as OctokitLike, installationKey(options));
  (octokit as OctokitLike).hook.wrap('request', (request, requestOptions) =>
    throttle.request(request, requestOptions),
  );
  return { throttle: { close: (closeOptions) => throttle.close(closeOptions) } };
}

/** `octokit.throttle`: what the plugin adds to an Octokit instance. */
export interface ThrottleControl {
  /**
   * Ends this client's throttling: requests not yet sent reject with `ValveError` `CLOSED`, and
   * requests in flight are aborted (they reject `CLOSED` too); with `{ drain: true }` every
   * request is sent and answered first. Resolves once every concurrency lease it held is
   * released in the store. Later requests reject `CLOSED`. Call it before disconnecting a Redis
   * client, so that no lease is left to expire.
   */
  close(options?: { drain?: boolean }): Promise<void>;
}

declare module '@octokit/core' {
  interface OctokitOptions {
    /** valve/octokit's options (see ThrottleOptions); `{ enabled: false }` turns the plugin off. */
    throttle?: ThrottleOptions | (Partial<ThrottleOptions> & { enabled: false });
  }
}
