import { ValveError } from '../errors.js';
import type { FleetWindow, ValveInternals } from '../feedback-port.js';
import { isThenable } from '../maybe-promise.js';
import type { WindowTicket } from '../stores/store.js';
import type { FleetObservation } from './observe.js';
import { type FeedbackState, feedbackState } from './state.js';
import type { FeedbackReading } from './types.js';

/*
 * wrapFetch's side of the fleet window (stores/window-record.ts): a ticket before each request,
 * a report after each answer, through the store, so that every process sharing the id counts the
 * requests every other process sent and learns the tightest reset any of them saw. A store that
 * fails is left out: the request goes without a ticket (the valve's rules and this process's
 * own reading of the headers still hold), never stuck; the failed call is reported as the
 * valve's other store calls are ('store-error', operation 'window'). While the valve's
 * acquisitions fail (its onStoreError backoff), no ticket is asked: the request would wait a
 * second store timeout for a call that most likely fails too.
 */

/** How long a probe may stay unanswered before the fleet stops waiting for it (ms). */
export const PROBE_TTL_MS = 2000;
/**
 * The probe's time-to-live when this process has seen no answer of the provider yet (ms): a
 * provider that answers later than this is a slow one (below), which an idle fleet's probe does
 * not hold the others for.
 */
export const FIRST_PROBE_TTL_MS = 1000;
/**
 * A provider whose answers usually take longer than this (ms; an LLM API answering a
 * non-streaming call) is slow: the probe of an idle fleet holds nobody for it (probeTtl).
 */
export const SLOW_ANSWER_MS = 1000;
/**
 * A process that has not asked the fleet's window for this long (ms) may find its record
 * forgotten (the store keeps it a minute past its last call, reset and probe): a probe it sends
 * then is likely an idle fleet's (probeTtl).
 */
const IDLE_MS = 50_000;
/** A request that waited this long (ms) in the valve's queue was held back by the fleet's limits. */
const HELD_MS = 1000;
/**
 * How often a request waiting for a probe's answer asks again (ms), for the first PROBE_TTL_MS
 * of its wait; past that (a probe held longer than any wrapFetch asks: a store's stale or foreign
 * state), it asks as for a spent window, 5, 10, 20 … ms later, then every second.
 */
const PROBE_POLL_MS = 5;
/** A wait for a window's reset is re-asked at least this often (ms): a probe may open it sooner elsewhere. */
const RESET_POLL_MS = 1000;

/**
 * Sleeps `ms` on the valve's clock (rejects when `signal` aborts); with `wakers`, also ends when
 * this process reports an answer that may let it go (see reportTicket).
 */
function sleep(
  valve: ValveInternals,
  ms: number,
  signal: AbortSignal,
  wakers?: Set<() => void>,
): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const done = () => {
      valve.clock.clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      wakers?.delete(wake);
    };
    const wake = () => {
      done();
      resolve();
    };
    const onAbort = () => {
      done();
      reject(signal.reason);
    };
    const timer = valve.clock.setTimeout(wake, ms);
    signal.addEventListener('abort', onAbort, { once: true });
    wakers?.add(wake);
  });
}

/**
 * How long the ticket asked for at `now`, if it is a probe, holds the others (ms). While the
 * fleet is busy (this process asked its window within IDLE_MS, or the request waited HELD_MS in
 * the queue, as for a spent window's reset or a coarse Retry-After, whose 429s come back fast):
 * PROBE_TTL_MS. A probe of an idle fleet (the id's first request, the first after the fleet
 * forgot its window) is what makes every concurrent request wait a whole answer: for a provider
 * this process knows to answer within SLOW_ANSWER_MS, PROBE_TTL_MS still (a cold connection's
 * answer is worth waiting for); for one it knows to answer slower, 0 (the hold would cost every
 * concurrent request a whole slow answer, and 2 s of it would not even see a 3 s one's); for one
 * it knows nothing of, FIRST_PROBE_TTL_MS. `queuedAt`: when the request was queued (valve clock).
 */
export function probeTtl(state: FeedbackState, now: number, queuedAt: number): number {
  if (now - state.windowCallAt < IDLE_MS || now - queuedAt >= HELD_MS) return PROBE_TTL_MS;
  if (state.answerMs === undefined) return FIRST_PROBE_TTL_MS;
  return state.answerMs > SLOW_ANSWER_MS ? 0 : PROBE_TTL_MS;
}

/**
 * A ticket to send one request; waits (honouring `signal`) while the fleet's window is spent or a
 * probe is out, and while this process knows of a pause (written since the job was granted).
 * Undefined when the store failed (emitted as a 'store-error'), or while the valve's acquisitions
 * fail (not asked): send without one. No wait goes past `deadline` (valve clock;
 * the attempt's maxWait, counted from when it was queued, as the queue counted it): a request
 * that would wait longer is never sent and rejects MAX_WAIT, and the store is not asked again; a
 * ticket the store hands over after the deadline is reported back unanswered.
 * A refusal counts nothing in the fleet's record, so a request that gives up leaves nothing in
 * flight.
 */
export async function takeTicket(
  valve: ValveInternals,
  window: FleetWindow,
  signal: AbortSignal,
  queuedAt: number,
  deadline = Number.POSITIVE_INFINITY,
): Promise<WindowTicket | undefined> {
  const state = feedbackState(valve);
  // Refusals in a row while the window is spent: the next asks again sooner than the reset.
  let refused = 0;
  // When this request was first refused for a probe (valve clock), undefined until it is.
  let probeSince: number | undefined;
  for (let waited = false; ; waited = true) {
    // A job granted before a pause was written, and held here since, must not send inside it.
    // It ends with the pause when resume() deletes it, and looks again at least every second
    // (the known end also moves when a store answer reports the pause gone).
    const at = valve.clock.now();
    const paused = valve.knownPauseEnd() - at;
    // No wait goes past the deadline, and the store is not asked after it (the first ask goes:
    // the queue granted the job within its maxWait).
    if ((waited || paused > 0) && !(deadline > at)) throw notSent();
    if (paused > 0) {
      await sleep(valve, Math.min(paused, RESET_POLL_MS, deadline - at), signal, valve.pauseWaiters);
      continue;
    }
    // The valve's last acquisition failed (under 'open' this job started without the store):
    // the request goes without a ticket rather than wait for a second failing call.
    if (valve.storeFailing()) return undefined;
    let ticket: WindowTicket;
    try {
      const now = valve.clock.now();
      const ttl = probeTtl(state, now, queuedAt);
      state.windowCallAt = now;
      const t = window.send(ttl);
      ticket = isThenable(t) ? await t : t;
    } catch (err) {
      valve.storeError(err, 'window', 'none');
      return undefined;
    }
    const left = deadline - valve.clock.now();
    if (ticket.seq > 0) {
      if (left > 0) return ticket;
      // The store answered after the deadline (a slow store): the ticket goes back unanswered
      // (it counted as in flight), and the request is not sent.
      await reportTicket(valve, window, ticket, undefined);
      throw notSent();
    }
    if (!(left > 0)) throw notSent();
    // A spent window is asked again 5, 10, 20 … ms later (then every second): the answers still
    // in flight, in any process, can show budget left (a request counted before the lowest count)
    // and the store writes no pause until the count is spent. A known pause is slept through above.
    // A probe's answer is asked for every 5 ms, for as long as a probe may hold (PROBE_TTL_MS).
    if (!ticket.probe) probeSince = undefined;
    else probeSince ??= valve.clock.now();
    const fast = ticket.probe && valve.clock.now() - (probeSince ?? 0) < PROBE_TTL_MS;
    const wait = Math.min(
      ticket.wait,
      left,
      fast ? PROBE_POLL_MS : Math.min(RESET_POLL_MS, PROBE_POLL_MS * 2 ** Math.min(refused++, 10)),
    );
    // This process's own answers wake it as soon as they are reported: a probe's, and one that
    // shows budget left (a request that was in flight turned out counted before the lowest count).
    await sleep(valve, Math.max(1, wait), signal, state.ticketWaiters);
  }
}

/** The rejection of a request whose ticket (or a known pause) outlasted its maxWait: it was never sent. */
function notSent(): ValveError {
  return new ValveError(
    'MAX_WAIT',
    'The request was not sent within its maxWait: it waited for the fleet window or a pause',
  );
}

/** Wakes this process's requests waiting for a ticket: an answer just reported may let them go. */
function wakeTicketWaiters(valve: ValveInternals): void {
  const waiters = feedbackState(valve).ticketWaiters;
  if (waiters.size === 0) return;
  for (const wake of [...waiters]) wake();
}

/**
 * How much of a coarse wait's rounding the first probe waits past its lower bound: 1/16 (62.5 ms
 * for whole seconds). Each probe answered 429 doubles it, so a `Retry-After: 1` is probed at most
 * 62.5, 125, 250 and 500 ms after each 429, and then at the bound the first 429 stated: at most
 * 4 probes answered 429 per coarse wait, one at a time for the whole fleet.
 */
const PROBE_FRACTION = 1 / 16;

/**
 * The wait before probing the provider again after a 429 whose only wait is coarse (`reading`,
 * true reset in [earliest, until]), at `now`: its lower bound plus a step that doubles with each
 * probe answered 429 since the last success, never past `until` nor past `bound` (the tightest
 * upper bound the earlier 429s of the same wait stated, epoch ms).
 */
export function probeDelay(
  reading: FeedbackReading,
  probes: number,
  now: number,
  bound = Number.POSITIVE_INFINITY,
): number {
  const lower = Math.max(0, reading.earliest - now);
  const upper = Math.max(lower, Math.min(reading.until, bound) - now);
  const step = (reading.until - reading.earliest) * PROBE_FRACTION * 2 ** Math.min(probes, 30);
  return Math.min(upper, lower + step);
}

/**
 * The answer to `ticket` arrived (`seen`: what observe() read of it; its window undefined when
 * the attempt failed or described none): reports its window to the fleet's record and writes the
 * pause the record gives when the window's budget is spent (the tightest reset any process saw),
 * with the response's own reading (`held`, the pause observe() left to the fleet) as its detail.
 *
 * A 429 whose only wait is coarse (`seen.coarse`: `Retry-After` in whole seconds, no window) is
 * reported as a spent window that resets at probeDelay(): the fleet pauses that long, then sends
 * one probe (alone in flight for every process sharing the id) whose answer opens the way or, if
 * it is a 429 too, starts the next, longer delay.
 *
 * A report that fails is emitted as a 'store-error' (operation 'window'); this process's own
 * reading decides then. Returns the pause written (ms), 0 when none, undefined when the answer
 * described no window.
 */
export async function reportTicket(
  valve: ValveInternals,
  window: FleetWindow,
  ticket: WindowTicket,
  seen: FleetObservation | undefined,
): Promise<number | undefined> {
  const held = seen?.held;
  let remaining = -1;
  let resetMs = 0;
  let header = seen?.window?.header;
  if (seen?.coarse !== undefined) {
    const state = feedbackState(valve);
    // A 429 to the probe of an earlier coarse 429 (not to the probe of a fresh or reset window):
    // the provider's reset is later than the last delay.
    // Once the bound the first 429 stated has passed, the provider still refusing starts a new
    // coarse wait (probed from its own lower bound again), never an immediate retry.
    if (valve.clock.now() >= state.probeBound) {
      state.probes = 0;
      state.probeBound = Number.POSITIVE_INFINITY;
    }
    if (ticket.probe && state.probeBound < Number.POSITIVE_INFINITY) state.probes++;
    if (seen.coarse.until < state.probeBound) state.probeBound = seen.coarse.until;
    remaining = 0;
    resetMs = probeDelay(seen.coarse, state.probes, valve.clock.now(), state.probeBound);
    header = seen.coarse.header;
  } else if (seen?.window !== undefined) {
    remaining = Math.max(0, Math.floor(seen.window.remaining));
    // No longer than a pause may last (feedback.maxPause): the record refuses tickets until then.
    resetMs = Math.min(seen.window.waitMs, valve.feedback.maxPause);
  }
  let wait: number;
  feedbackState(valve).windowCallAt = valve.clock.now();
  try {
    const w = window.report(ticket.seq, remaining, resetMs);
    wait = isThenable(w) ? await w : w;
    if (ticket.probe || (remaining >= 0 && !(wait > 0))) wakeTicketWaiters(valve);
  } catch (err) {
    valve.storeError(err, 'window', 'none');
    if (ticket.probe) wakeTicketWaiters(valve);
    // Without the fleet's answer, this process's own reading decides, as without a fleet window.
    if (held !== undefined && held.waitMs > 0) valve.pauseInBackground(held.waitMs, held.source, held);
    return held?.waitMs;
  }
  if (remaining < 0) return undefined;
  if (!(wait > 0)) return 0;
  const capped = Math.min(wait, valve.feedback.maxPause);
  const now = valve.clock.now();
  const detail: FeedbackReading =
    held !== undefined
      ? { ...held, waitMs: capped, until: now + capped, earliest: Math.min(held.earliest, now + capped) }
      : {
          waitMs: capped,
          until: now + capped,
          source: 'ratelimit-header',
          header,
          raw: undefined,
          status: undefined,
          model: 'window',
          earliest: now,
          coarse: false,
        };
  valve.pauseInBackground(capped, detail.source, detail);
  return capped;
}
