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
import { anySignal } from '../../feedback/fetch.js';
import { observe } from '../../feedback/observe.js';
import { feedbackState } from '../../feedback/state.js';
import type { ValveInternals } from '../../feedback-port.js';
import type { Valve } from '../../types.js';
import { internalsOf } from '../../valve.js';
import { type AnswerInput, header, type RateLimitAnswer, readAnswer } from './answers.js';
import { Lanes } from './lanes.js';
import { classify, laneOfResource, type RateLane, type RequestClass } from './limits.js';
import { isEnabled, readSettings, type Settings, type ThrottledRequestOptions } from './options.js';

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

  /** Runs `job` in `valve` at the request's place there (its first attempt's, for a retry). */
  run<T>(
    index: number,
    valve: Valve,
    job: (ctx: { signal: AbortSignal }) => T | Promise<T>,
    cost: number,
    signal: AbortSignal | undefined,
  ): Promise<T> {
    if (this.valves[index] !== valve) {
      // A valve dropped while idle and made again has its own positions.
      this.valves[index] = valve;
      this.sequences[index] = undefined;
    }
    return internals(valve).runAt(job, { cost, signal }, this.sequences[index], (used) => {
      this.sequences[index] ??= used;
    });
  }
}

class Throttle {
  private readonly lanes: Lanes;

  constructor(
    private readonly settings: Settings,
    private readonly octokit: OctokitLike,
    /** The key when `throttle.key` is not given: the installation the Octokit was created for. */
    private readonly defaultKey: string | undefined,
  ) {
    this.lanes = new Lanes(settings);
  }

  close(options?: { drain?: boolean }): Promise<void> {
    return this.lanes.close(options);
  }

  /** The budget id of a request: `<id>` or `<id>:<key>`. */
  private budgetOf(options: ThrottledRequestOptions): string {
    const keyFn = this.settings.key;
    const key = keyFn === undefined ? this.defaultKey : keyFn(options, this.octokit);
    if (key === undefined) return this.settings.id;
    if (typeof key !== 'string') {
      throw new TypeError(`Expected \`throttle.key\` to return a string or undefined, got ${describe(key)}`);
    }
    return `${this.settings.id}:${key}`;
  }

  async request(request: RequestFn, options: ThrottledRequestOptions): Promise<unknown> {
    const method = String(options.method ?? 'GET').toUpperCase();
    const klass = classify(method, String(options.url ?? ''), options);
    // Token requests made by an auth strategy while the requests that need the token wait.
    if (klass.auth) return request(options);
    const budget = this.budgetOf(options);
    if (options.request === undefined || options.request === null) options.request = {};
    const requestOptions = options.request;
    const signal = requestOptions.signal ?? undefined;
    const places = new Places();
    const gates = klass.lanes;
    for (let retryCount = 0; ; retryCount++) {
      // Every rate lane grants the request at its place, then `all` runs it.
      for (let i = 0; i < gates.length; i++) {
        const [lane, cost] = gates[i]!;
        await places.run(i, this.lanes.group(lane).valve(Lanes.id(budget, lane)), noop, cost, signal);
      }
      const all = this.lanes.all.valve(budget);
      // The request's primary lane counts its requests in flight, so that a remaining count no
      // larger than the requests sent after this one reads as spent (see observe()).
      const primary = internals(this.lanes.group(klass.primary).valve(Lanes.id(budget, klass.primary)));
      const inFlight = feedbackState(primary);
      let sent = -1;
      const outcome = await places.run(
        gates.length,
        all,
        async ({ signal: jobSignal }): Promise<Outcome> => {
          sent = inFlight.begin();
          try {
            const attempt = {
              ...options,
              request: { ...requestOptions, signal: anySignal(jobSignal, signal ?? undefined) },
            };
            return { ok: true, response: await request(attempt) };
          } catch (error) {
            return { ok: false, error };
          }
        },
        1,
        signal,
      );
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
