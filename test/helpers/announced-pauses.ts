/**
 * The check every integration test makes: the provider sees no request inside a pause it
 * announced, except requests already in flight.
 *
 * The provider logs each request's arrival (`at`), the pause its answer announced
 * (`blockedUntil`: a 429's wait, or 0 remaining until the next unit) and the moment the client
 * sent it (`sentAt`, stamped by {@link stampedFetch} or an equivalent just before the request
 * leaves, after valve admitted it). The client logs each 'pause' event of its valves when it
 * happens. For each announcement A, the client knew of it at `k`: A's arrival if a pause already
 * covered A's wait, else the first 'pause' event after A that covers it (or A's arrival, when
 * none ever did). A request sent after `k` that arrives before A's end is a violation; a request
 * sent before `k` was in flight. All times are epoch ms on the performance-based clock that
 * valve's system clock and the fake servers share.
 */
import type { Valve, ValveGroup } from '../../src/index.js';

export interface Arrival {
  readonly at: number;
  readonly sentAt?: number | undefined;
  readonly blockedUntil?: number | undefined;
}

export interface ClientPause {
  readonly at: number;
  readonly until: number;
}

const now = (): number => performance.timeOrigin + performance.now();

/** Records every 'pause' event of a valve or group, with the time it was emitted. */
export function recordPauses(source: Valve | ValveGroup): ClientPause[] {
  const pauses: ClientPause[] = [];
  (source as Valve).on('pause', ({ until }) => {
    pauses.push({ at: now(), until });
  });
  return pauses;
}

/** Requests that arrived inside an announced pause though they were sent after the client knew of it. */
export function insideAnnouncedPauses(log: readonly Arrival[], pauses: readonly ClientPause[]): Arrival[] {
  const bad = new Set<Arrival>();
  for (const a of log) {
    if (a.blockedUntil === undefined) continue;
    const end = a.blockedUntil;
    const covering = pauses.filter((p) => p.until >= end - 2);
    let known = a.at;
    if (!covering.some((p) => p.at <= a.at)) {
      const after = covering.filter((p) => p.at >= a.at).map((p) => p.at);
      if (after.length > 0) known = Math.min(...after);
    }
    for (const r of log) {
      if (r.sentAt !== undefined && r.sentAt > known + 0.5 && r.at < end - 1) bad.add(r);
    }
  }
  return [...bad];
}

/** A fetch that stamps `x-sent-at` (and passes everything else through) just before the request leaves. */
export function stampedFetch(base: typeof fetch = globalThis.fetch): typeof fetch {
  return (input, init) => {
    const headers = new Headers(input instanceof Request ? input.headers : undefined);
    new Headers(init?.headers).forEach((value, name) => {
      headers.set(name, value);
    });
    headers.set('x-sent-at', String(now()));
    return base(input, { ...init, headers });
  };
}
