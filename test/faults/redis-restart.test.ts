/**
 * Redis killed (SIGKILL) and restarted on the same port mid-run, in each onStoreError mode
 * (issue 4; Guarantees, "Store failures"). Two worker processes share one id on a private
 * server this test starts (and is the only one to kill).
 *
 * - 'wait': no job is lost; each one runs, or rejects with a ValveError code by its maxWait.
 * - 'throw': affected jobs reject promptly with STORE_UNAVAILABLE, with the store's error as cause.
 * - 'open': jobs keep starting during the outage (without the rate rules); local concurrency holds.
 * In every mode: each failed store call emits one 'store-error'; no unhandled rejection; the
 * rate bound holds on the starts granted by the store, on each side of the restart (a restart
 * without persistence loses the rate state: "Store state loss").
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkBounds } from '../helpers/bounds.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import {
  concurrency,
  expectCleanExit,
  intervals,
  lateJobs,
  mono,
  outcomes,
  sleep,
  stalledDuring,
  startGrants,
  startWorker,
  stopWorkers,
  storeErrorAccounting,
  unhandled,
  type Worker,
  worstStall,
} from './harness.js';
import type { WorkerConfig } from './worker.js';

const RULE = { limit: 20, interval: 1000 };
const MAX_WAIT = 3000;
const STORE_TIMEOUT = 1000;
/** Timer and event-loop slack allowed on a loaded 2-core machine when checking maxWait. */
const SETTLE_TOLERANCE = 250;
const OUTAGE = 1200;

const workers: Worker[] = [];
const servers: RedisServer[] = [];
afterAll(async () => {
  await stopWorkers(workers);
  await Promise.all(servers.map((s) => s.stop()));
});

interface Run {
  ws: Worker[];
  killedAt: number;
  restartedAt: number;
  /** Wall clock (epoch ms) between the kill and the restart: splits store-clock grants into the two lives of the server. */
  splitEpoch: number;
}

async function runWithRestart(mode: 'wait' | 'throw' | 'open', over: Partial<WorkerConfig>): Promise<Run> {
  const server = await startRedis();
  servers.push(server);
  const ws = [0, 1].map((i) =>
    startWorker({
      name: `${mode}-${i === 0 ? 'ioredis' : 'node-redis'}`,
      client: i === 0 ? 'ioredis' : 'node-redis',
      host: server.host,
      port: server.port,
      prefix: 'valve',
      id: `restart-${mode}`,
      rules: [RULE],
      onStoreError: mode,
      storeTimeout: STORE_TIMEOUT,
      subscriber: i === 0,
      jobs: 60,
      submitEvery: 50,
      submitAfter: 200,
      durationMs: [10, 40],
      maxWait: MAX_WAIT,
      exitAfterMs: 40_000,
      ...over,
    }),
  );
  workers.push(...ws);
  await Promise.all(ws.map((w) => w.waitFor('start', (e) => e.job === 5)));
  const killedAt = mono();
  server.kill('SIGKILL');
  await server.exited();
  const splitEpoch = Date.now();
  await sleep(OUTAGE);
  await server.restart();
  const restartedAt = mono();
  await expectCleanExit(ws, 40_000);
  return { ws, killedAt, restartedAt, splitEpoch };
}

function commonChecks(run: Run): { storeErrors: number; failedCalls: number } {
  const { ws, splitEpoch } = run;
  expect(unhandled(ws)).toEqual([]);
  let storeErrors = 0;
  let failedCalls = 0;
  for (const w of ws) {
    const acc = storeErrorAccounting(w);
    expect(acc.events, `${w.name}: one 'store-error' per failed store call`).toBe(acc.failedCalls);
    storeErrors += acc.events;
    failedCalls += acc.failedCalls;
  }
  expect(failedCalls).toBeGreaterThan(0);
  const mode = ws[0]!.config.onStoreError;
  for (const w of ws) {
    for (const e of w.of('store-error')) {
      expect(e.action).toBe(e.op === 'acquire' ? mode : e.op === 'renew' ? 'lease-lost' : 'none');
    }
  }
  const starts = startGrants(ws);
  expect(
    checkBounds(
      starts.filter((g) => g.t < splitEpoch),
      RULE,
    ),
  ).toEqual([]);
  expect(
    checkBounds(
      starts.filter((g) => g.t > splitEpoch),
      RULE,
    ),
  ).toEqual([]);
  // Jobs run again once the server is back.
  expect(starts.filter((g) => g.t > splitEpoch).length).toBeGreaterThan(0);
  return { storeErrors, failedCalls };
}

describe('Redis killed and restarted mid-run', () => {
  it("'wait': no job is lost; each runs or rejects with a code by its maxWait", async () => {
    // Demand below the rate, so the rejections come from the outage; a maxWait shorter than
    // the outage, so some jobs wait it out and run, and others reach their maxWait first.
    // Global concurrency too: renewals fail during the outage (LEASE_LOST), and the restarted
    // server has lost the leases; overlap is allowed only for jobs whose lease was lost.
    const maxWait = 1000;
    const limit = 8;
    const run = await runWithRestart('wait', {
      jobs: 40,
      submitEvery: 150,
      maxWait,
      concurrency: { limit, scope: 'global', leaseTtl: 1500 },
      durationMs: [10, 1000], // some run across the kill: their renewal fails
    });
    const { storeErrors } = commonChecks(run);
    const all = outcomes(run.ws);
    const lost = all.filter((o) => o.settled === null);
    const rejected = all.filter((o) => o.ok === false);
    const late = lateJobs(all, maxWait, SETTLE_TOLERANCE, run.ws);
    const waits = all.filter((o) => o.start !== null).map((o) => o.start! - o.submit);
    console.log(
      `[faults] restart, 'wait': ${all.length} jobs, ran ${all.length - rejected.length}, rejected ${rejected.length} ` +
        `(${[...new Set(rejected.map((o) => o.code))].join(',') || 'none'}), lost ${lost.length}, ` +
        `past maxWait+${SETTLE_TOLERANCE}ms ${late.length}, slowest rejection ${Math.max(
          0,
          ...rejected.map((o) => o.settled! - o.submit),
        ).toFixed(
          0,
        )} ms after submit (maxWait ${maxWait}), worst worker stall ${worstStall(run.ws).toFixed(0)} ms, longest wait ${Math.max(...waits).toFixed(0)} ms, ` +
        `store errors ${storeErrors}`,
    );
    if (late.length > 0 && process.env.FAULTS_DEBUG) {
      for (const o of late) {
        const w = run.ws.find((x) => x.name === o.worker)!;
        const from = o.submit - 300;
        const to = (o.settled ?? o.submit + 3000) + 50;
        console.log(`LATE ${JSON.stringify(o)} killed ${run.killedAt} restarted ${run.restartedAt}`);
        for (const e of w.events) {
          const t = 't' in e ? e.t : 't0' in e ? e.t0 : 0;
          if (t >= from && t <= to) console.log(JSON.stringify(e));
        }
      }
    }
    expect(lost).toEqual([]);
    expect(late).toEqual([]);
    const ivs = intervals(run.ws);
    const report = concurrency(ivs, limit);
    // The killed server lost every lease: a lost-lease job counts until the kill at the latest.
    const owned = concurrency(ivs, limit, (iv) =>
      iv.lostAt === null ? iv.end : Math.min(iv.ownedUntil, run.killedAt),
    );
    console.log(
      `[faults] restart, 'wait' with global limit ${limit}: max concurrent ${report.max}, ` +
        `over-limit instants ${report.over.length} (unexplained ${report.unexplained.length}; counting lost ` +
        `leases until the kill: ${owned.max}), ` +
        `leases lost ${run.ws.flatMap((w) => w.of('lease-lost')).length}`,
    );
    expect(report.unexplained).toEqual([]);
    expect(owned.max).toBeLessThanOrEqual(limit);
    for (const o of rejected) {
      expect(['STORE_UNAVAILABLE', 'MAX_WAIT', 'LEASE_LOST']).toContain(o.code);
      if (o.code === 'STORE_UNAVAILABLE') expect(o.cause).not.toBeNull();
      // A job that started and then failed can only have lost its lease.
      if (o.start !== null) expect(o.code).toBe('LEASE_LOST');
    }
    expect(rejected.some((o) => o.code === 'STORE_UNAVAILABLE')).toBe(true);
    // Jobs that were queued during the outage waited for the store, then ran.
    expect(all.some((o) => o.start !== null && o.submit > run.killedAt && o.start > run.restartedAt)).toBe(
      true,
    );
  }, 60_000);

  it("'throw': affected jobs reject promptly with STORE_UNAVAILABLE (with cause)", async () => {
    const run = await runWithRestart('throw', {});
    const { storeErrors } = commonChecks(run);
    const all = outcomes(run.ws);
    const lost = all.filter((o) => o.settled === null);
    const rejected = all.filter((o) => o.ok === false);
    // How long after the store died (or after its submission, if later) each rejection came.
    const lags = rejected.map((o) => o.settled! - Math.max(o.submit, run.killedAt));
    console.log(
      `[faults] restart, 'throw': ${all.length} jobs, rejected ${rejected.length} ` +
        `(${[...new Set(rejected.map((o) => o.code))].join(',')}), lost ${lost.length}, ` +
        `slowest rejection ${Math.max(...lags).toFixed(0)} ms after the failure, store errors ${storeErrors}`,
    );
    expect(lost).toEqual([]);
    expect(rejected.length).toBeGreaterThan(0);
    for (const o of rejected) {
      expect(o.code).toBe('STORE_UNAVAILABLE');
      expect(o.cause).not.toBeNull();
      expect(o.settled!).toBeGreaterThan(run.killedAt);
    }
    for (const o of rejected) {
      const w = run.ws.find((x) => x.name === o.worker);
      const from = Math.max(o.submit, run.killedAt);
      expect(o.settled! - from).toBeLessThan(STORE_TIMEOUT + 500 + stalledDuring(w, from, o.settled!));
    }
  }, 60_000);

  it("'open': jobs keep running during the outage, local concurrency still holds", async () => {
    const run = await runWithRestart('open', { concurrency: 2, durationMs: [30, 80] });
    const { storeErrors } = commonChecks(run);
    const all = outcomes(run.ws);
    const lost = all.filter((o) => o.settled === null);
    const duringOutage = run.ws.flatMap((w) =>
      w.of('start').filter((s) => s.t > run.killedAt && s.t < run.restartedAt),
    );
    const withoutStore = run.ws.flatMap((w) => w.of('start').filter((s) => s.grantAt === null));
    const perWorkerMax = run.ws.map((w) => concurrency(intervals([w]), 2).max);
    console.log(
      `[faults] restart, 'open': ${all.length} jobs, all ok ${all.every((o) => o.ok)}, lost ${lost.length}, ` +
        `started during the outage ${duringOutage.length} (without the store ${withoutStore.length}), ` +
        `max concurrent per process ${perWorkerMax.join('/')} (local limit 2), store errors ${storeErrors}`,
    );
    expect(lost).toEqual([]);
    expect(all.every((o) => o.ok === true)).toBe(true);
    expect(duringOutage.length).toBeGreaterThan(0);
    expect(withoutStore.length).toBeGreaterThan(0);
    for (const max of perWorkerMax) expect(max).toBeLessThanOrEqual(2);
  }, 60_000);
});
