import { type Clock, systemClock } from './clock.js';
import { describe, parseDuration } from './duration.js';
import type { FeedbackSettings } from './feedback-port.js';
import { normalizeRule, type Rule, type StoreRule } from './rules/rule.js';
import type { RulesCarry } from './rulesets.js';
import { checkId, checkKnownKeys, MAX_BATCH, MAX_DURATION_MS } from './stores/checks.js';
import type { Store } from './stores/store.js';

/** Global or local concurrency, as the user writes it. */
export type ConcurrencyOption =
  | number
  | { limit: number; scope?: 'local' }
  | { limit: number; scope: 'global'; leaseTtl?: number | string };

/** Feedback tuning (observe / wrapFetch). Durations in ms or strings such as '1h'. */
export interface FeedbackOptions {
  /** No pause read from a header or computed by backoff lasts longer than this. Default '1h'. */
  maxPause?: number | string;
  /** First backoff after a 429 with no usable header. Default 1000 ms. */
  backoffInitial?: number | string;
  /** Backoff doubles per consecutive header-less 429 up to this. Default 60_000 ms. */
  backoffMax?: number | string;
}

/** What the scheduler does while the store fails. */
export type StoreErrorMode = 'wait' | 'throw' | 'open';

/**
 * How a rate wait wakes up: `'timer'` (default) on Node's timers alone, which fire up to about
 * a millisecond late; `'spin'` also checks the clock on every event-loop turn during the last
 * 1.5 ms of a wait under a rule that cannot absorb a late start (less than 2 ms of burst
 * tolerance), for the last few percent of a tight rate at the cost of CPU.
 */
export type Precision = 'timer' | 'spin';

/** Options of createValve(). */
export interface ValveOptions {
  /** Names the shared budget: 1 to 200 characters, without '{' or '}'. */
  id: string;
  /** One rule or an array of rules (may be empty when only concurrency is wanted). */
  rules?: Rule | readonly Rule[];
  /** Where the budget lives. Default: a private memoryStore(). */
  store?: Store;
  /** Running jobs: a number (this instance), `{ limit, scope: 'local' }` or `{ limit, scope: 'global', leaseTtl }`. Default: unlimited. */
  concurrency?: ConcurrencyOption;
  /** Queued (not yet started) jobs; beyond it run() rejects QUEUE_FULL. Default Infinity. */
  maxQueue?: number;
  /** Milliseconds (or a duration string) a job may wait for its start; beyond it the job rejects MAX_WAIT. Default Infinity. */
  maxWait?: number | string;
  /** Jobs asked for in one store call. Default 32. */
  batch?: number;
  /** While the store fails: 'wait' (default), 'throw' or 'open'. */
  onStoreError?: StoreErrorMode;
  /** How rate waits wake up: 'timer' (default, cheap) or 'spin' (precise, costs CPU). */
  precision?: Precision;
  /** Feedback tuning for observe() and wrapFetch(). */
  feedback?: FeedbackOptions;
  /**
   * Advanced, for tests: the clock of the valve's timers and wait arithmetic (default:
   * the system clock). Give the same clock to memoryStore({ clock }) to drive both
   * with a virtual clock.
   */
  clock?: Clock;
}

/** Options after validation. */
export interface NormalizedOptions {
  readonly id: string;
  readonly rules: readonly StoreRule[];
  /** The smallest maxCost over the rules and the rule that sets it, or Infinity / undefined. */
  readonly maxCost: number;
  readonly maxCostRule: StoreRule | undefined;
  /** The option path of that rule, e.g. "rules[1]" (for messages). */
  readonly maxCostPath: string;
  readonly store: Store | undefined;
  /** Local slots (Infinity when unlimited). With global scope, the global limit also bounds this instance. */
  readonly limit: number;
  readonly global: boolean;
  readonly leaseTtl: number;
  readonly maxQueue: number;
  readonly maxWait: number;
  readonly batch: number;
  readonly onStoreError: StoreErrorMode;
  readonly precision: Precision;
  readonly feedback: FeedbackSettings;
  readonly clock: Clock;
  /**
   * The least time (ms) the store keeps the id's rule-set record (AcquireRequest.recordTtl).
   * Not an option: a valve group sets it (group.ts); undefined for a plain valve.
   */
  readonly recordTtl?: number | undefined;
  /** Not an option: what an evicted valve of a group's key left for the key's next one (group.ts). */
  readonly rulesCarry?: RulesCarry | undefined;
}

const OPTION_NAMES = [
  'id',
  'rules',
  'store',
  'concurrency',
  'maxQueue',
  'maxWait',
  'batch',
  'onStoreError',
  'precision',
  'feedback',
  'clock',
] as const;

const STORE_METHODS = ['acquire', 'pause', 'resume', 'renew', 'release'] as const;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function positiveInteger(value: unknown, option: string, allowInfinity = false): number {
  const what = allowInfinity ? 'a positive integer or Infinity' : 'a positive integer';
  if (typeof value !== 'number') {
    throw new TypeError(`Expected \`${option}\` to be ${what}, got ${describe(value)}`);
  }
  if (allowInfinity && value === Number.POSITIVE_INFINITY) return value;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`Expected \`${option}\` to be ${what}, got ${String(value)}`);
  }
  return value;
}

/**
 * A duration a store is given (a pause, a lease TTL) or that bounds one: at most
 * MAX_DURATION_MS (365 days), the longest the stores accept. Returns `ms`.
 */
function storeDuration(ms: number, option: string, raw: unknown): number {
  if (ms > MAX_DURATION_MS) {
    throw new RangeError(
      `Expected \`${option}\` to be at most ${MAX_DURATION_MS} ms (365 days), got ${describe(raw)}`,
    );
  }
  return ms;
}

/** A wait in ms: a positive number, a duration string, or Infinity. */
export function waitOption(value: unknown, option: string): number {
  if (value === Number.POSITIVE_INFINITY) return value;
  if (typeof value === 'number' && !(value > 0 && Number.isFinite(value))) {
    throw new RangeError(
      `Expected \`${option}\` to be a positive number of milliseconds or Infinity, got ${String(value)}`,
    );
  }
  if (typeof value !== 'number' && typeof value !== 'string') {
    throw new TypeError(
      `Expected \`${option}\` to be a positive number of milliseconds, a duration string such as '30s', or Infinity, got ${describe(value)}`,
    );
  }
  return parseDuration(value, option);
}

/** Validates the id shared by createValve and the stores (see stores/checks.ts). */
export function validateId(value: unknown, option = 'id'): string {
  return checkId(value, option);
}

function validateStore(value: unknown): Store | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null) {
    throw new TypeError(
      `Expected \`store\` to be a Store such as memoryStore() or redisStore({ client }), got ${describe(value)}`,
    );
  }
  const store = value as Record<string, unknown>;
  for (const method of STORE_METHODS) {
    if (typeof store[method] !== 'function') {
      throw new TypeError(
        `Expected \`store\` to be a Store with ${STORE_METHODS.map((m) => `${m}()`).join(', ')}; \`store.${method}\` is ${describe(store[method])}`,
      );
    }
  }
  if (store.subscribe !== undefined && typeof store.subscribe !== 'function') {
    throw new TypeError(
      `Expected \`store.subscribe\` to be a function or absent, got ${describe(store.subscribe)}`,
    );
  }
  return value as Store;
}

function validateClock(value: unknown): Clock {
  if (value === undefined) return systemClock;
  if (
    typeof value !== 'object' ||
    value === null ||
    typeof (value as Clock).now !== 'function' ||
    typeof (value as Clock).setTimeout !== 'function' ||
    typeof (value as Clock).clearTimeout !== 'function'
  ) {
    throw new TypeError(
      `Expected \`clock\` to be a Clock with now(), setTimeout() and clearTimeout(), got ${describe(value)}`,
    );
  }
  return value as Clock;
}

/** Only an absent precision means 'timer': null is refused like any other value. */
function validatePrecision(value: unknown): Precision {
  if (value === undefined) return 'timer';
  if (typeof value !== 'string') {
    throw new TypeError(`Expected \`precision\` to be 'timer' or 'spin', got ${describe(value)}`);
  }
  if (value !== 'timer' && value !== 'spin') {
    throw new RangeError(`Expected \`precision\` to be 'timer' or 'spin', got ${describe(value)}`);
  }
  return value;
}

function validateFeedback(value: unknown): FeedbackSettings {
  if (value === undefined) return { maxPause: 3_600_000, backoffInitial: 1000, backoffMax: 60_000 };
  if (!isPlainObject(value)) {
    throw new TypeError(
      `Expected \`feedback\` to be an object like { maxPause: '1h', backoffInitial: 1000, backoffMax: 60_000 }, got ${describe(value)}`,
    );
  }
  checkKnownKeys(value, ['maxPause', 'backoffInitial', 'backoffMax'], 'feedback', 'feedback.');
  const maxPause =
    value.maxPause === undefined
      ? 3_600_000
      : storeDuration(
          parseDuration(value.maxPause, 'feedback.maxPause'),
          'feedback.maxPause',
          value.maxPause,
        );
  const backoffInitial =
    value.backoffInitial === undefined
      ? 1000
      : parseDuration(value.backoffInitial, 'feedback.backoffInitial');
  const backoffMax =
    value.backoffMax === undefined ? 60_000 : parseDuration(value.backoffMax, 'feedback.backoffMax');
  if (backoffMax < backoffInitial) {
    throw new RangeError(
      `Expected \`feedback.backoffMax\` to be at least \`feedback.backoffInitial\` (${backoffInitial} ms), got ${backoffMax} ms`,
    );
  }
  return { maxPause, backoffInitial, backoffMax };
}

function validateConcurrency(value: unknown): { limit: number; global: boolean; leaseTtl: number } {
  if (value === undefined) return { limit: Number.POSITIVE_INFINITY, global: false, leaseTtl: 30_000 };
  if (typeof value === 'number') {
    return { limit: positiveInteger(value, 'concurrency', true), global: false, leaseTtl: 30_000 };
  }
  if (!isPlainObject(value)) {
    throw new TypeError(
      `Expected \`concurrency\` to be a positive integer, { limit, scope: 'local' } or { limit, scope: 'global', leaseTtl }, got ${describe(value)}`,
    );
  }
  checkKnownKeys(value, ['limit', 'scope', 'leaseTtl'], 'concurrency', 'concurrency.');
  // Only an absent scope means 'local': null is refused like any other value.
  const scope = value.scope === undefined ? 'local' : value.scope;
  if (scope !== 'local' && scope !== 'global') {
    throw new TypeError(`Expected \`concurrency.scope\` to be 'local' or 'global', got ${describe(scope)}`);
  }
  if (scope === 'local') {
    if (value.leaseTtl !== undefined) {
      throw new TypeError(
        `\`concurrency.leaseTtl\` applies only to scope 'global', got scope 'local' with leaseTtl ${describe(value.leaseTtl)}`,
      );
    }
    return {
      limit: positiveInteger(value.limit, 'concurrency.limit', true),
      global: false,
      leaseTtl: 30_000,
    };
  }
  const limit = positiveInteger(value.limit, 'concurrency.limit');
  let leaseTtl = 30_000;
  if (value.leaseTtl !== undefined) {
    leaseTtl = storeDuration(
      parseDuration(value.leaseTtl, 'concurrency.leaseTtl'),
      'concurrency.leaseTtl',
      value.leaseTtl,
    );
    if (leaseTtl < 1000) {
      throw new RangeError(
        `Expected \`concurrency.leaseTtl\` to be at least 1000 ms, got ${describe(value.leaseTtl)}`,
      );
    }
  }
  return { limit, global: true, leaseTtl };
}

/** A valve's rules, validated, with the smallest maxCost and the rule (and its option path) that sets it. */
export interface NormalizedRules {
  readonly rules: readonly StoreRule[];
  readonly maxCost: number;
  readonly maxCostRule: StoreRule | undefined;
  readonly maxCostPath: string;
}

/** Validates the `rules` option (createValve() and setRules()). Throws TypeError/RangeError naming the rule. */
export function normalizeRules(rawRules: unknown): NormalizedRules {
  let rules: StoreRule[];
  let paths: string[] = [];
  if (rawRules === undefined) rules = [];
  else if (Array.isArray(rawRules)) {
    // Array.from visits holes too: a sparse array names its missing rule.
    paths = Array.from(rawRules, (_, i) => `rules[${i}]`);
    rules = Array.from(rawRules as readonly unknown[], (rule, i) => normalizeRule(rule, paths[i]!));
  } else if (isPlainObject(rawRules)) {
    paths = ['rules'];
    rules = [normalizeRule(rawRules, 'rules')];
  } else {
    throw new TypeError(
      `Expected \`rules\` to be a rule like { limit: 10, interval: '1s' } or an array of rules, got ${describe(rawRules)}`,
    );
  }
  let maxCost = Number.POSITIVE_INFINITY;
  let maxCostRule: StoreRule | undefined;
  let maxCostPath = '';
  for (let i = 0; i < rules.length; i++) {
    const rule = rules[i]!;
    if (rule.maxCost < maxCost) {
      maxCost = rule.maxCost;
      maxCostRule = rule;
      maxCostPath = paths[i]!;
    }
  }

  return { rules, maxCost, maxCostRule, maxCostPath };
}

/** Validates createValve() options. Throws TypeError/RangeError naming the option, the value and what is allowed. */
export function normalizeOptions(options: unknown): NormalizedOptions {
  if (!isPlainObject(options)) {
    throw new TypeError(
      `Expected createValve() options to be an object like { id: 'github:app-42', rules: { limit: 10, interval: '1s' } }, got ${describe(options)}`,
    );
  }
  checkKnownKeys(options, OPTION_NAMES, 'createValve()');
  const id = validateId(options.id);

  const { rules, maxCost, maxCostRule, maxCostPath } = normalizeRules(options.rules);

  const store = validateStore(options.store);
  const { limit, global, leaseTtl } = validateConcurrency(options.concurrency);
  const maxQueue =
    options.maxQueue === undefined
      ? Number.POSITIVE_INFINITY
      : positiveInteger(options.maxQueue, 'maxQueue', true);
  const maxWait =
    options.maxWait === undefined ? Number.POSITIVE_INFINITY : waitOption(options.maxWait, 'maxWait');
  const batch = options.batch === undefined ? 32 : positiveInteger(options.batch, 'batch');
  if (batch > MAX_BATCH) {
    throw new RangeError(`Expected \`batch\` to be at most ${MAX_BATCH}, got ${batch}`);
  }

  // Only an absent onStoreError means 'wait': null is refused like any other value.
  const onStoreError = options.onStoreError === undefined ? 'wait' : options.onStoreError;
  if (onStoreError !== 'wait' && onStoreError !== 'throw' && onStoreError !== 'open') {
    throw new TypeError(
      `Expected \`onStoreError\` to be 'wait', 'throw' or 'open', got ${describe(onStoreError)}`,
    );
  }
  if (onStoreError === 'open' && global) {
    throw new TypeError(
      "`onStoreError: 'open'` cannot be combined with `concurrency.scope: 'global'`: global slots need the store; use 'wait' or 'throw'",
    );
  }
  const precision = validatePrecision(options.precision);
  const feedback = validateFeedback(options.feedback);
  const clock = validateClock(options.clock);

  return {
    id,
    rules,
    maxCost,
    maxCostRule,
    maxCostPath,
    store,
    limit,
    global,
    leaseTtl,
    maxQueue,
    maxWait,
    batch,
    onStoreError,
    precision,
    feedback,
    clock,
  };
}
