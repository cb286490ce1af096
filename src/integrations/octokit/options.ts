import { describe } from '../../duration.js';
import { waitOption } from '../../options.js';
import { checkId, checkKnownKeys, MAX_ID_CHARACTERS } from '../../stores/checks.js';
import type { Store } from '../../stores/store.js';
import { type GitHubLimits, LANE_SUFFIX, RATE_LANES } from './limits.js';

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
  /**
   * How long a request may wait for its start (ms or a duration string), all its waits together
   * (pauses, the concurrency limit, every lane's rules); then it rejects MAX_WAIT. Each attempt
   * (a retry after a rate-limit answer is a new one) has its own. Default Infinity.
   */
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
  /** ms, or Infinity. */
  readonly maxWait: number;
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
  if (t.limits !== undefined && typeof t.limits !== 'function') {
    if (t.limits === null || typeof t.limits !== 'object' || Array.isArray(t.limits)) {
      throw new TypeError(
        `Expected \`throttle.limits\` to be an object like { core: { limit: 15000, interval: '1h' } } or a function of the budget id, got ${describe(t.limits)}`,
      );
    }
    checkLimits(t.limits, '`throttle.limits`');
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
    maxWait: t.maxWait === undefined ? Number.POSITIVE_INFINITY : waitOption(t.maxWait, 'throttle.maxWait'),
  };
}

/** The fields `throttle.limits` takes: the rate lanes and `concurrency`. */
const LIMIT_NAMES: readonly string[] = [...RATE_LANES, 'concurrency'];

/**
 * Checks the fields of a limits object (`name` says whose: the option, or what its function
 * returned): an unknown one is a TypeError listing the valid ones, so that a typo (`coer`) or
 * GitHub's resource name (`code_search`) is not silently ignored. The rules themselves are
 * checked by the valves.
 */
function checkLimits(limits: object, name: string): void {
  for (const field of Object.keys(limits)) {
    if (LIMIT_NAMES.includes(field)) continue;
    const camel = field.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    const hint =
      camel !== field && LIMIT_NAMES.includes(camel)
        ? ` (GitHub's resource name; the lane is \`${camel}\`)`
        : '';
    const list = LIMIT_NAMES.map((n) => `\`${n}\``).join(', ');
    throw new TypeError(`Unknown lane \`${field}\` in ${name}${hint}; it takes ${list}`);
  }
}

/**
 * What a `throttle.limits` function returned for `budget`, checked when it is used (when the
 * budget's valves are made): undefined, or an object of known lanes. Throws a TypeError.
 */
export function limitsResult(value: unknown, budget: string): GitHubLimits | undefined {
  if (value === undefined) return undefined;
  const name = `the result of \`throttle.limits\`(${JSON.stringify(budget)})`;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(
      `Expected ${name} to be an object like { core: { limit: 15000, interval: '1h' } } or undefined, got ${describe(value)}`,
    );
  }
  checkLimits(value, name);
  return value as GitHubLimits;
}

/**
 * Checks a budget id (`<id>:<key>`, with `source` naming where the key came from): the valves
 * are `<budget>` and `<budget>:<lane>`, `:code_search` the longest suffix, so the budget may be
 * at most 188 characters, with no '{' or '}'. Throws a TypeError.
 */
export function checkBudget(id: string, key: string, source: string): string {
  const budget = `${id}:${key}`;
  const max = MAX_ID_CHARACTERS - LANE_SUFFIX.codeSearch.length - 1;
  const characters = [...budget].length;
  if (characters > max) {
    throw new TypeError(
      `Expected the budget id \`<throttle.id>:<key>\` to be at most ${max} characters long (valve/octokit appends ':${LANE_SUFFIX.codeSearch}' and the like), got ${characters} characters: \`throttle.id\` has ${[...id].length}, ${source} ${JSON.stringify(key.length > 40 ? `${key.slice(0, 40)}…` : key)} has ${[...key].length}`,
    );
  }
  checkId(budget, `<throttle.id>:<key> (the key from ${source})`);
  return budget;
}
