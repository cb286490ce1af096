import type { StoreRule } from '../rules/rule.js';

/** A value, or a promise of it: the memory store answers synchronously, Redis asynchronously. */
export type MaybePromise<T> = T | Promise<T>;

/** Global concurrency slots wanted with an acquisition: one lease per granted job. */
export interface LeaseRequest {
  /** At most this many leases may be held for the id at once (counted in jobs, not cost). */
  readonly limit: number;
  /** Lease time-to-live in ms, counted from the store's clock at the acquisition. */
  readonly ttl: number;
}

/** One granted global-concurrency lease. */
export interface Lease {
  /** Opaque, unique per id; pass it to renew() and release(). */
  readonly token: string;
  /** Fencing number: strictly increasing per id across all processes, for checks in the external system. */
  readonly fence: number;
  /** Store-clock epoch ms at which the lease expires unless renewed. */
  readonly expiresAt: number;
}

/** One batch admission: ask for the longest prefix of `costs` that fits every rule (and a lease each). */
export interface AcquireRequest {
  /** The validated valve id (well-formed Unicode, 1..200 code points, no '{' or '}'). */
  readonly id: string;
  /** The rules, all checked and spent atomically. May be empty. */
  readonly rules: readonly StoreRule[];
  /**
   * Cost of each queued job, in queue order. Only the first `count` entries are read,
   * so a caller may reuse one array across calls.
   */
  readonly costs: readonly number[];
  /** How many entries of `costs` to consider (1 ≤ count ≤ costs.length). */
  readonly count: number;
  /** Global concurrency: one lease per granted job, within `limit`. */
  readonly lease?: LeaseRequest | undefined;
  /**
   * A rule change in progress (`valve.setRules()`): the rules the valve used before. They are
   * checked and spent like `rules` (a cost above a previous rule's `maxCost` simply does not
   * fit), so a window that contains the change holds what the stricter set allows. See
   * docs/architecture.md, "Rule changes".
   */
  readonly previous?: readonly StoreRule[] | undefined;
  /**
   * With `previous`: before anything is checked, each rule of `rules` that is not in
   * `previous` gets, added to its state, the units the previous rules' states prove may have
   * been spent in its current window (atomically, on the store's clock). Sent once per change.
   */
  readonly convert?: boolean | undefined;
  /**
   * With `previous`, one entry per previous rule: the store-clock time (ms, as
   * `AcquireResult.now`) of the conversion that introduced that rule, from which its state has
   * counted every grant; `-Infinity` for a rule whose state has counted every grant (a valve's
   * first rules), `Infinity` for one whose conversion is not known to have happened. A
   * conversion takes no source whose time is at or after the start of the new rule's current
   * window: such a state cannot tell what was spent in that window before it existed. Absent:
   * every entry `-Infinity`.
   */
  readonly previousSince?: readonly number[] | undefined;
  /**
   * Record `rules` as the rule set of this id (their digests, sorted and joined by ','), and
   * answer `recorded` when the store holds another set for the id.
   */
  readonly record?: string | undefined;
  /**
   * With `record`: the least time (ms) the store keeps the record after it writes it. A store
   * keeps it at least the longest interval of the rules anyway; a valve group asks for its
   * `idleTimeout` up to a minute, so that a key in steady use rewrites its record about once a
   * minute, not once per interval. Undefined: the longest interval.
   */
  readonly recordTtl?: number | undefined;
  /**
   * Take part in the id's line (docs/architecture.md, "Turns"): the ticket this caller holds,
   * from its last answer's `turn`, or 0 for none. A store without a line ignores it.
   */
  readonly turn?: number | undefined;
}

/** Why the store stopped granting before the end of the batch. */
export type BlockReason = 'pause' | 'rate' | 'concurrency';

/** The store's answer to one acquisition. */
export interface AcquireResult {
  /** Length of the granted prefix (0..count). Its cost is spent on every rule. */
  granted: number;
  /**
   * When granted < count: ms until the first refused job could fit (rate: exact hint on the store's
   * clock; pause: until the pause ends; concurrency: a hint, e.g. the earliest lease expiry).
   * 0 when everything was granted. May carry a fraction.
   */
  retryAfter: number;
  /** Why granting stopped, or null when the whole batch was granted. */
  blocked: BlockReason | null;
  /** The active shared pause's end (store-clock epoch ms), or null when not paused. */
  pausedUntil: number | null;
  /** With `lease`: one lease per granted job, in order. */
  leases?: Lease[] | undefined;
  /** The store's clock at the decision, epoch ms. */
  now: number;
  /** With `record`: the digests the store held for the id when they differ from `record`. */
  recorded?: string[] | undefined;
  /**
   * With `turn`: the ticket the caller holds after this call (send it with the next call), or 0
   * for none. While it holds one, `retryAfter` is the wait until its turn, which may be later
   * than the rules alone would say: the callers before it take the slots before. Absent when
   * the store keeps no line; a caller then simply sends 0.
   */
  turn?: number | undefined;
}

/** A notification from another valve: hints only, admission is always decided by acquire(). */
export type WakeEvent =
  | { readonly type: 'pause'; readonly until: number }
  | { readonly type: 'resume' }
  | { readonly type: 'release' };

/**
 * The state of one id's wake-ups, told to subscribe()'s `onStatus`. `listening: true`: the
 * store now delivers the id's wake-ups (it may have missed some before: recheck the store
 * once). `listening: false`: wake-ups may be missed until it is true again (poll meanwhile);
 * with `error`, the subscription was refused (e.g. by an ACL): report it.
 */
export interface WakeStatus {
  readonly listening: boolean;
  readonly error?: unknown;
}

/**
 * A ticket for one request wrapFetch is about to send (see Store.windowSend): `seq` > 0, send it
 * now (`probe`: it is the request that learns the window after a spent one's reset); `seq` 0,
 * wait at most `wait` ms and ask again (`probe`: another request is probing, its answer may
 * come sooner).
 */
export interface WindowTicket {
  readonly seq: number;
  readonly wait: number;
  readonly probe: boolean;
}

/**
 * The contract between the scheduler and a store. The memory store and the Redis
 * store implement it; users may write their own (run the conformance suite from
 * `valve/testing` against it). Every method is atomic on the
 * store's own clock; each maps to one script call on Redis.
 */
export interface Store {
  /** Checks the pause, then grants the longest prefix of jobs that fits every rule (and a lease each); spends it. */
  acquire(request: AcquireRequest): MaybePromise<AcquireResult>;
  /**
   * Extends the shared pause to at least now + ms (never shortens). Resolves with the pause's end
   * (epoch ms). `by` (optional) says what paused, e.g. 'retry-after (retry-after)': a store may
   * record it with the pause for operators (the Redis store does; `valve status` shows it).
   */
  pause(id: string, ms: number, by?: string): MaybePromise<number>;
  /** Deletes the shared pause. */
  resume(id: string): MaybePromise<void>;
  /**
   * Extends each still-held lease to now + ttl. Returns, per token, whether it is still held.
   * Never resurrects an expired or released lease.
   */
  renew(id: string, tokens: readonly string[], ttl: number): MaybePromise<boolean[]>;
  /** Releases the given leases (only those tokens) and wakes waiters. */
  release(id: string, tokens: readonly string[]): MaybePromise<void>;
  /**
   * Optional: wake-ups when another valve pauses, resumes or releases a slot for `id`, and
   * (optional `onStatus`) changes of whether they are being delivered. Returns an unsubscribe function.
   */
  subscribe?(
    id: string,
    onWake: (event: WakeEvent) => void,
    onStatus?: (status: WakeStatus) => void,
  ): () => void;
  /**
   * Optional (used by wrapFetch): a ticket for a request about to be sent, from the provider
   * window the id's fleet learnt from its answers (see docs/provider-feedback.md, "Several
   * processes"). Refused while the window's budget is spent (until its reset) and while another
   * request probes the next window (at most `probeTtl` ms).
   */
  windowSend?(id: string, probeTtl: number): MaybePromise<WindowTicket>;
  /**
   * Optional (used by wrapFetch): the answer to ticket `seq` stated `remaining` (−1: no window, it
   * only ends the probe it answers) with the window's reset at most `resetMs` from now. Resolves
   * with the wait (ms) until the window's reset when its count is spent (the lowest remaining
   * count of the window is 0), else 0: while requests in flight may take the budget the count
   * shows, tickets are refused but no wait is returned.
   */
  windowReport?(id: string, seq: number, remaining: number, resetMs: number): MaybePromise<number>;
  /** Optional: true when subscribe() delivers wake-ups right now for every subscribed id (e.g. a connected Redis subscriber). */
  readonly notifies?: boolean;
  /**
   * Optional: true while wake-ups for `id` are delivered, confirmed by the store (for Redis: a
   * probe published on the id's channel came back on the subscriber connection). While false,
   * a valve must not count on wake-ups for `id` (poll instead).
   */
  listening?(id: string): boolean;
}

/**
 * Internal (not exported from the package): a store's acquire() answering through two callbacks
 * instead of a promise, as `store.acquire(request).then(onAnswer, onFail)` would: never
 * synchronously, never throwing (a bad request fails through `onFail`). A store offers it as the
 * ACQUIRE_WITH property of its acquire method, so that an acquire replaced on an instance (a
 * wrapper, a test's spy) is called as it is. Admission uses it when present (the Redis store): a
 * valve group with thousands of keys makes one acquire call per job, and the promise and its
 * reaction per call are a good part of the client's cost. A `Symbol.for` key, as the observer
 * hook's: valve/otel's CommonJS bundle carries its own copy of this module, and a wrapper made by
 * one copy of the package must be found by a valve of another.
 */
export const ACQUIRE_WITH: unique symbol = Symbol.for('valve.acquireWith');

/** The callback form of a store's acquire() (see {@link ACQUIRE_WITH}), called with the store as `this`. */
export type AcquireWith = (
  this: Store,
  request: AcquireRequest,
  onAnswer: (result: AcquireResult) => void,
  onFail: (err: unknown) => void,
) => void;
