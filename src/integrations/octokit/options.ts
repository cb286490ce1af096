import { describe } from '../../duration.js';
import { checkId, checkKnownKeys, MAX_ID_CHARACTERS } from '../../stores/checks.js';
import type { Store } from '../../stores/store.js';
import { type GitHubLimits, LANE_SUFFIX } from './limits.js';

/** The request options a handler receives (Octokit's endpoint options; `request.retryCount` counts retries). */
export interface ThrottledRequestOptions {
  method: string;
  url: string;
  baseUrl?: string;
  headers?: Record<string, unknown>;
  request?: { retryCount?: number; signal?: AbortSignal | null; [option: string]: unknown };
  [parameter: string]: unknown;
}

/**
 * Called on a rate-limit answer with GitHub's wait in seconds, the request's options, the Octokit
 * instance and how many times this request was retried already. Return true to retry.
 */
// biome-ignore lint/suspicious/noExplicitAny: the Octokit instance is typed by the caller's own Octokit class
export type LimitHandler<O = any> = (
  retryAfter: number,
  options: ThrottledRequestOptions,
  octokit: O,
  retryCount: number,
) => unknown;

/** `throttle` options: @octokit/plugin-throttling's, plus valve's own (`store`, `key`, `limits`, `maxWait`). */
export interface ThrottleOptions {
  /** `false` turns the plugin off (the handlers are then not required). Default true. */
  enabled?: boolean;
  /** Names the budget: Octokit instances with the same id on the same store share GitHub's limits. Default 'github'. */
  id?: string;
  /** Primary limit answers (remaining 0, GraphQL RATE_LIMITED). Required. */
  onRateLimit: LimitHandler;
  /** Secondary limit answers (GitHub's message, a retry-after on a 403 or 429, any 429). Required. */
  onSecondaryRateLimit: LimitHandler;
  /** Milliseconds per second of `retryAfter`: the wait is `retryAfter × retryAfterBaseValue`. Default 1000. */
  retryAfterBaseValue?: number;
  /** Seconds to wait after a secondary limit answer without `retry-after`. Default 60. */
  fallbackSecondaryRateRetryAfter?: number;
  /** Where the budget lives: a redisStore() shares it between processes. Default: one memory store per process. */
  store?: Store;
  /**
   * The key of a request, appended to `id` (`<id>:<key>`): one budget per token or installation.
   * Default: `installation:<auth.installationId>` when the Octokit was created with one, else none.
   */
  // biome-ignore lint/suspicious/noExplicitAny: the Octokit instance is typed by the caller's own Octokit class
  key?: (options: ThrottledRequestOptions, octokit: any) => string | undefined;
  /** GitHub's limits to keep (each field replaces the default of that lane), or a function of the budget id. */
  limits?: GitHubLimits | ((id: string) => GitHubLimits | undefined);
  /** How long a request may wait for its start (ms or a duration string); then it rejects MAX_WAIT. Default Infinity. */
  maxWait?: number | string;
  /** @octokit/plugin-throttling's Redis key TTL: accepted and unused (valve's keys expire by themselves). */
  timeout?: number;
  /** Deprecated in @octokit/plugin-throttling: accepted and unused. */
  minimalSecondaryRateRetryAfter?: number;
}

/** Options after validation. */
export interface Settings {
  readonly id: string;
  readonly onRateLimit: LimitHandler;
  readonly onSecondaryRateLimit: LimitHandler;
  readonly retryAfterBaseValue: number;
  readonly fallbackSecondaryRateRetryAfter: number;
  readonly store: Store | undefined;
  readonly key: ThrottleOptions['key'];
  readonly limits: ThrottleOptions['limits'];
  readonly maxWait: number | string | undefined;
}

const KNOWN = [
  'enabled',
  'id',
  'onRateLimit',
  'onSecondaryRateLimit',
  'retryAfterBaseValue',
  'fallbackSecondaryRateRetryAfter',
  'store',
  'key',
  'limits',
  'maxWait',
  'timeout',
  'minimalSecondaryRateRetryAfter',
];

/** Bottleneck-only options of @octokit/plugin-throttling and what replaces them. */
const REPLACED: Record<string, string> = {
  connection: 'pass `store: redisStore({ client })` to share the budget between processes',
  Bottleneck: 'valve needs no Bottleneck; pass `store: redisStore({ client })` for clustering',
  write: 'set `limits.content` and `limits.rest` (rules) instead of a Bottleneck group',
  search: 'set `limits.search` (rules) instead of a Bottleneck group',
  notifications: 'set `limits.content` (rules) instead of a Bottleneck group',
};

const HANDLERS_MESSAGE = `valve/octokit: You must pass the onSecondaryRateLimit and onRateLimit error handlers.
  const octokit = new MyOctokit({
    throttle: {
      onRateLimit: (retryAfter, options, octokit, retryCount) => retryCount < 2,
      onSecondaryRateLimit: (retryAfter, options, octokit, retryCount) => retryCount < 2,
    },
  });`;

/** Whether the plugin is on (checked before anything else, as plugin-throttling does). */
export function isEnabled(throttle: unknown): boolean {
  if (throttle === null || typeof throttle !== 'object') return true;
  const enabled = (throttle as { enabled?: unknown }).enabled;
  if (enabled === undefined) return true;
  if (typeof enabled !== 'boolean') {
    throw new TypeError(`Expected \`throttle.enabled\` to be a boolean, got ${describe(enabled)}`);
  }
  return enabled;
}

function nonNegative(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const expected = `Expected \`throttle.${name}\` to be a non-negative finite number, got`;
  if (typeof value !== 'number') throw new TypeError(`${expected} ${describe(value)}`);
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${expected} ${String(value)}`);
  return value;
}

/** Checks the `throttle` options of an enabled plugin. Throws Error (missing handlers), TypeError or RangeError. */
export function readSettings(throttle: unknown): Settings {
  const t = (throttle ?? {}) as Partial<ThrottleOptions> & Record<string, unknown>;
  if (typeof t !== 'object') {
    throw new TypeError(`Expected \`throttle\` to be an object, got ${describe(throttle)}`);
  }
  if (typeof t.onRateLimit !== 'function' || typeof t.onSecondaryRateLimit !== 'function') {
    // The same Error (not TypeError) as plugin-throttling, so code that checks for it still does.
    throw new Error(HANDLERS_MESSAGE);
  }
  for (const [name, instead] of Object.entries(REPLACED)) {
    if (t[name] !== undefined) {
      throw new TypeError(
        `\`throttle.${name}\` is a Bottleneck option of @octokit/plugin-throttling: ${instead}`,
      );
    }
  }
  checkKnownKeys(t, KNOWN, 'throttle');
  const id = t.id === undefined ? 'github' : t.id;
  checkId(id, 'throttle.id');
  // The rate lanes' valves are named `<id>:<lane>` (`:code_search` the longest): checked here,
  // not at the first request.
  const longest = `${id}:${LANE_SUFFIX.codeSearch}`;
  if ([...longest].length > MAX_ID_CHARACTERS) {
    throw new TypeError(
      `Expected \`throttle.id\` to be at most ${MAX_ID_CHARACTERS - LANE_SUFFIX.codeSearch.length - 1} characters long (valve/octokit appends ':${LANE_SUFFIX.codeSearch}' and the like), got ${[...(id as string)].length} characters`,
    );
  }
  if (t.key !== undefined && typeof t.key !== 'function') {
    throw new TypeError(
      `Expected \`throttle.key\` to be a function of the request options returning a string, got ${describe(t.key)}`,
    );
  }
  if (t.store !== undefined && (t.store === null || typeof t.store !== 'object')) {
    throw new TypeError(`Expected \`throttle.store\` to be a valve Store, got ${describe(t.store)}`);
  }
  if (
    t.limits !== undefined &&
    typeof t.limits !== 'function' &&
    (t.limits === null || typeof t.limits !== 'object')
  ) {
    throw new TypeError(
      `Expected \`throttle.limits\` to be an object like { core: { limit: 15000, interval: '1h' } } or a function of the id, got ${describe(t.limits)}`,
    );
  }
  return {
    id,
    onRateLimit: t.onRateLimit,
    onSecondaryRateLimit: t.onSecondaryRateLimit,
    retryAfterBaseValue: nonNegative(t.retryAfterBaseValue, 'retryAfterBaseValue', 1000),
    fallbackSecondaryRateRetryAfter: nonNegative(
      t.fallbackSecondaryRateRetryAfter,
      'fallbackSecondaryRateRetryAfter',
      60,
    ),
    store: t.store,
    key: t.key,
    limits: t.limits,
    maxWait: t.maxWait,
  };
}
