import { systemClock } from './clock.js';
import { describe } from './duration.js';
import { ValveError } from './errors.js';
import type { PauseSource, ValveEventName } from './events.js';
import { checkWrapFetch, type FetchLike, type WrapFetchOptions } from './feedback/fetch.js';
import { CarriedKey, CarriedRules, Entry, PausedKey, PausedKeys } from './group-entries.js';
import { GroupEvents, type ValveGroupListener } from './group-events.js';
import { checkIdleTimeout, IdleList } from './group-idle.js';
import {
  add,
  addCounters,
  askOverrides,
  type GroupFetchOptions,
  overrideError,
  type Retired,
  rulesToKeep,
  type ValveGroup,
  type ValveGroupOptions,
  type ValveGroupStats,
  type ValveOverrides,
} from './group-types.js';
import { type GroupWatcher, OBSERVE, PAUSED_KEYS } from './observer.js';
import { normalizeOptions, type ValveOptions } from './options.js';
import type { Rule } from './rules/rule.js';
import { readCloseOptions } from './run-options.js';
import { checkId, checkKnownKeys } from './stores/checks.js';
import { memoryStore } from './stores/memory.js';
import type { Store } from './stores/store.js';
import type { JobContext, RunOptions, Valve, ValveStats } from './types.js';
import { createGroupValve } from './valve.js';

export type { ValveGroupListener } from './group-events.js';
export type {
  GroupFetchOptions,
  ValveGroup,
  ValveGroupOptions,
  ValveGroupStats,
  ValveOverrides,
} from './group-types.js';

/*
 * createValveGroup(): one valve per key (a credential, a tenant), created on first use, dropped
 * after `idleTimeout` without work. Every valve of a group shares the group's one store (so on
 * Redis one client and one subscriber connection serve every key). Eviction is group-idle.ts (one
 * list, one timer); a key dropped while paused keeps its pause as a record (group-entries.ts);
 * the group's events are group-events.ts.
 */

const GROUP_OPTIONS = [
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
  'idleTimeout',
  'options',
];
/** The longest a key's rule-set record is kept for the group beyond its rules' interval (ms). */
const RECORD_TTL_MS = 60_000;

class ValveGroupImpl implements ValveGroup {
  /** createValve() options shared by every key (store and clock filled in). */
  private readonly base: Omit<ValveOptions, 'id'>;
  /** Per-key overrides, or undefined. */
  private readonly overrides: ((key: string) => ValveOverrides | undefined) | undefined;
  private readonly clock: NonNullable<ValveOptions['clock']>;
  /** Live valves by key: an entry exists exactly while its valve is linked in `idle`. */
  private readonly entries = new Map<string, Entry>();
  /** The live valves (and the paused records) by last activity, and the one eviction timer. */
  private readonly idle: IdleList<Entry | PausedKey | CarriedKey>;
  /** The dropped keys whose pause lasts, kept for their next valve (group-entries.ts). */
  private readonly paused: PausedKeys;
  private readonly events: GroupEvents;
  /** Closes of evicted valves not yet resolved (awaited by close()). */
  private readonly closing = new Map<Valve, Promise<void>>();
  /**
   * Per key, the rules last set on its valve with setRules() that differ from what the key gets
   * without them: its later valves are created with them (see setRulesOf).
   */
  private readonly kept = new Map<string, Rule[]>();
  /** Per dropped key whose valve changed its rules, what its next valve takes over (group-entries.ts). */
  private readonly carried: CarriedRules;
  private readonly retired: Retired = {
    started: 0,
    succeeded: 0,
    failed: 0,
    rejected: 0,
    storeErrors: 0,
    leasesLost: 0,
  };
  /**
   * The least time (ms) the store keeps each key's rule-set record: idleTimeout, at most a
   * minute. A key in steady use then rewrites its record about once a minute (not once per
   * interval of its rules), and an idle key's record still expires by idleTimeout (or by the
   * longest interval of its rules, whichever is later, as its rule states do).
   */
  private readonly recordTtl: number;
  /** The keys whose options(key) is being called: a call for one of them inside it is refused. */
  private readonly asking = new Set<string>();
  private created = 0;
  private evicted = 0;
  /** Hears each valve joining and leaving (valve/otel), or null: set through the OBSERVE method. */
  private watcher: GroupWatcher | null = null;
  /** The promise close() returns; null until the first close(). */
  private closePromise: Promise<void> | null = null;

  constructor(options: ValveGroupOptions) {
    const { idleTimeout, options: overrides, ...base } = options;
    // The shared options are checked once, here, as createValve would check them.
    normalizeOptions({ ...base, id: 'valve-group' });
    if (overrides !== undefined && typeof overrides !== 'function') {
      throw new TypeError(
        `Expected \`options\` to be a function of the key returning { rules, concurrency, maxWait } overrides, got ${describe(overrides)}`,
      );
    }
    this.overrides = overrides;
    this.clock = base.clock ?? systemClock;
    // One store for the whole group: the given one, or a private memoryStore on the group's clock.
    const store: Store = base.store ?? memoryStore({ clock: this.clock });
    this.base = { ...base, store, clock: this.clock };
    const idleMs = checkIdleTimeout(idleTimeout);
    this.idle = new IdleList(this.clock, idleMs, (entry, now) => {
      if (entry instanceof PausedKey) this.paused.due(entry, now);
      else if (entry instanceof CarriedKey) this.carried.due(entry, now);
      else this.due(entry, now);
    });
    this.paused = new PausedKeys(this.idle);
    this.carried = new CarriedRules(this.idle);
    this.recordTtl = Math.min(idleMs, RECORD_TTL_MS);
    this.events = new GroupEvents(() => this.entries.values());
  }

  get size(): number {
    return this.entries.size;
  }

  valve(key: string): Valve {
    if (this.closePromise !== null) throw closedError();
    const entry = this.live(key);
    if (entry === undefined) return this.create(key).valve;
    this.idle.touch(entry);
    return entry.valve;
  }

  run<T>(
    key: string,
    job: (ctx: JobContext) => T | PromiseLike<T>,
    options?: RunOptions,
  ): Promise<Awaited<T>> {
    if (this.closePromise !== null) return this.refuse(key, closedError());
    // No touch: a valve with work is never evicted, and its 'idle' event marks its activity.
    let entry = this.live(key);
    if (entry === undefined) {
      try {
        entry = this.create(key);
      } catch (err) {
        return this.refuse(key, err);
      }
    }
    return entry.valve.run(job, options);
  }

  wrapFetch<F extends FetchLike = typeof fetch>(
    fetchFn: F | undefined,
    options: GroupFetchOptions<Parameters<F>[0], Parameters<F>[1]>,
  ): F {
    if (typeof options !== 'object' || options === null) {
      throw new TypeError(
        `Expected group.wrapFetch() \`options\` to be an object like { key: (request) => string, retries: 3 }, got ${describe(options)}`,
      );
    }
    const { key: keyOf, ...rest } = options;
    if (typeof keyOf !== 'function') {
      throw new TypeError(
        `Expected \`key\` to be a function of the request returning its key, got ${describe(keyOf)}`,
      );
    }
    // The fetch and wrapFetch options are checked now, once, as each valve's wrapFetch would.
    checkWrapFetch(fetchFn, rest);
    // One wrapped fetch per valve, dropped with the valve.
    const wrapped = new WeakMap<Valve, F>();
    const fetchThrough = (input: Parameters<F>[0], init?: Parameters<F>[1]): Promise<unknown> => {
      let f: F | undefined;
      let key: string | undefined;
      try {
        key = keyOf(input, init);
        if (this.closePromise !== null) throw closedError();
        const valve = this.live(key)?.valve ?? this.create(checkId(key, 'key')).valve;
        f = wrapped.get(valve);
        if (f === undefined) {
          // Throws for a fixed cost the group's rules can never admit: this call rejects.
          f = valve.wrapFetch(fetchFn, rest as WrapFetchOptions<Parameters<F>[0], Parameters<F>[1]>);
          wrapped.set(valve, f);
        }
      } catch (err) {
        return this.refuse(key, err);
      }
      return f(input, init);
    };
    return fetchThrough as unknown as F;
  }

  stats(): ValveGroupStats {
    const r = this.retired;
    const now = this.clock.now();
    const out: ValveGroupStats = {
      size: this.entries.size,
      created: this.created,
      evicted: this.evicted,
      busy: 0,
      paused: this.paused.count(now),
      queued: 0,
      running: 0,
      started: r.started,
      succeeded: r.succeeded,
      failed: r.failed,
      rejected: r.rejected,
      storeErrors: r.storeErrors,
      leasesLost: r.leasesLost,
      closed: this.closePromise !== null,
    };
    for (const entry of this.entries.values()) {
      const s = entry.valve.stats();
      if (s.queued + s.running > 0) out.busy++;
      if (s.pausedUntil !== null) out.paused++;
      add(out, s);
    }
    // Dropped valves whose close() has not ended yet (a release may still fail): counted as
    // they are until they join the totals.
    for (const valve of this.closing.keys()) add(out, valve.stats());
    return out;
  }

  on<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this {
    this.events.on(event, listener);
    return this;
  }

  once<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this {
    this.events.on(event, listener, true);
    return this;
  }

  off<E extends ValveEventName>(event: E, listener: ValveGroupListener<E>): this {
    this.events.off(event, listener);
    return this;
  }

  close(options?: { drain?: boolean }): Promise<void> {
    const drain = readCloseOptions(options);
    if (drain instanceof TypeError) return Promise.reject(drain);
    if (this.closePromise !== null) {
      // A later close() without drain cuts a draining close short, as on a valve.
      if (!drain) for (const entry of this.entries.values()) void entry.valve.close();
      return this.closePromise;
    }
    this.idle.stop();
    this.kept.clear();
    this.carried.clear();
    this.paused.clear();
    const closes: Promise<void>[] = [...this.closing.values()];
    for (const entry of this.entries.values()) closes.push(entry.valve.close(options));
    this.closePromise = Promise.all(closes).then(() => {
      for (const entry of this.entries.values()) {
        this.retire(entry.valve.stats());
        this.watcher?.removed(entry.key, entry.valve);
      }
      this.entries.clear();
      // The closed group holds none of its valves any more (while the group itself is kept).
      this.idle.clear();
      this.watcher?.closed?.(); // valve/otel lets go of the closed group (observer.ts)
    });
    return this.closePromise;
  }

  /** valve/otel's hook (see observer.ts): sets the one watcher (null: none), told of every live valve now; returns the previous one. */
  [OBSERVE](watcher: GroupWatcher | null): GroupWatcher | null {
    const previous = this.watcher;
    this.watcher = watcher;
    if (watcher !== null) for (const entry of this.entries.values()) watcher.added(entry.key, entry.valve);
    return previous;
  }

  /** valve/otel's reading (see observer.ts): each dropped key whose pause lasts, with its source. */
  [PAUSED_KEYS](visit: (key: string, source: PauseSource) => void): void {
    this.paused.forEach(this.clock.now(), visit);
  }

  /**
   * A call the group refuses itself, before any valve has it: counted in stats().rejected (as a
   * valve counts the run() calls it refuses) and told to valve/otel, with the key when valid.
   */
  private refuse(key: unknown, err: unknown): Promise<never> {
    this.retired.rejected++;
    if (this.watcher?.rejected !== undefined) {
      let valid: string | undefined;
      try {
        valid = checkId(key, 'key');
      } catch {}
      this.watcher.rejected(valid, err);
    }
    return Promise.reject(err);
  }

  // ---------------------------------------------------------------- creation and eviction

  /** Creates the valve of a key not live yet. Throws TypeError/RangeError for a bad key or override. */
  private create(key: string): Entry {
    checkId(key, 'key');
    let options: ValveOptions = { ...this.base, id: key };
    if (this.overrides !== undefined) {
      const overrides = askOverrides(this.overrides, key, this.asking);
      // options(key) closed the group: no valve the close did not cover.
      if (this.closePromise !== null) throw closedError();
      if (overrides !== undefined) options = { ...options, ...overrides };
    }
    const defaults = options.rules;
    // Rules set on an earlier valve of the key with setRules() win over options(key)'s.
    const kept = this.kept.get(key);
    if (kept !== undefined) options.rules = kept;
    const carry = this.carried.peek(key, this.clock.now());
    let valve: Valve;
    try {
      valve = createGroupValve(options, this.recordTtl, carry);
    } catch (err) {
      // The shared options were checked at creation: this is the key's overrides.
      throw overrideError(err, key);
    }
    this.carried.forget(key);
    const entry = new Entry(key, valve, defaults);
    // The pause its last valve knew is this one's (not another process's, when the store tells).
    const pause = this.paused.take(key, this.clock.now());
    if (pause !== undefined) entry.adopt(pause);
    const setRules = valve.setRules;
    valve.setRules = (rules) => this.setRulesOf(entry, setRules, rules);
    this.entries.set(key, entry);
    this.created++;
    // A finished burst of work counts as activity: the valve's 'idle' moves it to the tail.
    valve.on('idle', () => {
      if (entry.linked) this.idle.touch(entry);
    });
    this.events.attach(entry);
    this.idle.touch(entry);
    this.watcher?.added(key, valve);
    return entry;
  }

  /**
   * The key's entry. A valve closed by hand (`group.valve(key).close()`) is dropped once it has
   * no work left, so the key's next job gets a new valve; while it still drains, its runs
   * reject CLOSED.
   */
  private live(key: string): Entry | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined || !entry.isClosed()) return entry;
    const s = entry.valve.stats();
    if (s.queued + s.running > 0) return entry;
    this.drop(entry);
    return undefined;
  }

  /**
   * Drops an entry with no work: closes its valve, whose counters join the totals once that
   * close() ended (it may still be releasing leases; the group's close() waits for it too).
   */
  private drop(entry: Entry): void {
    if (this.closePromise === null) this.carried.keep(entry.key, entry.rulesCarry(), this.clock.now());
    this.idle.unlink(entry);
    // Its pause still counts (stats, metrics), and the key's next valve takes it over.
    if (this.closePromise === null) this.paused.keep(entry.key, entry.pauseCarry(), this.clock.now());
    // Only its own: the key may have a newer entry already.
    if (this.entries.get(entry.key) === entry) this.entries.delete(entry.key);
    this.watcher?.removed(entry.key, entry.valve);
    const valve = entry.valve;
    const closing = valve.close();
    this.closing.set(valve, closing);
    void closing.then(() => {
      this.closing.delete(valve);
      this.retire(valve.stats());
    });
  }

  /**
   * A member's setRules(): the valve's own, then the group keeps the rules for the key's later
   * valves (or forgets them: the key's own again). Rules the valve refuses change nothing.
   */
  private setRulesOf(entry: Entry, setRules: Valve['setRules'], rules: Rule | readonly Rule[]) {
    const closed = entry.isClosed() || this.closePromise !== null;
    const result = setRules.call(entry.valve, rules);
    const keep = closed ? undefined : rulesToKeep(rules, entry.defaults);
    if (keep === null) this.kept.delete(entry.key);
    else if (keep !== undefined) this.kept.set(entry.key, keep);
    return result;
  }

  /**
   * The entry's idleTimeout passed since its last activity: evict it, unless it has work or
   * holds a pause the store has not confirmed (the next valve would not know of it). A pause
   * the store has outlives the valve as a record (drop).
   */
  private due(entry: Entry, now: number): void {
    const s = entry.valve.stats();
    // Any work keeps it, also in a valve closed by hand and still draining (live() drops that
    // one once its work is done).
    if (s.queued + s.running > 0 || entry.unconfirmedPauseEnd() > now) {
      this.idle.touch(entry, now); // looked at again after another idleTimeout, or at its 'idle'
      return;
    }
    this.evicted++;
    this.drop(entry);
  }

  /** Adds a valve's final counters to the group's totals. */
  private retire(s: ValveStats): void {
    addCounters(this.retired, s);
  }
}

function closedError(): ValveError {
  return new ValveError('CLOSED', 'The valve group is closed');
}

/**
 * Creates a group of valves, one per key (`group.valve(key)` is the valve whose id is `key`),
 * sharing one store. Throws TypeError/RangeError synchronously for invalid options.
 */
export function createValveGroup(options: ValveGroupOptions): ValveGroup {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(
      `Expected createValveGroup() options to be an object like { rules: { limit: 5000, interval: '1h' }, idleTimeout: '5m' }, got ${describe(options)}`,
    );
  }
  if ('id' in options) {
    throw new TypeError(
      'Unknown option `id`; a valve group names each valve by its key (group.valve(key), group.run(key, job))',
    );
  }
  checkKnownKeys(options, GROUP_OPTIONS, 'createValveGroup()');
  return new ValveGroupImpl(options);
}
