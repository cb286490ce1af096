/**
 * The fleet window (stores/window-record.ts, window.lua) across processes: three worker
 * processes (fleet-worker.ts), each a valve over redisStore sharing one id, send through
 * `wrapFetch` to one real express-rate-limit server (a window of 20 per second per client,
 * opened by its first request, with its standard and legacy headers), with rules twice too loose.
 *
 * Checked, from the workers' logs of the fleet window and the provider's own log:
 * - at most one probe is in flight at a time across all processes (the intervals from a probe's
 *   ticket to its report never overlap), and no request of any process gets a ticket while a
 *   probe is unanswered (every later ticket came after the probe's report was sent, or after
 *   the probe's 2 s time-to-live, which a busy machine's answer may outlast);
 * - every request ends 200 and at most 5 % of the requests the provider saw were answered 429,
 *   none in the provider's first window (the id's first request is a probe).
 *
 * And, in this process, that a valve's maxWait bounds a granted request's wait for its ticket.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { PROBE_TTL_MS } from '../../src/feedback/fleet.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { createValve } from '../../src/valve.js';
import { type RealLimiter, startRealLimiter } from '../helpers/real-limiters.js';
import { connectClient } from '../helpers/redis-clients.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { expectAllEnded200, runFleetWorkers } from './fleet-run.js';
import type { FleetWorkerReport } from './fleet-worker.js';

const PROCESSES = 3;
const CALLERS = 10;
const PER_PROCESS = 50;
const LIMIT = 20;
const WINDOW_MS = 1000;

let warm: Server;
let warmUrl = '';

beforeAll(async () => {
  warm = createServer((_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => warm.listen(0, '127.0.0.1', resolve));
  warmUrl = `http://127.0.0.1:${(warm.address() as AddressInfo).port}/warm`;
});

afterAll(async () => {
  warm?.closeAllConnections();
  await new Promise((resolve) => warm?.close(resolve));
});

function runFleet(provider: RealLimiter): Promise<FleetWorkerReport[]> {
  return runFleetWorkers({
    processes: PROCESSES,
    prefix: uniquePrefix('fleet-window'),
    id: `fleet:${Math.random().toString(36).slice(2)}`,
    rules: [{ limit: LIMIT * 2, interval: WINDOW_MS, algorithm: 'sliding-window' }],
    callers: CALLERS,
    requests: PER_PROCESS,
    url: `${provider.url}/item`,
    warmUrl,
    delayMs: 300,
  });
}

describe('the fleet window through Redis, 3 processes against express-rate-limit', () => {
  it('one probe in flight at a time, nothing else sent while it is; rules twice too loose: every request ends 200, at most 5 % 429s', async () => {
    const provider = await startRealLimiter('express', { limit: LIMIT, windowMs: WINDOW_MS });
    let reports: FleetWorkerReport[];
    try {
      reports = await runFleet(provider);
    } finally {
      await provider.stop();
    }
    expectAllEnded200(reports, PROCESSES * PER_PROCESS);
    const limited = provider.log.filter((r) => r.status === 429).length;
    expect(limited, `${limited} × 429 in ${provider.log.length} requests`).toBeLessThanOrEqual(
      Math.floor(provider.log.length * 0.05),
    );

    // The id's first request learns the window alone: the 30 callers do not all send into the
    // provider's first window before any answer came back (10 × 429 there before it did).
    const first = Math.min(...provider.log.map((r) => r.t));
    const opening = provider.log.filter((r) => r.t < first + WINDOW_MS);
    expect(
      opening.filter((r) => r.status === 429),
      "429s in the provider's first window",
    ).toEqual([]);
    expect(opening.length).toBeLessThanOrEqual(LIMIT);

    const tickets = reports.flatMap((r) => r.tickets.map((t) => ({ ...t, worker: r.name })));
    const reported = new Map<number, { sentAt: number; at: number; worker: string }>();
    for (const r of reports) for (const x of r.reports) reported.set(x.seq, { ...x, worker: r.name });
    const probes = tickets.filter((t) => t.probe).sort((a, b) => a.seq - b.seq);
    // Rules twice too loose spend the provider's window: the fleet probes after each reset.
    expect(probes.length).toBeGreaterThan(0);
    // Each probe's span: from its ticket to its report being sent, or to the end of its
    // time-to-live when that comes first: the store lets the fleet go PROBE_TTL_MS after it
    // granted the probe, answered or not (docs/provider-feedback.md), so no earlier than
    // PROBE_TTL_MS after the probe was asked for.
    const spans = probes.map((p) => {
      const r = reported.get(p.seq);
      const expires = p.asked + PROBE_TTL_MS;
      return {
        seq: p.seq,
        worker: p.worker,
        from: p.at,
        sentAt: Math.min(r?.sentAt ?? expires, expires),
        reportSentAt: r?.sentAt ?? null,
        reportedBy: r?.worker ?? null,
      };
    });
    for (let i = 1; i < spans.length; i++) {
      expect(
        spans[i]!.from,
        `probe ${spans[i]!.seq} began before probe ${spans[i - 1]!.seq} was answered`,
      ).toBeGreaterThanOrEqual(spans[i - 1]!.sentAt - 1);
    }
    // Every ticket after a probe was given once the probe's answer was on its way to the store
    // (1 ms of slack: the processes read one clock through their own performance.timeOrigin).
    for (const s of spans) {
      const early = tickets.filter((t) => t.seq > s.seq && t.at < s.sentAt - 1);
      expect(early, `tickets given while probe ${s.seq} was in flight (${JSON.stringify(s)})`).toEqual([]);
    }
  }, 120_000);
});

describe("maxWait bounds a granted request's wait for its fleet ticket, on Redis against express-rate-limit", () => {
  it('a window of 1 a minute spent by the probe: the call granted beside it rejects MAX_WAIT, never sent, nothing left in flight', async () => {
    const provider = await startRealLimiter('express', { limit: 1, windowMs: 60_000 });
    const connection = await connectClient('ioredis', sharedRedis());
    const prefix = uniquePrefix('fleet-maxwait');
    const id = `maxwait:${Math.random().toString(36).slice(2)}`;
    const valve = createValve({
      id,
      store: redisStore({ client: connection.client, subscriber: connection.subscriber, prefix }),
      maxWait: 300,
    });
    try {
      const f = valve.wrapFetch(fetch, { retries: 0 });
      // Both granted at once: one is the id's probe, the other waits in its job for the probe's
      // answer (remaining 0, reset in 60 s: a pause of a minute), then until its maxWait.
      const calls = Promise.allSettled([f(`${provider.url}/a`), f(`${provider.url}/b`)]);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const outcome = await Promise.race([
        calls,
        new Promise<'pending'>((resolve) => {
          timer = setTimeout(() => resolve('pending'), 20_000);
        }),
      ]);
      clearTimeout(timer);
      expect(outcome, 'both calls settled (not held until the window resets in 60 s)').not.toBe('pending');
      const settled = outcome as PromiseSettledResult<Response>[];
      const answered = settled.filter((r) => r.status === 'fulfilled');
      const refused = settled.filter((r) => r.status === 'rejected');
      expect(answered.map((r) => r.value.status)).toEqual([200]);
      expect(refused).toHaveLength(1);
      expect(isValveError(refused[0]!.reason, 'MAX_WAIT')).toBe(true);
      // The provider saw the probe alone.
      expect(provider.log).toHaveLength(1);
      // The fleet's record: the probe's ticket reported, the refused one counted nowhere
      // ("seq,reset,left,low,start,spent,probe,pseq,flight").
      const record = await (connection.client as unknown as { get(key: string): Promise<string | null> }).get(
        `${prefix}:{${id}}:window`,
      );
      const fields = (record ?? '').split(',').map(Number);
      expect(fields[0], `record ${record}`).toBe(1);
      expect(fields[8], `record ${record}`).toBe(0);
    } finally {
      await valve.close();
      await connection.close();
      await provider.stop();
    }
  }, 60_000);
});
