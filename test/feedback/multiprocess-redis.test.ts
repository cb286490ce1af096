/**
 * Provider feedback across processes: several worker processes (node --import tsx
 * fetch-worker.ts), each with createValve + redisStore (ioredis) sharing one id and prefix,
 * each with several concurrent callers using `valve.wrapFetch(fetch)` against one local fake
 * provider (GitHub's secondary limit answering 429 + Retry-After once a burst is spent).
 *
 * What is checked, from the provider's request log joined with each worker's own log:
 * - After the first 429 was sent, no request from any process arrives until the pause that
 *   429 announced ends (sent time + Retry-After), except requests granted before the pause was
 *   written to Redis ("a grant issued before the pause can still start"). Precisely: the pause
 *   write's time p0 is read on the store's clock (its reply's end minus its length, earliest
 *   write); each dispatch carries a store-clock bound of its own grant (the latest granting
 *   acquisition of its process before the dispatch), and an arrival inside the pause is
 *   allowed only if that bound is before p0. There can be at most one such request per
 *   in-flight slot of all processes together.
 * - On the store's clock: no acquisition granted anything while any written pause was active,
 *   and each one made then reported the pause.
 * - Every process saw the shared pause (its own 'pause' from the header, or a 'remote' one)
 *   before it ended, at the latest when its first store call after the write answered; from
 *   then until the pause ended it asked the store for nothing and started only jobs granted
 *   before the write.
 * - Every request finally succeeds (retries keep their place and keep working).
 *
 * With a subscriber, other processes hear the pause at once. Without one they learn it at their
 * next store call; the store-level promise is the same ("after a pause is written, the store
 * grants no jobs until it expires; a grant issued before the pause can still start"), so the
 * same checks apply to both.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Rule } from '../../src/rules/rule.js';
import { type FakeProvider, type LoggedRequest, startFakeProvider } from '../helpers/fake-provider.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { type RunningWorker, spawnWorker as spawnProcess } from '../helpers/workers.js';
import type { FetchWorkerConfig, FetchWorkerReport } from './fetch-worker.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const workerFile = path.join(here, 'fetch-worker.ts');

const PROVIDER = 'github-secondary' as const;
const PROCESSES = 3;
const CALLERS = 5;
const CONCURRENCY = 3;
/** Provider: 6 requests per 1 s window, then 429 with Retry-After (whole seconds). */
const PROVIDER_LIMIT = 6;
const WINDOW_MS = 1000;
/** Shared rule: a burst of 8 (more than the provider allows), then 25/s. */
const RULES: Rule[] = [{ limit: 25, interval: '1s', burst: 8 }];

/** Spawns a worker; it connects, says "ready", and starts at the time given to go(). */
const spawnWorker = (config: FetchWorkerConfig): RunningWorker<FetchWorkerReport> =>
  spawnProcess<FetchWorkerReport>(workerFile, 'FETCH_WORKER', config, 30_000);

let server: FakeProvider;

beforeAll(async () => {
  server = await startFakeProvider({
    providers: { [PROVIDER]: { limit: PROVIDER_LIMIT, windowMs: WINDOW_MS, limitedStatus: 429 } },
  });
});

afterAll(async () => {
  await server?.stop();
});

async function runWorkers(subscriber: boolean): Promise<FetchWorkerReport[]> {
  server.reset();
  const redis = sharedRedis();
  const prefix = uniquePrefix('fetch-mp');
  const id = `fetch-mp:${Math.random().toString(36).slice(2)}`;
  const workers = Array.from({ length: PROCESSES }, (_, i) =>
    spawnWorker({
      name: `w${i}`,
      target: { host: redis.host, port: redis.port },
      prefix,
      id,
      rules: RULES,
      subscriber,
      concurrency: CONCURRENCY,
      callers: CALLERS,
      retries: 5,
      url: server.urlFor(PROVIDER),
      warmUrl: server.urlFor('stripe', `/warm/${i}`),
    }),
  );
  await Promise.all(workers.map((w) => w.ready));
  const startAt = Date.now() + 300;
  for (const w of workers) w.go(startAt);
  return await Promise.all(workers.map((w) => w.report));
}

interface Checked {
  first429: LoggedRequest;
  announcedEnd: number;
  /** The first pause write, store clock. */
  p0: number;
  storePauseMs: number;
  /** Arrivals inside the announced pause, all granted before p0. */
  inFlight: LoggedRequest[];
  limited: number;
  retries: number;
  learnt: { name: string; source: string; afterWriteMs: number }[];
  skew: number;
}

const worker = (tag: string | undefined) => tag?.split('/')[0] ?? '';
const caller = (tag: string | undefined) => tag?.split('#')[0] ?? '';

function check(reports: FetchWorkerReport[], subscriber: boolean): Checked {
  // Every caller succeeded; nothing failed against Redis.
  for (const r of reports) {
    expect(r.statuses, r.name).toEqual(Array(CALLERS).fill(200));
    expect(r.storeErrors, r.name).toEqual([]);
    expect(r.notifies, r.name).toBe(subscriber);
  }
  const log = server.requests(PROVIDER);
  const dispatches = new Map(reports.flatMap((r) => r.dispatches.map((d) => [d.tag, d] as const)));
  // The logs join: every request the provider saw is a dispatch of some worker, and vice versa.
  expect(log.map((r) => r.tag).sort()).toEqual([...dispatches.keys()].sort());

  // Retries kept working: every 429 was followed by a 200 for the same caller.
  const limited = log.filter((r) => r.limited);
  expect(limited.length).toBeGreaterThan(0);
  for (const l of limited) {
    expect(
      log.some((r) => r.at > l.at && caller(r.tag) === caller(l.tag) && r.status === 200),
      `retry of ${l.tag}`,
    ).toBe(true);
  }
  const retries = reports.reduce((s, r) => s + r.retries, 0);
  expect(retries).toBe(limited.length);

  // The first 429 the provider sent, and the pause it announced (server clock).
  const first429 = limited[0]!;
  const retryAfter = Number(first429.headers['retry-after']);
  expect(retryAfter).toBeGreaterThan(0);
  const announcedEnd = first429.at + retryAfter * 1000;

  // The store's clock (Redis TIME) and the processes' clocks agree: each acquisition's store time
  // falls between its local send and receive (a few ms of slack), so times compare across them.
  expect(reports.every((r) => r.acquires.length > 0)).toBe(true);
  const skewOf = (a: FetchWorkerReport['acquires'][number]) => Math.max(a.sentAt - a.now, a.now - a.at, 0);
  const skew = Math.max(...reports.flatMap((r) => r.acquires.map(skewOf)));
  const worst = reports.flatMap((r) =>
    r.acquires.filter((a) => skewOf(a) >= 5).map((a) => ({ worker: r.name, ...a })),
  );
  expect(
    skew,
    `store times outside their call's local send and receive: ${JSON.stringify(worst)}`,
  ).toBeLessThan(5);

  // The pause writes, on the store's clock. For a write that extended the pause, until - ms is
  // the store's time of that write; for one that did not, it is later than the pause's start.
  // So the earliest until - ms is when the first pause was written.
  // (Should no process write it, p0 is taken as the 429's send time, so the next check still
  // reports what reached the provider during the pause before the missing write fails the test.)
  const writes = reports.flatMap((r) => r.pauseWrites.map((w) => ({ ...w, start: w.until - w.ms })));
  const p0 = writes.length > 0 ? Math.min(...writes.map((w) => w.start)) : first429.at;
  expect(p0).toBeGreaterThan(first429.at - 5);

  // The property: after the first 429 was sent, nothing arrives until the announced end, except
  // requests granted before the pause was written.
  const during = log.filter((r) => r.at > first429.at && r.at < announcedEnd - 1);
  const late = during.filter((r) => !(dispatches.get(r.tag!)!.grantBound < p0));
  expect(
    late.map((r) => ({
      tag: r.tag,
      arrivedAfter429Ms: r.at - first429.at,
      grantBoundAfterWriteMs: dispatches.get(r.tag!)!.grantBound - p0,
    })),
    'requests granted after the pause was written that reached the provider during it',
  ).toEqual([]);
  // Those were in flight: at most one per slot of all processes.
  expect(during.length).toBeLessThanOrEqual(PROCESSES * CONCURRENCY);
  expect(writes.length, 'a pause was written to Redis').toBeGreaterThan(0);
  const firstWrite = writes.find((w) => w.start === p0)!;

  // Store clock: no acquisition granted anything while a written pause was active, and each
  // one made then reported the pause.
  for (const r of reports) {
    for (const a of r.acquires) {
      for (const w of writes) {
        if (a.now > w.start + 0.01 && a.now < w.until - 0.01) {
          expect({ worker: r.name, granted: a.granted }).toEqual({ worker: r.name, granted: 0 });
          expect(a.pausedUntil, r.name).toBeGreaterThanOrEqual(w.until - 0.01);
        }
      }
    }
  }

  // Every process that wrote the pause or asked the store while it lasted saw it before it
  // ended (its own write from the header, or a remote one), at the latest when its first store
  // call after the write answered. (A process that did neither, its callers all in flight or
  // done, had nothing to learn it from: a wake-up is only a cue to ask the store.)
  const learnt: Checked['learnt'] = [];
  for (const r of reports) {
    const seen = r.events.find(
      (e) =>
        e.type === 'pause' &&
        (e.source === 'remote' || e.source === 'retry-after') &&
        e.until! >= announcedEnd - 5 &&
        e.at < announcedEnd,
    );
    const own = r.pauseWrites.find((w) => w.at < announcedEnd && w.until >= announcedEnd - 5);
    const next = r.acquires.find((a) => a.now > p0 + 0.01 && a.now < firstWrite.until - 0.01);
    if (seen === undefined && own === undefined && next === undefined) continue;
    expect(
      seen,
      `${r.name} saw the shared pause (ending ${announcedEnd.toFixed(1)}); its pause events: ${JSON.stringify(
        r.events.filter((e) => e.type === 'pause'),
      )}`,
    ).toBeDefined();
    // The moment this process knew: its own write began (the valve pauses locally first), or the event.
    const knew = Math.min(seen!.at, own?.at ?? Number.POSITIVE_INFINITY);
    // From then on it asked the store nothing until the pause ended (50 ms of slack for its
    // estimate of the store's clock), but for at most one recheck when its wake-ups were
    // (re)confirmed (a valve that was idle or not yet listening may have missed a resume), which
    // the store refuses for the pause; and it started only jobs granted before the write.
    const asked = r.acquires.filter((a) => a.sentAt > knew + 0.5 && a.sentAt < announcedEnd - 50);
    expect(
      asked.length,
      `${r.name} asked the store while it knew of the pause: ${JSON.stringify(asked)}`,
    ).toBeLessThanOrEqual(1);
    for (const a of asked) {
      expect({ granted: a.granted, paused: (a.pausedUntil ?? 0) >= announcedEnd - 5 }, r.name).toEqual({
        granted: 0,
        paused: true,
      });
    }
    const early = r.dispatches.filter(
      (d) => d.at > knew + 0.5 && d.at < announcedEnd - 1 && !(d.grantBound < p0),
    );
    expect(early, `${r.name} dispatched after it knew of the pause`).toEqual([]);
    // It knew at the latest when its first store call after the write answered (without a
    // subscriber that is how it learns; with one, the notification usually comes first): it
    // sent no other store call between that answer and the moment it knew.
    if (next) {
      const between = r.acquires.filter((a) => a.sentAt > next.at && a.sentAt < knew);
      expect(
        between,
        `${r.name} learnt the pause from its next store call (answered ${(knew - next.at).toFixed(1)} ms before it knew)`,
      ).toEqual([]);
    }
    learnt.push({ name: r.name, source: seen!.source!, afterWriteMs: knew - firstWrite.ackAt });
  }

  return {
    first429,
    announcedEnd,
    p0,
    storePauseMs: firstWrite.until - p0,
    inFlight: during,
    limited: limited.length,
    retries,
    learnt,
    skew,
  };
}

describe('wrapFetch in several processes sharing a pause through Redis', () => {
  for (const subscriber of [true, false]) {
    it(`after the first 429 no request from any process reaches the provider until the pause ends (${subscriber ? 'with' : 'without'} a subscriber)`, async () => {
      const reports = await runWorkers(subscriber);
      const c = check(reports, subscriber);
      const log = server.requests(PROVIDER);
      console.log(
        `${subscriber ? 'subscriber' : 'no subscriber'}: ${PROCESSES} processes × ${CALLERS} callers, ` +
          `${log.length} requests (${c.limited} × 429, ${c.retries} retries), announced pause ` +
          `${(c.announcedEnd - c.first429.at).toFixed(0)} ms, written ${(c.p0 - c.first429.at).toFixed(1)} ms ` +
          `after the 429 was sent (store pause ${c.storePauseMs.toFixed(0)} ms); arrivals during it: ` +
          `${c.inFlight.length} (all granted before the write: ${c.inFlight.map((r) => `${worker(r.tag)} +${(r.at - c.first429.at).toFixed(1)} ms`).join(', ') || 'none'}); ` +
          `clock skew ≤ ${c.skew.toFixed(2)} ms; learnt: ${c.learnt.map((l) => `${l.name} ${l.source} ${l.afterWriteMs.toFixed(1)} ms`).join(', ')}`,
      );
      // The workers take up to 30 s to be ready on a loaded machine (spawnWorker's own limit).
    }, 90_000);
  }
});
