import { observe } from '../../feedback/observe.js';
import type { ValveInternals } from '../../feedback-port.js';
import { type AnswerInput, header, type RateLimitAnswer, resetSeconds } from './answers.js';
import type { Lanes } from './lanes.js';
import { laneOfResource, type RateLane, type RequestClass } from './limits.js';
import type { Settings } from './options.js';
import { ResourcePauses } from './resources.js';
import { type Sleeper, Sleepers } from './sleepers.js';
import { type Cut, maxWaitError, onAbort, pauseEnd } from './waiting.js';

/*
 * The pauses of one client: a response's rate-limit headers and a rate-limit answer pause their
 * lane (observe(), pause()); the requests waiting outside the valves for a pause to end (sleep(),
 * woken by sleepers.ts); and the jobs holding a slot, told when a lane of theirs is paused
 * (watchPauses(), paused()). Used by the request flow in throttle.ts.
 */

/** The part of an Octokit instance the pauses use: its log. */
interface OctokitLog {
  log?: { warn?: (...args: unknown[]) => unknown };
}

export class Pauses {
  /** Requests waiting for a pause to end (woken in the order they began to wait). */
  private readonly sleepers = new Sleepers();
  /** The next sleeper's place in the order of waits. */
  private seqs = 0;
  /** A pause deleted early (resume(), here or elsewhere): every sleeper whose pauses ended wakes. */
  private readonly onResume = () => this.sleepers.wakeEnded();
  /** Jobs holding a slot while they wait for grants: told when a lane is paused (here, or learnt from the store). */
  private readonly watchers = new Set<() => void>();
  /** The pauses of the resources valve has no lane for (kept by this client). */
  readonly resources = new ResourcePauses();

  constructor(
    private readonly settings: Settings,
    private readonly octokit: OctokitLog,
    private readonly lanes: Lanes,
    private readonly cut: Cut,
  ) {
    // One listener per valve (made with it, kept while it lives) for every watcher.
    lanes.onPause = () => this.paused();
  }

  /**
   * Waits, holding nothing, until no pause of `valves` is known (or the deadline: MAX_WAIT; the
   * signal: its reason; close(): CLOSED). Requests that waited for the same pause wake in the
   * order they began to wait.
   */
  async sleep(
    valves: readonly ValveInternals[],
    deadline: number,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const clock = valves[0]!.clock;
    // One place in the order for the whole wait, a pause extended meanwhile included.
    const seq = this.seqs++;
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      if (this.cut.error !== undefined) throw this.cut.error;
      const now = clock.now();
      const end = pauseEnd(valves);
      if (end <= now) return;
      if (deadline <= now) throw maxWaitError();
      await new Promise<void>((resolve, reject) => {
        const sleeper: Sleeper = {
          valves,
          wakeAt: Math.min(end, deadline),
          seq,
          index: -1,
          wake: () => {
            done();
            resolve();
          },
        };
        let off: (() => void) | undefined;
        const cutter = (reason: unknown) => {
          done();
          reject(reason);
        };
        const done = () => {
          this.sleepers.remove(sleeper);
          off?.();
          this.cut.cutters.delete(cutter);
        };
        this.sleepers.add(sleeper, clock);
        // A resume() (here or, through the store's wake-ups, elsewhere) ends the wait early. The
        // valve empties its set when it calls it: added again by each sleeper.
        for (const v of valves) v.pauseWaiters.add(this.onResume);
        if (signal !== undefined) off = onAbort(signal, cutter);
        this.cut.cutters.add(cutter);
      });
    }
  }

  /** A lane was paused (by this client, or learnt from the store): jobs waiting for grants look at their lanes' pauses again. */
  private paused(): void {
    for (const check of [...this.watchers]) check();
  }

  /** Calls `check` on each pause of a lane (learnt from the store, or this client's); returns the off switch. */
  watchPauses(check: () => void): () => void {
    this.watchers.add(check);
    return () => this.watchers.delete(check);
  }

  /**
   * A response that is not a rate-limit answer: `x-ratelimit-remaining: 0` (or a count no larger
   * than the requests sent after this one, still in flight) pauses its resource's lane until
   * `x-ratelimit-reset`, in every process, so the next request waits instead of meeting a 403.
   * Only GitHub's pair is read, and only with a reset in epoch seconds, as GitHub sends it. A
   * resource valve has no lane for pauses the requests of its route, in this client, at
   * `remaining: 0` only (resources.ts).
   */
  observe(
    budget: string,
    klass: RequestClass,
    input: AnswerInput,
    now: number,
    primary: ValveInternals,
    sent: number,
  ): void {
    const remaining = header(input.headers, 'x-ratelimit-remaining');
    const reset = header(input.headers, 'x-ratelimit-reset');
    const resetMs = resetSeconds(reset) * 1000;
    if (remaining === undefined || reset === undefined || !(resetMs > now)) return;
    const resource = header(input.headers, 'x-ratelimit-resource');
    const lane = resource === undefined ? klass.primary : laneOfResource(resource);
    if (lane === undefined) {
      if (remaining === '0') this.pauseResource(budget, klass, resource!, resetMs - now, input, primary);
      return;
    }
    const valve = lane === klass.primary ? primary : this.lanes.budget(budget).valve(lane);
    const headers = { 'x-ratelimit-remaining': remaining, 'x-ratelimit-reset': reset };
    const reading = observe(valve, { status: input.status, headers }, valve === primary ? sent : undefined);
    // A reset past feedback.maxPause (a year away) was cut to it, as for a 403: said once, here.
    if (reading?.capped === true && reading.waitMs > 0) {
      this.warnCapped(
        Math.round(resetMs - now),
        'x-ratelimit-reset',
        `the ${lane} lane pauses`,
        reading.waitMs,
      );
    }
    this.paused();
  }

  /**
   * Pauses the lane the answer is about (every request of the budget for a secondary limit) for
   * `retryAfter × retryAfterBaseValue`; a primary limit's pause ends at `x-ratelimit-reset` when
   * that comes sooner (plugin-throttling's retryAfter adds a second and rounds up). A primary
   * limit of a resource valve has no lane for pauses no lane: the requests of its route wait, in
   * this client (resources.ts).
   */
  pause(budget: string, klass: RequestClass, answer: RateLimitAnswer, input: AnswerInput, now: number): void {
    let ms = Math.ceil(answer.retryAfter * this.settings.retryAfterBaseValue);
    const detail = { status: input.status, kind: answer.kind, retryAfter: answer.retryAfter };
    let valve: ValveInternals;
    let name: string;
    let what = 'the budget pauses';
    if (answer.kind === 'secondary') {
      valve = this.lanes.budget(budget).valve('all');
      name = 'retry-after';
    } else {
      const reset = resetSeconds(header(input.headers, 'x-ratelimit-reset')) * 1000;
      if (reset > now) ms = Math.min(ms, reset - now);
      if (answer.lane === undefined && answer.resource !== undefined) {
        this.pauseResource(
          budget,
          klass,
          answer.resource,
          ms,
          input,
          this.lanes.budget(budget).valve(klass.primary),
        );
        return;
      }
      const lane: RateLane = answer.lane ?? klass.primary;
      valve = this.lanes.budget(budget).valve(lane);
      name = 'x-ratelimit-reset';
      what = `the ${lane} lane pauses`;
    }
    if (!(ms > 0)) return;
    ms = this.cap(valve, ms, name, input, answer.retryAfter, what);
    valve.pauseInBackground(ms, name === 'retry-after' ? 'retry-after' : 'ratelimit-header', detail);
    this.paused();
  }

  /** Pauses the route of a request whose resource valve has no lane for, for `ms`, in this client. */
  private pauseResource(
    budget: string,
    klass: RequestClass,
    resource: string,
    ms: number,
    input: AnswerInput,
    primary: ValveInternals,
  ): void {
    if (!(ms > 0)) return;
    const what = `requests to ${klass.route} (resource ${resource.slice(0, 100)}) pause`;
    ms = this.cap(primary, ms, 'x-ratelimit-reset', input, undefined, what);
    const now = primary.clock.now();
    this.resources.pause(budget, klass.route, resource, now + ms, now);
  }

  /**
   * `ms` cut to the valve's feedback.maxPause: nonsense (a year, 1e12 s) never pauses longer, as
   * observe() caps a header's wait; reported ('feedback-ignored' and octokit.log.warn), not thrown.
   */
  private cap(
    valve: ValveInternals,
    ms: number,
    name: string,
    input: AnswerInput,
    retryAfter: number | undefined,
    what: string,
  ): number {
    const maxPause = valve.feedback.maxPause;
    if (ms <= maxPause) return ms;
    valve.emit('feedback-ignored', {
      header: name,
      value: (header(input.headers, name) ?? String(retryAfter)).slice(0, 200),
      reason: 'capped',
      status: input.status,
      cappedTo: maxPause,
      requestedMs: ms,
    });
    this.warnCapped(ms, name, what, maxPause);
    return maxPause;
  }

  /** octokit.log.warn: GitHub asked for a wait longer than a pause lasts (Infinity: a number too large for a double). */
  private warnCapped(ms: number, name: string, what: string, maxPause: number): void {
    const asked = Number.isFinite(ms) ? `a ${ms} ms wait` : 'a wait too long to count';
    this.octokit.log?.warn?.(
      `valve/octokit: GitHub asked for ${asked} (${name}); ${what} for ${maxPause} ms, the most it pauses`,
    );
  }
}
