import type { FleetWindow, ValveInternals } from '../feedback-port.js';
import { isThenable } from '../maybe-promise.js';
import type { WindowTicket } from '../stores/store.js';
import type { FeedbackReading, WindowSeen } from './types.js';

/*
 * wrapFetch's side of the fleet window (stores/window-record.ts): a ticket before each request,
 * a report after each answer, through the store, so that every process sharing the id counts the
 * requests every other process sent and learns the tightest reset any of them saw. A store that
 * fails is left out: the request goes without a ticket (the valve's rules and this process's
 * own reading of the headers still hold), never stuck.
 */

/** How long a probe may stay unanswered before the fleet stops waiting for it (ms). */
export const PROBE_TTL_MS = 2000;
/** How often a request waiting for a probe's answer asks again (ms). */
const PROBE_POLL_MS = 5;
/** A wait for a window's reset is re-asked at least this often (ms): a probe may open it sooner elsewhere. */
const RESET_POLL_MS = 1000;

function sleep(valve: ValveInternals, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      valve.clock.clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = valve.clock.setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A ticket to send one request; waits (honouring `signal`) while the fleet's window is spent or a
 * probe is out. Undefined when the store failed: send without one.
 */
export async function takeTicket(
  valve: ValveInternals,
  window: FleetWindow,
  signal: AbortSignal,
): Promise<WindowTicket | undefined> {
  for (;;) {
    let ticket: WindowTicket;
    try {
      const t = window.send(PROBE_TTL_MS);
      ticket = isThenable(t) ? await t : t;
    } catch {
      return undefined;
    }
    if (ticket.seq > 0) return ticket;
    const wait = Math.min(ticket.wait, ticket.probe ? PROBE_POLL_MS : RESET_POLL_MS);
    await sleep(valve, Math.max(1, wait), signal);
  }
}

/**
 * The answer to `ticket` arrived (or the attempt failed: `seen` undefined): reports its window to
 * the fleet's record and writes the pause the record gives when the window's budget is spent
 * (the tightest reset any process saw), with the response's own window reading (`held`, the
 * pause observe() left to the fleet) as its detail.
 */
export async function reportTicket(
  valve: ValveInternals,
  window: FleetWindow,
  ticket: WindowTicket,
  seen: WindowSeen | undefined,
  held: FeedbackReading | undefined,
): Promise<void> {
  let wait: number;
  try {
    const remaining = seen === undefined ? -1 : Math.max(0, Math.floor(seen.remaining));
    const w = window.report(
      ticket.seq,
      remaining,
      seen === undefined ? 0 : Math.min(seen.waitMs, 31_536_000_000),
    );
    wait = isThenable(w) ? await w : w;
  } catch {
    // Without the fleet's answer, this process's own reading decides, as without a fleet window.
    if (held !== undefined && held.waitMs > 0) valve.pauseInBackground(held.waitMs, held.source, held);
    return;
  }
  if (!(wait > 0) || seen === undefined) return;
  const capped = Math.min(wait, valve.feedback.maxPause);
  const now = valve.clock.now();
  const detail: FeedbackReading =
    held !== undefined
      ? { ...held, waitMs: capped, until: now + capped, earliest: Math.min(held.earliest, now + capped) }
      : {
          waitMs: capped,
          until: now + capped,
          source: 'ratelimit-header',
          header: seen.header,
          raw: undefined,
          status: undefined,
          model: 'window',
          earliest: now,
          coarse: false,
        };
  valve.pauseInBackground(capped, 'ratelimit-header', detail);
}
