import { anySignal } from '../../any-signal.js';
import { describe } from '../../duration.js';
import { ValveError } from '../../errors.js';
import { feedbackState } from '../../feedback/state.js';
import type { ValveInternals } from '../../feedback-port.js';
import { readCloseOptions } from '../../run-options.js';
import { type AnswerInput, type RateLimitAnswer, readAnswer } from './answers.js';
import { type Budget, Lanes } from './lanes.js';
import { classify, type RequestClass } from './limits.js';
import { checkBudget, type Settings, type ThrottledRequestOptions } from './options.js';
import { Pauses } from './pauses.js';
import {
  AGAIN,
  abortedInFlightError,
  Cut,
  closedError,
  PAUSED,
  Places,
  pauseEnd,
  TurnLocks,
  type Turns,
  Watch,
  YIELD,
} from './waiting.js';

/*
 * The request flow of one client (Throttle): a request's budget, its attempts (each one's waits,
 * turns, slot and grants, then the send), the handling of a rate-limit answer (pause, handler,
 * retry) and close(). The waiting primitives are waiting.ts, the pauses pauses.ts; index.ts is
 * the plugin's entry.
 */

/** The parts of an Octokit instance the plugin uses. */
export interface OctokitLike {
  hook: {
    wrap(name: 'request', wrapper: (request: RequestFn, options: ThrottledRequestOptions) => unknown): void;
  };
  log?: { warn?: (...args: unknown[]) => unknown };
}

export type RequestFn = (options: ThrottledRequestOptions) => Promise<unknown>;

/** One attempt's outcome. */
type Outcome =
  | { readonly ok: true; readonly response: unknown }
  | { readonly ok: false; readonly error: unknown };

const noop = () => undefined;

/** Whether a valve of the list was closed (dropped by its group after five idle minutes). */
function anyClosed(valves: readonly ValveInternals[]): boolean {
  for (const v of valves) if (v.isClosed()) return true;
  return false;
}

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

export class Throttle {
  private readonly lanes: Lanes;
  /** close() without drain: the waits outside the valves end with CLOSED. */
  private readonly cut = new Cut();
  /** close() was called: new requests reject CLOSED. */
  private closed = false;
  /** Requests between their start and their end (queued, waiting, sending or handled). */
  private active = 0;
  /** Called when `active` drops to 0 (close({ drain: true }) waits for it). */
  private readonly idleWaiters = new Set<() => void>();
  /** The lanes' pauses: the requests waiting for them, the jobs told of them. */
  private readonly pauses: Pauses;
  /** The locks of the lanes by budget and lane (see attempt()): made on first use, dropped once free. */
  private readonly turns = new TurnLocks(this.cut);
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
    this.pauses = new Pauses(settings, octokit, this.lanes, this.cut);
  }

  async close(options?: { drain?: boolean }): Promise<void> {
    const drain = readCloseOptions(options);
    if (drain instanceof TypeError) throw drain;
    this.closed = true;
    if (!drain) {
      this.cut.close();
    } else if (this.active > 0 && this.cut.error === undefined) {
      // Requests waiting for a pause (outside the valves) are sent first too: the valves stay
      // open until every request ended. A later close() without drain cuts this short.
      await new Promise<void>((resolve) => {
        const cutter = () => resolve();
        this.cut.cutters.add(cutter);
        this.idleWaiters.add(() => {
          this.cut.cutters.delete(cutter);
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
      // larger than the requests sent after this one reads as spent (see Pauses.observe()).
      const primary = this.lanes.budget(budget).valve(klass.primary);
      const inFlight = feedbackState(primary);
      // One deadline per attempt, shared by every wait of the attempt.
      const deadline = maxWait === Number.POSITIVE_INFINITY ? maxWait : primary.clock.now() + maxWait;
      let sent = -1;
      let outcome: Outcome;
      try {
        // A spent resource valve has no lane for, that this request's route spends (resources.ts).
        const resources = this.pauses.resources;
        if (resources.end(budget, klass.route) > primary.clock.now()) {
          await resources.sleep(budget, klass.route, primary.clock, deadline, signal, this.cut);
        }
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
        // Not sent: a wait in a valve closed by close() says so in the plugin's words.
        if (sent < 0 && error instanceof ValveError && error.code === 'CLOSED') throw closedError();
        throw error;
      }
      const input = inputOf(outcome);
      const now = Date.now();
      const answer = readAnswer(input, this.settings.fallbackSecondaryRateRetryAfter, now);
      if (answer === undefined) {
        this.pauses.observe(budget, klass, input, now, primary, sent);
        inFlight.end(sent);
        if (outcome.ok) return outcome.response;
        throw outcome.error;
      }
      inFlight.end(sent);
      this.pauses.pause(budget, klass, answer, input, now);
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
  private valvesOf(budget: Budget, klass: RequestClass): ValveInternals[] {
    const gates = klass.lanes;
    const valves = new Array<ValveInternals>(gates.length + 1);
    valves[0] = budget.valve('all');
    for (let i = 0; i < gates.length; i++) valves[i + 1] = budget.valve(gates[i]![0]);
    return valves;
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
      // The budget and its valves looked up again after each wait (a valve dropped while idle is made again).
      let bud = this.lanes.budget(budget);
      let every = this.valvesOf(bud, klass);
      const from = rateOnly ? 1 : 0;
      const clock = every[0]!.clock;
      if (pauseEnd(every, from) > clock.now() || signal?.aborted || this.cut.error !== undefined) {
        await this.pauses.sleep(from === 0 ? every : every.slice(1), deadline, signal);
        bud = this.lanes.budget(budget);
        every = this.valvesOf(bud, klass);
      }
      const reservation = bud.turns(first, 'slot');
      const wait = this.turns.turn(reservation, ticket, signal, deadline, clock);
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
        if (pauseEnd(every, from) > clock.now()) continue;
        outcome = await places.run(
          gates.length,
          bud.valve('all'),
          async ({ signal: jobSignal }): Promise<Outcome | typeof AGAIN | typeof YIELD> => {
            // A request called before it (a retry, or one back from a pause) waits for this
            // turn: given up, with the slot, before any grant; this request keeps its places.
            if (reservation.wanted) return YIELD;
            // Its valves again, unless none was dropped meanwhile (a group drops a valve after
            // five idle minutes): a valve made again learns a pause from the store at its grant.
            const inner = anyClosed(every) ? this.valvesOf(bud, klass) : every;
            if (pauseEnd(inner) > clock.now()) return AGAIN;
            let firstGrant = Number.NaN;
            // The job's signal aborts with the caller's signal too (and on close(), LEASE_LOST).
            const watch = new Watch(jobSignal);
            const cutter = watch.abort;
            if (this.cut.error !== undefined) watch.abort(this.cut.error);
            this.cut.cutters.add(cutter);
            const off = this.pauses.watchPauses(() => {
              if (pauseEnd(inner) > clock.now()) watch.abort(PAUSED);
            });
            let held: Turns | undefined;
            try {
              for (let i = 0; i < gates.length; i++) {
                const [lane, cost] = gates[i]!;
                const lock = bud.turns(lane, 'grant');
                const turn = this.turns.turn(lock, ticket, watch.signal, deadline, clock);
                if (turn !== undefined) await turn;
                // Hand over hand: the previous lane's turn ends once this one's is held.
                held?.release();
                held = lock;
                if (i === 0) unreserve();
                // Looked up again: a later lane's valve may have been dropped while this
                // request waited for an earlier lane's grant (the pause checks see the new one).
                let valve = inner[i + 1]!;
                if (valve.isClosed()) inner[i + 1] = valve = bud.valve(lane);
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
              this.cut.cutters.delete(cutter);
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
              // Aborted by the valve (close() without drain, a lease lost), not by the caller:
              // the valve's reason, not the HTTP error Octokit makes of the abort.
              if (jobSignal.aborted && !signal?.aborted) {
                const reason = jobSignal.reason;
                const closing = reason instanceof ValveError && reason.code === 'CLOSED';
                return { ok: false, error: closing ? abortedInFlightError() : reason };
              }
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
