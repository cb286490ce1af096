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
 */
// Types only (erased): the augmentation below needs the module in the program.
import type {} from '@octokit/core';
import { describe } from '../../duration.js';
import { ValveError } from '../../errors.js';
import { anySignal } from '../../feedback/fetch.js';
import { observe } from '../../feedback/observe.js';
import { feedbackState } from '../../feedback/state.js';
import type { ValveInternals } from '../../feedback-port.js';
import { readCloseOptions } from '../../run-options.js';
import type { Valve } from '../../types.js';
import { internalsOf } from '../../valve.js';
import { type AnswerInput, header, type RateLimitAnswer, readAnswer } from './answers.js';
import { Lanes } from './lanes.js';
import { classify, laneOfResource, type RateLane, type RequestClass } from './limits.js';
import {
  checkBudget,
  isEnabled,
  readSettings,
  type Settings,
  type ThrottledRequestOptions,
} from './options.js';

export type { GitHubLimits, RateLane } from './limits.js';
export { githubLimits } from './limits.js';
export type { LimitHandler, ThrottledRequestOptions, ThrottleOptions } from './options.js';

import type { ThrottleOptions } from './options.js';

/** The parts of an Octokit instance the plugin uses. */
interface OctokitLike {
  hook: {
    wrap(name: 'request', wrapper: (request: RequestFn, options: ThrottledRequestOptions) => unknown): void;
  };
  log?: { warn?: (...args: unknown[]) => unknown };
}

type RequestFn = (options: ThrottledRequestOptions) => Promise<unknown>;

/** One attempt's outcome. */
type Outcome =
  | { readonly ok: true; readonly response: unknown }
  | { readonly ok: false; readonly error: unknown };

const noop = () => undefined;

/** status, headers and body of a response, or of an error's response. */
function inputOf(outcome: Outcome): AnswerInput {
  if (outcome.ok) {
    const r = outcome.response as { status?: unknown; headers?: unknown; data?: unknown } | null;
    return {
      status: typeof r?.status === 'number' ? r.status : undefined,
      headers: (r?.headers ?? undefined) as Record<string, unknown> | undefined,
      data: r?.data,
      message: undefined,
    };
  }
  const e = outcome.error as
    | { status?: unknown; message?: unknown; response?: { headers?: unknown; data?: unknown } }
    | null
    | undefined;
  return {
    status: typeof e?.status === 'number' ? e.status : undefined,
    headers: (e?.response?.headers ?? undefined) as Record<string, unknown> | undefined,
    data: e?.response?.data,
    message: typeof e?.message === 'string' ? e.message : undefined,
  };
}

/** The valve's scheduler hooks (this package's own valves always have them). */
function internals(valve: Valve): ValveInternals {
  const found = internalsOf(valve);
  if (found === undefined) throw new TypeError('valve/octokit: a valve of another copy of valve');
  return found;
}

/** Where one request stands in each valve it passes: the valve and its queue position there. */
class Places {
  private readonly valves: (Valve | undefined)[] = [];
  private readonly sequences: (number | undefined)[] = [];

  /**
   * Runs `job` in `valve` at the request's place there (its first attempt's, for a retry), with
   * the time left until `deadline` (valve clock) as its maxWait: MAX_WAIT at once when none is left.
   */
  run<T>(
    index: number,
    valve: Valve,
    job: (ctx: { signal: AbortSignal }) => T | Promise<T>,
    cost: number,
    signal: AbortSignal | undefined,
    deadline: number,
  ): Promise<T> {
    if (this.valves[index] !== valve) {
      // A valve dropped while idle and made again has its own positions.
      this.valves[index] = valve;
      this.sequences[index] = undefined;
    }
    const inner = internals(valve);
    let maxWait: number | undefined;
    if (deadline !== Number.POSITIVE_INFINITY) {
      maxWait = deadline - inner.clock.now();
      if (!(maxWait > 0)) return Promise.reject(maxWaitError());
    }
    return inner.runAt(
      job,
      maxWait === undefined ? { cost, signal } : { cost, signal, maxWait },
      this.sequences[index],
      (used) => {
        this.sequences[index] ??= used;
      },
    );
  }
}

function maxWaitError(): ValveError {
  return new ValveError('MAX_WAIT', 'The request did not start within its maxWait');
}

function closedError(): ValveError {
  return new ValveError('CLOSED', 'The valve was closed before the job started');
}

/** The reason a grant's wait is aborted with when a lane of its request is paused meanwhile. */
const PAUSED: unique symbol = Symbol('valve/octokit: paused');

/** What the job in `all` ends with when it gives its turn at its first lane up to a request called before it. */
const YIELD: unique symbol = Symbol('valve/octokit: a request called earlier waits for this turn');

/** What the job in `all` ends with when a pause came before the request could be sent. */
const AGAIN: unique symbol = Symbol('valve/octokit: wait for the pause');

/** The latest known pause end (valve clock) among `valves`. */
function pauseEnd(valves: readonly ValveInternals[]): number {
  let end = 0;
  for (const v of valves) end = Math.max(end, v.knownPauseEnd());
  return end;
}

/**
 * An AbortSignal that aborts when one of `signals` does (with its reason) or on abort(); dispose()
 * removes its listeners (a caller's signal may live much longer than one wait).
 */
class Watch {
  private readonly controller = new AbortController();
  private readonly signals: AbortSignal[];
  private readonly onAbort = (event: Event) => this.abort((event.target as AbortSignal).reason);

  constructor(signals: readonly (AbortSignal | undefined)[]) {
    this.signals = signals.filter((s): s is AbortSignal => s !== undefined);
    for (const s of this.signals) {
      if (s.aborted) {
        this.abort(s.reason);
        return;
      }
    }
    for (const s of this.signals) s.addEventListener('abort', this.onAbort);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (!this.controller.signal.aborted) this.controller.abort(reason);
  }

  dispose(): void {
    for (const s of this.signals) s.removeEventListener('abort', this.onAbort);
  }
}

/** One request waiting for its turn at a Turns lock. */
interface TurnWaiter {
  readonly ticket: number;
  grant(): void;
}

/**
 * A local lock held by one request at a time, handed to the waiting request with the lowest
 * ticket (the order requests were called in: a request that comes back after a pause goes ahead
 * of later ones). Made on first use, forgotten (`onFree`) once nobody holds or waits for it.
 */
class Turns {
  private held = false;
  private readonly waiters: TurnWaiter[] = [];
  /** The holder's ticket. */
  private holder = 0;
  /** A request with a lower ticket than the holder's waits (a holder that can still give its turn up does). */
  wanted = false;

  constructor(private readonly onFree: () => void) {}

  /** Takes the lock if nobody holds it (nobody then waits for it either). */
  tryTake(ticket: number): boolean {
    if (this.held) return false;
    this.held = true;
    this.holder = ticket;
    return true;
  }

  enqueue(waiter: TurnWaiter): void {
    let i = this.waiters.length;
    while (i > 0 && this.waiters[i - 1]!.ticket > waiter.ticket) i--;
    this.waiters.splice(i, 0, waiter);
    if (waiter.ticket < this.holder) this.wanted = true;
  }

  remove(waiter: TurnWaiter): void {
    const i = this.waiters.indexOf(waiter);
    if (i >= 0) this.waiters.splice(i, 1);
  }

  release(): void {
    this.wanted = false;
    const next = this.waiters.shift();
    if (next !== undefined) {
      this.holder = next.ticket;
      next.grant();
      return;
    }
    this.held = false;
    this.onFree();
  }
}

/** A request waiting, outside every valve, for the pauses of its lanes to end. */
interface Sleeper {
  readonly valves: readonly ValveInternals[];
  /** Valve clock: when the sleeper wakes anyway (its maxWait deadline, or a pause's end). */
  wakeAt: number;
  wake(): void;
}

class Throttle {
  private readonly lanes: Lanes;
  /** Set (CLOSED) by close() without drain: the waits outside the valves end with it. */
  private cut: ValveError | undefined;
  /** Waits that end when close() without drain is called (one listener each, not one per AbortSignal). */
  private readonly cutters = new Set<(reason: unknown) => void>();
  /** close() was called: new requests reject CLOSED. */
  private closed = false;
  /** Requests between their start and their end (queued, waiting, sending or handled). */
  private active = 0;
  /** Called when `active` drops to 0 (close({ drain: true }) waits for it). */
  private readonly idleWaiters = new Set<() => void>();
  /** Requests waiting for a pause to end, in the order they began to wait (woken in that order). */
  private readonly sleepers = new Set<Sleeper>();
  /** Jobs holding a slot while they wait for grants: told when a lane is paused (here, or learnt from the store). */
  private readonly watchers = new Set<() => void>();
  /** The valves this client listens to for 'pause': one listener each, for every watcher, kept while the valve lives. */
  private readonly listening = new WeakSet<Valve>();
  private readonly onPauseEvent = () => this.paused();
  /** The locks of the lanes by budget and lane (see attempt()): made on first use, dropped once free. */
  private readonly turnLocks = new Map<string, Turns>();
  /** The next request's ticket (its place at every lock). */
  private tickets = 0;

  constructor(
    private readonly settings: Settings,
    private readonly octokit: OctokitLike,
    /** The key when `throttle.key` is not given: the installation the Octokit was created for. */
    private readonly defaultKey: string | undefined,
  ) {
    // The installation's budget is known now: checked at `new Octokit()`, as the id is.
    if (settings.key === undefined && defaultKey !== undefined) {
      checkBudget(settings.id, defaultKey, 'the installation key');
    }
    this.lanes = new Lanes(settings);
  }

  async close(options?: { drain?: boolean }): Promise<void> {
    const drain = readCloseOptions(options);
    if (drain instanceof TypeError) throw drain;
    this.closed = true;
    if (!drain) {
      if (this.cut === undefined) {
        this.cut = closedError();
        for (const cutter of [...this.cutters]) cutter(this.cut);
      }
    } else if (this.active > 0 && this.cut === undefined) {
      // Requests waiting for a pause (outside the valves) are sent first too: the valves stay
      // open until every request ended. A later close() without drain cuts this short.
      await new Promise<void>((resolve) => {
        const cutter = () => resolve();
        this.cutters.add(cutter);
        this.idleWaiters.add(() => {
          this.cutters.delete(cutter);
          resolve();
        });
      });
    }
    return this.lanes.close(options);
  }

  /** The budget id of a request: `<id>` or `<id>:<key>`. */
  private budgetOf(options: ThrottledRequestOptions): string {
    const keyFn = this.settings.key;
    if (keyFn === undefined) {
      return this.defaultKey === undefined ? this.settings.id : `${this.settings.id}:${this.defaultKey}`;
    }
    const key = keyFn(options, this.octokit);
    if (key === undefined) return this.settings.id;
    if (typeof key !== 'string') {
      throw new TypeError(`Expected \`throttle.key\` to return a string or undefined, got ${describe(key)}`);
    }
    return checkBudget(this.settings.id, key, '`throttle.key`');
  }

  async request(request: RequestFn, options: ThrottledRequestOptions): Promise<unknown> {
    const method = String(options.method ?? 'GET').toUpperCase();
    const klass = classify(method, String(options.url ?? ''), options);
    // Token requests made by an auth strategy while the requests that need the token wait.
    if (klass.auth) return request(options);
    if (this.closed) throw closedError();
    const budget = this.budgetOf(options);
    this.active++;
    try {
      return await this.attempts(request, options, budget, klass);
    } finally {
      if (--this.active === 0 && this.idleWaiters.size > 0) {
        const waiters = [...this.idleWaiters];
        this.idleWaiters.clear();
        for (const resolve of waiters) resolve();
      }
    }
  }

  private async attempts(
    request: RequestFn,
    options: ThrottledRequestOptions,
    budget: string,
    klass: RequestClass,
  ): Promise<unknown> {
    if (options.request === undefined || options.request === null) options.request = {};
    const requestOptions = options.request;
    const signal = requestOptions.signal ?? undefined;
    const places = new Places();
    const ticket = this.tickets++;
    const maxWait = this.settings.maxWait;
    for (let retryCount = 0; ; retryCount++) {
      // The request's primary lane counts its requests in flight, so that a remaining count no
      // larger than the requests sent after this one reads as spent (see observe()).
      const primary = internals(this.lanes.group(klass.primary).valve(Lanes.id(budget, klass.primary)));
      const inFlight = feedbackState(primary);
      // One deadline per attempt, shared by every wait of the attempt.
      const deadline = maxWait === Number.POSITIVE_INFINITY ? maxWait : primary.clock.now() + maxWait;
      let sent = -1;
      let outcome: Outcome;
      try {
        outcome = await this.attempt(
          request,
          options,
          requestOptions,
          budget,
          klass,
          places,
          ticket,
          signal,
          deadline,
          () => {
            sent = inFlight.begin();
          },
        );
      } catch (error) {
        // Sent, and then lost its lease (LEASE_LOST) or its valve (CLOSED): no longer in flight.
        if (sent >= 0) inFlight.end(sent);
        throw error;
      }
      const input = inputOf(outcome);
      const now = Date.now();
      const answer = readAnswer(input, this.settings.fallbackSecondaryRateRetryAfter, now);
      if (answer === undefined) {
        this.observe(budget, klass, input, now, primary, sent);
        inFlight.end(sent);
        if (outcome.ok) return outcome.response;
        throw outcome.error;
      }
      inFlight.end(sent);
      this.pause(budget, klass, answer, input, now);
      requestOptions.retryCount = retryCount;
      if (!(await this.ask(answer, options, retryCount))) {
        if (outcome.ok)
          throw Object.assign(new Error('GraphQL Rate Limit Exceeded'), {
            response: outcome.response,
            data: input.data,
          });
        throw outcome.error;
      }
    }
  }

  /** The valves a request passes: `all`, then its rate lanes (made on first use). */
  private valvesOf(budget: string, klass: RequestClass): Valve[] {
    const valves = [this.lanes.all.valve(budget)];
    for (const [lane] of klass.lanes) valves.push(this.lanes.group(lane).valve(Lanes.id(budget, lane)));
    return valves;
  }

  /**
   * The lock of a lane for a budget: `slot` is the turn to take a slot for a request whose first
   * lane it is, `grant` the turn to wait for the lane's grant inside the slot.
   */
  private lock(budget: string, lane: RateLane, kind: 'slot' | 'grant'): Turns {
    const key = `${kind}\n${lane}\n${budget}`;
    let lock = this.turnLocks.get(key);
    if (lock === undefined) {
      lock = new Turns(() => this.turnLocks.delete(key));
      this.turnLocks.set(key, lock);
    }
    return lock;
  }

  /**
   * Takes `lock`: at once (undefined) when free, else a promise that resolves when the request's
   * turn comes, or rejects with the signal's reason, MAX_WAIT at the deadline, or CLOSED on
   * close() without drain (the request then leaves the line).
   */
  private turn(
    lock: Turns,
    ticket: number,
    signal: AbortSignal | undefined,
    deadline: number,
    clock: ValveInternals['clock'],
  ): Promise<void> | undefined {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.cut !== undefined) return Promise.reject(this.cut);
    if (lock.tryTake(ticket)) return undefined;
    const now = clock.now();
    if (deadline <= now) return Promise.reject(maxWaitError());
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const waiter: TurnWaiter = {
        ticket,
        grant: () => {
          if (settled) return;
          settled = true;
          done();
          resolve();
        },
      };
      const fail = (reason: unknown) => {
        if (settled) return;
        settled = true;
        lock.remove(waiter);
        done();
        reject(reason);
      };
      const onAbort = () => fail(signal?.reason);
      const timer =
        deadline === Number.POSITIVE_INFINITY
          ? undefined
          : clock.setTimeout(() => fail(maxWaitError()), Math.max(0, deadline - now));
      const done = () => {
        if (timer !== undefined) clock.clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.cutters.delete(fail);
      };
      lock.enqueue(waiter);
      signal?.addEventListener('abort', onAbort);
      this.cutters.add(fail);
    });
  }

  /** Calls `check` on each pause of a lane (of `valves`, learnt from the store, or this client's); returns the off switch. */
  private watchPauses(valves: readonly Valve[], check: () => void): () => void {
    for (const valve of valves) {
      if (this.listening.has(valve)) continue;
      valve.on('pause', this.onPauseEvent);
      this.listening.add(valve);
    }
    this.watchers.add(check);
    return () => this.watchers.delete(check);
  }

  /**
   * One attempt. It waits, holding nothing, while a lane of the request is paused; then for its
   * turn at its first lane (one request per lane and budget in this client between here and its
   * turn at that lane's grant); takes a concurrency slot (in `all`); and, holding the slot, takes
   * each lane's grant in LANE_ORDER, each while it holds that lane's turn (one request per lane
   * and budget in this client waits for a lane's grant inside a slot; the turn at the next lane
   * is taken before the previous one is released, always in the same order, so no two requests
   * wait for each other). It releases its last turn once granted and is sent at once. So a
   * request waiting for a lane's rules keeps no request of another lane from its slot: at most
   * two requests per lane (the one waiting for the grant, the next one for its turn) hold a slot
   * while that lane's rules make them wait. A pause of any of its lanes known while it holds the
   * slot ends the job (the slot and the turns are released, the grants taken are dropped: spent
   * and never used) and the request waits for that pause, then comes back at its places.
   */
  private async attempt(
    request: RequestFn,
    options: ThrottledRequestOptions,
    requestOptions: NonNullable<ThrottledRequestOptions['request']>,
    budget: string,
    klass: RequestClass,
    places: Places,
    ticket: number,
    signal: AbortSignal | undefined,
    deadline: number,
    onSend: () => void,
  ): Promise<Outcome> {
    const gates = klass.lanes;
    const first = gates[0]![0];
    // The rate lanes' pauses are waited for here, `all`'s in its queue at the request's place;
    // after a job that met a pause, every lane's here (the request keeps its places).
    let rateOnly = true;
    for (;;) {
      const listed = this.valvesOf(budget, klass);
      const every = listed.map(internals);
      const waited = rateOnly ? every.slice(1) : every;
      const clock = every[0]!.clock;
      const since = clock.now();
      if (pauseEnd(waited) > since || signal?.aborted || this.cut !== undefined) {
        await this.sleep(waited, deadline, signal);
      }
      const reservation = this.lock(budget, first, 'slot');
      const wait = this.turn(reservation, ticket, signal, deadline, clock);
      if (wait !== undefined) await wait;
      let reserved = true;
      const unreserve = () => {
        if (!reserved) return;
        reserved = false;
        reservation.release();
      };
      let outcome: Outcome | typeof AGAIN | typeof YIELD;
      try {
        // A pause that came while it waited for its turn: waited for again, holding nothing.
        if (pauseEnd(waited) > clock.now()) continue;
        outcome = await places.run(
          gates.length,
          this.lanes.all.valve(budget),
          async ({ signal: jobSignal }): Promise<Outcome | typeof AGAIN | typeof YIELD> => {
            // A request called before it (a retry, or one back from a pause) waits for this
            // turn: given up, with the slot, before any grant; this request keeps its places.
            if (reservation.wanted) return YIELD;
            // The valves listed before the waits, unless they may have been dropped since (a
            // group drops a valve after five idle minutes).
            const fresh = clock.now() - since < 1000;
            const valves = fresh ? listed : this.valvesOf(budget, klass);
            const inner = fresh ? every : valves.map(internals);
            if (pauseEnd(inner) > clock.now()) return AGAIN;
            let firstGrant = Number.NaN;
            // The job's signal aborts with the caller's signal too (and on close(), LEASE_LOST).
            const watch = new Watch([jobSignal]);
            const cutter = (reason: unknown) => watch.abort(reason);
            if (this.cut !== undefined) watch.abort(this.cut);
            this.cutters.add(cutter);
            const off = this.watchPauses(valves, () => {
              if (pauseEnd(inner) > clock.now()) watch.abort(PAUSED);
            });
            let held: Turns | undefined;
            try {
              for (let i = 0; i < gates.length; i++) {
                const [lane, cost] = gates[i]!;
                const lock = this.lock(budget, lane, 'grant');
                const turn = this.turn(lock, ticket, watch.signal, deadline, clock);
                if (turn !== undefined) await turn;
                // Hand over hand: the previous lane's turn ends once this one's is held.
                held?.release();
                held = lock;
                if (i === 0) unreserve();
                const valve = this.lanes.group(lane).valve(Lanes.id(budget, lane));
                await places.run(i, valve, noop, cost, watch.signal, deadline);
                if (i === 0) firstGrant = clock.now();
              }
            } catch (error) {
              if (error === PAUSED) return AGAIN;
              throw error;
            } finally {
              held?.release();
              unreserve();
              off();
              this.cutters.delete(cutter);
              watch.dispose();
            }
            // A pause of a lane that was on after the first grant (still on, or ended meanwhile):
            // the grants taken so far were held through it. They are dropped.
            if (pauseEnd(inner) > firstGrant) return AGAIN;
            onSend();
            try {
              const attempt = {
                ...options,
                request: {
                  ...requestOptions,
                  signal: signal === undefined ? jobSignal : anySignal(jobSignal, signal),
                },
              };
              return { ok: true, response: await request(attempt) };
            } catch (error) {
              return { ok: false, error };
            }
          },
          1,
          signal,
          deadline,
        );
      } finally {
        unreserve();
      }
      if (outcome === YIELD) continue;
      if (outcome !== AGAIN) return outcome;
      rateOnly = false;
    }
  }

  /**
   * Waits, holding nothing, until no pause of `valves` is known (or the deadline: MAX_WAIT; the
   * signal: its reason; close(): CLOSED). Requests that waited for the same pause wake in the
   * order they began to wait.
   */
  private async sleep(
    valves: readonly ValveInternals[],
    deadline: number,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const clock = valves[0]!.clock;
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      if (this.cut !== undefined) throw this.cut;
      const now = clock.now();
      const end = pauseEnd(valves);
      if (end <= now) return;
      if (deadline <= now) throw maxWaitError();
      await new Promise<void>((resolve, reject) => {
        const sleeper: Sleeper = {
          valves,
          wakeAt: Math.min(end, deadline),
          wake: () => {
            done();
            resolve();
          },
        };
        const onAbort = (event: Event) => cutter((event.target as AbortSignal).reason);
        const cutter = (reason: unknown) => {
          done();
          reject(reason);
        };
        // A resume() (here or, through the store's wake-ups, elsewhere) ends the wait early.
        const onResume = () => this.wakeDue();
        const timer = clock.setTimeout(() => this.wakeDue(), Math.max(0, sleeper.wakeAt - now));
        const done = () => {
          clock.clearTimeout(timer);
          this.sleepers.delete(sleeper);
          for (const v of valves) v.pauseWaiters.delete(onResume);
          signal?.removeEventListener('abort', onAbort);
          this.cutters.delete(cutter);
        };
        this.sleepers.add(sleeper);
        for (const v of valves) v.pauseWaiters.add(onResume);
        signal?.addEventListener('abort', onAbort);
        this.cutters.add(cutter);
      });
    }
  }

  /** Wakes, in the order they began to wait, the sleepers whose pauses ended or whose time came. */
  private wakeDue(): void {
    for (const sleeper of [...this.sleepers]) {
      const now = sleeper.valves[0]!.clock.now();
      if (sleeper.wakeAt <= now || pauseEnd(sleeper.valves) <= now) sleeper.wake();
    }
  }

  /** A lane was paused (by this client, or learnt from the store): jobs waiting for grants look at their lanes' pauses again. */
  private paused(): void {
    for (const check of [...this.watchers]) check();
  }

  /**
   * A response that is not a rate-limit answer: `x-ratelimit-remaining: 0` (or a count no larger
   * than the requests sent after this one, still in flight) pauses its resource's lane until
   * `x-ratelimit-reset`, in every process, so the next request waits instead of meeting a 403.
   * Only GitHub's pair is read, and only with a reset in epoch seconds, as GitHub sends it.
   */
  private observe(
    budget: string,
    klass: RequestClass,
    input: AnswerInput,
    now: number,
    primary: ValveInternals,
    sent: number,
  ): void {
    const remaining = header(input.headers, 'x-ratelimit-remaining');
    const reset = header(input.headers, 'x-ratelimit-reset');
    if (remaining === undefined || reset === undefined || !(Number(reset) * 1000 > now)) return;
    const resource = header(input.headers, 'x-ratelimit-resource');
    const lane = resource === undefined ? klass.primary : laneOfResource(resource);
    if (lane === undefined) return;
    const valve =
      lane === klass.primary ? primary : internals(this.lanes.group(lane).valve(Lanes.id(budget, lane)));
    const headers = { 'x-ratelimit-remaining': remaining, 'x-ratelimit-reset': reset };
    observe(valve, { status: input.status, headers }, valve === primary ? sent : undefined);
    this.paused();
  }

  /**
   * Pauses the lane the answer is about (every request of the budget for a secondary limit) for
   * `retryAfter × retryAfterBaseValue`; a primary limit's pause ends at `x-ratelimit-reset` when
   * that comes sooner (plugin-throttling's retryAfter adds a second and rounds up).
   */
  private pause(
    budget: string,
    klass: RequestClass,
    answer: RateLimitAnswer,
    input: AnswerInput,
    now: number,
  ): void {
    let ms = Math.ceil(answer.retryAfter * this.settings.retryAfterBaseValue);
    const detail = { status: input.status, kind: answer.kind, retryAfter: answer.retryAfter };
    let valve: ValveInternals;
    let name: string;
    if (answer.kind === 'secondary') {
      valve = internals(this.lanes.all.valve(budget));
      name = 'retry-after';
    } else {
      const reset = Number(header(input.headers, 'x-ratelimit-reset')) * 1000;
      if (reset > now) ms = Math.min(ms, reset - now);
      const lane: RateLane = answer.lane ?? klass.primary;
      valve = internals(this.lanes.group(lane).valve(Lanes.id(budget, lane)));
      name = 'x-ratelimit-reset';
    }
    if (!(ms > 0)) return;
    // Nonsense (a year, 1e12 s) never pauses longer than the valve's feedback.maxPause, as
    // observe() caps a header's wait: reported, not thrown.
    const maxPause = valve.feedback.maxPause;
    if (ms > maxPause) {
      valve.emit('feedback-ignored', {
        header: name,
        value: (header(input.headers, name) ?? String(answer.retryAfter)).slice(0, 200),
        reason: 'capped',
        status: input.status,
        cappedTo: maxPause,
        requestedMs: ms,
      });
      this.octokit.log?.warn?.(
        `valve/octokit: GitHub asked for a ${ms} ms wait (${name}); the budget pauses for ${maxPause} ms, the most it pauses`,
      );
      ms = maxPause;
    }
    valve.pauseInBackground(ms, name === 'retry-after' ? 'retry-after' : 'ratelimit-header', detail);
    this.paused();
  }

  /** The handler's decision; a handler that throws is logged and means no retry. */
  private async ask(
    answer: RateLimitAnswer,
    options: ThrottledRequestOptions,
    retryCount: number,
  ): Promise<boolean> {
    const handler =
      answer.kind === 'secondary' ? this.settings.onSecondaryRateLimit : this.settings.onRateLimit;
    try {
      return Boolean(await handler(answer.retryAfter, options, this.octokit, retryCount));
    } catch (err) {
      this.octokit.log?.warn?.('Error in throttling-plugin limit handler', err);
      return false;
    }
  }
}

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
 * The Octokit plugin: `Octokit.plugin(throttling)`, configured by the `throttle` option (see
 * ThrottleOptions). Throws, at `new Octokit(…)`, an Error when a handler is missing and a
 * TypeError/RangeError for a bad option.
 */
// biome-ignore lint/suspicious/noExplicitAny: Octokit's own plugin signature
export function throttling(octokit: any, octokitOptions: any): { throttle: ThrottleControl } {
  const options = (octokitOptions ?? {}) as Record<string, unknown>;
  if (!isEnabled(options.throttle)) return { throttle: { close: () => Promise.resolve() } };
  const settings = readSettings(options.throttle);
  const throttle = new Throttle(settings, octokit as OctokitLike, installationKey(options));
  (octokit as OctokitLike).hook.wrap('request', (request, requestOptions) =>
    throttle.request(request, requestOptions),
  );
  return { throttle: { close: (closeOptions) => throttle.close(closeOptions) } };
}

/** `octokit.throttle`: what the plugin adds to an Octokit instance. */
export interface ThrottleControl {
  /**
   * Ends this client's throttling: requests still queued reject with `ValveError` `CLOSED` (or,
   * with `{ drain: true }`, are sent first), and resolves once every concurrency lease it held is
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
