import { describe } from '../duration.js';
import type { FetchLike } from '../feedback/fetch.js';
import type { ValveGroup } from '../group-types.js';
import { checkKnownKeys } from '../stores/checks.js';
import type { Valve } from '../types.js';

/*
 * What valve/undici and valve/axios share: they send one attempt of a request themselves and
 * hand that sender to the public `valve.wrapFetch()` (or `group.wrapFetch()`), which queues each
 * attempt as a job, observes its answer and retries a 429 at the request's original position.
 * So both integrations keep exactly wrapFetch's behaviour and use no internals of the core: the
 * subpath bundles import the core's types only, never its code.
 */

/** Where the requests of an integration go: one valve, or a group's valve chosen per request. */
export interface ValveTarget<T> {
  /** Every request goes through this valve. Give `valve` or `group`, not both. */
  valve?: Valve;
  /** Each request goes through the valve of `key(request)` in this group. */
  group?: ValveGroup;
  /** With `group`: the key (the credential's budget) a request goes through. */
  key?: (request: T) => string;
  /** Retries after a 429 (or a 503 with Retry-After), each at the request's original queue position. Default 3. */
  retries?: number;
  /** Cost of each attempt in units: a positive integer, or a function of the request returning one. Default 1. */
  cost?: number | ((request: T) => number);
  /** Queue priority of every attempt (higher starts first). Default 0. */
  priority?: number;
}

/** One request as the integrations hand it to wrapFetch; `href` names it in 'retry' events. */
export interface Outgoing<T> {
  readonly href: string;
  readonly request: T;
}

/** The init wrapFetch passes to each attempt: the signal that aborts it (caller or valve). */
export interface AttemptInit {
  readonly signal: AbortSignal;
}

/** What one attempt resolves with: enough for wrapFetch to observe, retry and discard it. */
export interface AttemptResponse {
  readonly status: number;
  /** Has `has()`, `get()` and `forEach()` (a Map or Headers-like), as observe() and wrapFetch read them. */
  readonly headers: unknown;
  /** wrapFetch cancels the body of an answer it retries. */
  readonly body: { cancel(): Promise<void> };
}

export type Send<T, R extends AttemptResponse> = (outgoing: Outgoing<T>, init: AttemptInit) => Promise<R>;

/** The two wrapped senders: with retries (bodies that can be sent again) and without. */
export interface Wrapped<T, R extends AttemptResponse> {
  replayable: (outgoing: Outgoing<T>, init: { signal?: AbortSignal }) => Promise<R>;
  once: (outgoing: Outgoing<T>, init: { signal?: AbortSignal }) => Promise<R>;
}

const KEYS = ['valve', 'group', 'key', 'retries', 'cost', 'priority'];

/** What `value` is, for messages: a valve group and a valve by their brands, else as describe(). */
function kindOf(value: unknown): string {
  if (isGroup(value)) return 'a valve group';
  if (isValve(value)) return 'a valve';
  return describe(value);
}

/** A valve group: wrapFetch(), and valve(key), which a valve has not. */
function isGroup(value: unknown): value is ValveGroup {
  const g = value as Partial<ValveGroup> | null;
  return (
    typeof value === 'object' &&
    g !== null &&
    typeof g.valve === 'function' &&
    typeof g.wrapFetch === 'function'
  );
}

/** A valve: wrapFetch(), and no valve(key) (a group's). */
function isValve(value: unknown): value is Valve {
  const v = value as Partial<Valve> | null;
  return typeof value === 'object' && v !== null && typeof v.wrapFetch === 'function' && !isGroup(value);
}

/**
 * Checks an integration's options (TypeError/RangeError naming the option) and wraps `send`
 * through the valve or the group. `owner` names the integration in messages; `ownKeys` are the
 * integration's own options (checked by it, left out of `options`), named in the message of an
 * unknown option.
 */
export function throughValve<T, R extends AttemptResponse>(
  options: ValveTarget<T>,
  owner: string,
  send: Send<T, R>,
  ownKeys: readonly string[] = [],
): Wrapped<T, R> {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError(
      `Expected ${owner} options to be an object like { valve } or { group, key: (request) => string }, got ${describe(options)}`,
    );
  }
  checkKnownKeys(options, [...KEYS, ...ownKeys], owner);
  const { valve, group, key, retries, cost, priority } = options;
  if ((valve === undefined) === (group === undefined)) {
    throw new TypeError(
      `Expected ${owner} options to have either \`valve\` (a valve) or \`group\` (a valve group, with \`key\`), got ${valve === undefined ? 'neither' : 'both'}`,
    );
  }
  const rest: { retries?: number; cost?: number | ((o: Outgoing<T>) => number); priority?: number } = {};
  if (retries !== undefined) rest.retries = retries;
  if (priority !== undefined) rest.priority = priority;
  if (cost !== undefined) {
    rest.cost = typeof cost === 'function' ? (o: Outgoing<T>) => cost(o.request) : cost;
  }
  const sendLike = send as unknown as FetchLike;
  if (valve !== undefined) {
    if (!isValve(valve)) {
      const hint = isGroup(valve) ? ' (give a group as `group`, with `key`)' : '';
      throw new TypeError(`Expected \`valve\` to be a valve from createValve(), got ${kindOf(valve)}${hint}`);
    }
    if (key !== undefined) {
      throw new TypeError('Unknown option `key` with `valve`; `key` chooses a valve of a `group`');
    }
    return {
      replayable: valve.wrapFetch(sendLike, rest) as Wrapped<T, R>['replayable'],
      once: valve.wrapFetch(sendLike, { ...rest, retries: 0 }) as Wrapped<T, R>['once'],
    };
  }
  if (!isGroup(group)) {
    const hint = isValve(group) ? ' (give a valve as `valve`)' : '';
    throw new TypeError(
      `Expected \`group\` to be a valve group from createValveGroup(), got ${kindOf(group)}${hint}`,
    );
  }
  if (typeof key !== 'function') {
    throw new TypeError(
      `Expected \`key\` to be a function of the request returning its key (with \`group\`), got ${describe(key)}`,
    );
  }
  const groupOptions = { ...rest, key: (o: Outgoing<T>) => key(o.request) };
  return {
    replayable: group.wrapFetch(sendLike, groupOptions) as Wrapped<T, R>['replayable'],
    once: group.wrapFetch(sendLike, { ...groupOptions, retries: 0 }) as Wrapped<T, R>['once'],
  };
}

/** A header map that observe() reads (forEach/get) and wrapFetch asks (has), from a header record. */
export function headerMap(headers: Record<string, unknown> | null | undefined): Map<string, unknown> {
  const map = new Map<string, unknown>();
  if (headers) {
    for (const name of Object.keys(headers)) {
      const value = headers[name];
      if (value !== undefined && value !== null) map.set(name.toLowerCase(), value);
    }
  }
  return map;
}
