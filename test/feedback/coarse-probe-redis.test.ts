/**
 * Probing a coarse `Retry-After` across processes, on real Redis: three worker processes
 * (fleet-worker.ts), each a valve over redisStore sharing one id with 10 callers, send through
 * `wrapFetch` to a real GCRA server (test/helpers/real-limiters.ts: 20 per s, burst 5) that answers
 * its 429s with a bare whole-second `Retry-After` and nothing else, with rules twice too loose
 * (40 per s, burst 10), so that the fleet meets many 429s.
 *
 * Checked from the workers' own logs of every request (when its ticket was asked for and
 * granted, when fetch was called, when its answer came, status) and of every report to the store
 * (remaining count, the wait the store returned): from the moment a 429's report made the
 * store's window spent until a 200 answers a request whose ticket was asked for after it, the
 * requests of all the processes whose tickets were asked for after it go one at a time (each
 * got its ticket after the previous one was answered): at most one probe is in flight across the
 * fleet. (A ticket asked for before that moment may have been granted before the report; on a
 * loaded machine its answer can reach the worker well after. A probe not answered within its
 * time to live, 2 s, stops holding the others by design.) Every request ends 200.
 */
import { describe, expect, it } from 'vitest';
import { PROBE_TTL_MS } from '../../src/feedback/fleet.js';
import { startRealLimiter } from '../helpers/real-limiters.js';
import { uniquePrefix } from '../helpers/shared-servers.js';
import { expectAllEnded200, runFleetWorkers } from './fleet-run.js';
import type { FleetWorkerReport } from './fleet-worker.js';

const PROCESSES = 3;
const CALLERS = 10;
const PER_PROCESS = 40;
/** Slack for the processes' clocks (each reads performance.timeOrigin + performance.now()), ms. */
const SLACK = 1;

interface Sent {
  readonly worker: string;
  readonly seq: number;
  readonly askedAt: number;
  readonly ticketAt: number;
  readonly sent: number;
  readonly answered: number;
  readonly status: number;
}

/**
 * The spans during which the fleet probes. Each starts at the report of a 429 that the store
 * took as spending the window (a wait returned; the store applied it between the report's
 * sending and its answer) and ends at the first 200 answering a request whose ticket was asked
 * for after the report was sent (the probe that found the provider open, or earlier: ending a
 * span early only checks less). Its requests are those whose tickets were asked for after the
 * report's answer (so granted after the store applied it) and granted before the span's end:
 * the probes.
 */
function probeSpans(reports: FleetWorkerReport[]): { from: number; to: number; sent: Sent[] }[] {
  const requests: Sent[] = reports
    .flatMap((r) => r.requests.map((q) => ({ worker: r.name, ...q })))
    .sort((a, b) => a.ticketAt - b.ticketAt || a.seq - b.seq);
  const starts = reports
    .flatMap((r) => r.reports)
    .filter((x) => x.remaining === 0 && x.wait > 0)
    .sort((a, b) => a.at - b.at);
  const reported = new Map<number, number>();
  for (const r of reports) for (const x of r.reports) reported.set(x.seq, x.at);
  const spans: { from: number; to: number; sent: Sent[] }[] = [];
  for (const start of starts) {
    const from = start.at;
    if (spans.length > 0 && from <= spans[spans.length - 1]!.to) continue; // the same span
    let to = Number.POSITIVE_INFINITY;
    for (const q of requests) {
      if (q.status === 200 && q.askedAt >= start.sentAt - SLACK && q.answered > start.sentAt) {
        to = Math.min(to, q.answered);
      }
    }
    // Asked for after the report was applied, granted before the span's end (as seen by its
    // worker, so no later).
    const sent = requests.filter((q) => q.askedAt >= from + SLACK && q.ticketAt <= to);
    // A probe whose answer was not reported within its time to live (PROBE_TTL_MS from its
    // grant, no earlier than when it was asked for) stops holding the others, by design: the
    // span is checked up to it.
    const late = sent.findIndex(
      (q) => (reported.get(q.seq) ?? Number.POSITIVE_INFINITY) > q.askedAt + PROBE_TTL_MS,
    );
    spans.push({ from, to, sent: late < 0 ? sent : sent.slice(0, late + 1) });
  }
  return spans;
}

describe('probing a coarse Retry-After through Redis, 3 processes against a GCRA server', () => {
  it('at most one request in flight at a time across the processes while the provider is probed; every request ends 200', async () => {
    const provider = await startRealLimiter('gcra', { limit: 20, windowMs: 1000, burst: 5 });
    let reports: FleetWorkerReport[];
    try {
      // The warm-ups were counted by the provider: 500 ms lets its GCRA state drain before the run.
      reports = await runFleetWorkers({
        processes: PROCESSES,
        prefix: uniquePrefix('coarse-probe'),
        id: `gcra:${Math.random().toString(36).slice(2)}`,
        rules: [{ limit: 40, interval: 1000, burst: 10 }],
        callers: CALLERS,
        requests: PER_PROCESS,
        url: `${provider.url}/item`,
        warmUrl: `${provider.url}/warm`,
        delayMs: 500,
      });
    } finally {
      await provider.stop();
    }
    expectAllEnded200(reports, PROCESSES * PER_PROCESS);
    // Every attempt the workers logged reached the provider, and nothing else did (but the warm-ups).
    const sent = reports.flatMap((r) => r.requests);
    expect(provider.log.filter((r) => r.t >= Math.min(...sent.map((q) => q.sent)) - SLACK)).toHaveLength(
      sent.length,
    );

    const spans = probeSpans(reports);
    // Rules twice too loose meet 429s: the fleet probed, several times, each span ended by a 200.
    expect(spans.length, 'spans of probing').toBeGreaterThanOrEqual(2);
    expect(spans.every((s) => Number.isFinite(s.to))).toBe(true);
    let probes = 0;
    for (const s of spans) {
      probes += s.sent.length;
      for (let i = 1; i < s.sent.length; i++) {
        const [a, b] = [s.sent[i - 1]!, s.sent[i]!];
        expect(
          b.ticketAt,
          `${b.worker} #${b.seq} got its ticket at ${b.ticketAt.toFixed(1)} while ${a.worker}'s probe #${a.seq} (sent ${a.sent.toFixed(1)}) was unanswered until ${a.answered.toFixed(1)}`,
        ).toBeGreaterThanOrEqual(a.answered - SLACK);
        expect(b.sent).toBeGreaterThanOrEqual(b.ticketAt);
      }
    }
    // The fleet probed after its 429s: requests were checked in the spans.
    expect(probes, 'probes checked').toBeGreaterThanOrEqual(2);
  }, 120_000);
});
