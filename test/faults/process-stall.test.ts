/**
 * Process failures with global concurrency (issue 4; Guarantees, "Concurrency" and "Process
 * failures"): a worker holding every global slot is frozen (SIGSTOP) past leaseTtl, or killed
 * (SIGKILL). Its slots must go to another process once its leases expire on the store, and
 * not before; a frozen worker, once continued, must see its jobs' signals abort and their
 * promises reject LEASE_LOST (from its own log).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import {
  concurrency,
  expectCleanExit,
  intervals,
  mono,
  sleep,
  stalledDuring,
  startWorker,
  stopWorkers,
  unhandled,
  type Worker,
} from './harness.js';
import type { WorkerConfig } from './worker.js';

const TTL = 1500;
const LIMIT = 2;
const workers: Worker[] = [];
afterAll(() => stopWorkers(workers));

function config(name: string, prefix: string, id: string, over: Partial<WorkerConfig>): WorkerConfig {
  const { host, port } = sharedRedis();
  return {
    name,
    host,
    port,
    prefix,
    id,
    rules: [],
    concurrency: { limit: LIMIT, scope: 'global', leaseTtl: TTL },
    storeTimeout: 1000,
    subscriber: true,
    jobs: LIMIT,
    durationMs: [200, 200],
    exitAfterMs: 40_000,
    ...over,
  };
}

/** Starts a holder of every slot, then a waiter for them; resolves once both are in place. */
async function holderAndWaiter(prefix: string, id: string): Promise<{ a: Worker; b: Worker }> {
  const a = startWorker(config('holder', prefix, id, { durationMs: [12_000, 12_000] }));
  workers.push(a);
  for (let job = 0; job < LIMIT; job++) await a.waitFor('start', (e) => e.job === job);
  const b = startWorker(config('waiter', prefix, id, { subscriber: false }));
  workers.push(b);
  await b.waitFor('submit', (e) => e.job === LIMIT - 1);
  await sleep(300);
  expect(b.of('start')).toEqual([]); // every slot is held
  return { a, b };
}

/** t0 of the holder's last renewal sent before `at`: its leases expire on the store no earlier than t0 + TTL. */
function lastRenewBefore(a: Worker, at: number): number {
  const sent = a
    .of('call')
    .filter((c) => c.op === 'renew' && c.t0 < at)
    .map((c) => c.t0);
  const acquired = a
    .of('call')
    .filter((c) => c.op === 'acquire' && c.ok && c.t0 < at)
    .map((c) => c.t0);
  return Math.max(...sent, ...acquired);
}

describe('a worker holding global leases stops or dies', () => {
  it('SIGSTOP past leaseTtl: the slot goes to another process; on SIGCONT its jobs abort with LEASE_LOST', async () => {
    const prefix = uniquePrefix('faults-stop');
    const { a, b } = await holderAndWaiter(prefix, 'stop');
    const stoppedAt = mono();
    a.kill('SIGSTOP');
    const firstB = await b.waitFor('start', undefined, TTL + 5000);
    // Keep it frozen well past the TTL, while the other process runs its jobs in the freed slots.
    await b.waitFor('settled', (e) => e.job === LIMIT - 1, 10_000);
    // Its leases can expire up to TTL / 3 before stoppedAt + TTL (renewed before the stop), and
    // the other process's short jobs can be done by then: keep it frozen past the TTL anyway.
    await sleep(Math.max(200, stoppedAt + TTL + 200 - mono()));
    const contAt = mono();
    a.kill('SIGCONT');
    const aborts = await Promise.all(
      Array.from({ length: LIMIT }, (_, job) => a.waitFor('abort', (e) => e.job === job, 5000)),
    );
    await expectCleanExit([a, b], 20_000);

    const lastRenew = lastRenewBefore(a, stoppedAt);
    const handover = firstB.t - stoppedAt;
    const detect = Math.max(...aborts.map((e) => e.t)) - contAt;
    const ivs = intervals([a, b]);
    const report = concurrency(ivs, LIMIT);
    // Counting the frozen jobs only until their leases can have expired on the store.
    const owned = concurrency(ivs, LIMIT, (iv) => iv.ownedUntil);
    console.log(
      `[faults] SIGSTOP holder (leaseTtl ${TTL} ms): slot handed over ${handover.toFixed(0)} ms after the stop ` +
        `(${(firstB.t - lastRenew).toFixed(0)} ms after its last renewal was sent); ` +
        `lease loss seen ${detect.toFixed(0)} ms after SIGCONT; reasons ${a
          .of('lease-lost')
          .map((e) => e.reason)
          .join(',')}; max concurrent ${report.max} (over-limit instants ${report.over.length}, ` +
        `all with lost leases: ${report.unexplained.length === 0}); counting lost leases until their ` +
        `earliest store expiry: max ${owned.max}`,
    );

    expect(unhandled([a, b])).toEqual([]);
    expect(contAt - stoppedAt).toBeGreaterThan(TTL);
    // Not before the store let the leases expire, and not much after.
    expect(firstB.t).toBeGreaterThanOrEqual(lastRenew + TTL);
    expect(handover).toBeLessThan(TTL + 1000 + stalledDuring(b, stoppedAt, firstB.t));
    // On SIGCONT: every job's signal aborted with LEASE_LOST, promptly, and its promise rejected LEASE_LOST.
    for (const e of aborts) expect(e.code).toBe('LEASE_LOST');
    expect(detect).toBeLessThan(1000 + stalledDuring(a, contAt, contAt + detect));
    expect(a.of('settled').map((e) => e.code)).toEqual(Array(LIMIT).fill('LEASE_LOST'));
    expect(a.of('lease-lost')).toHaveLength(LIMIT);
    // The frozen jobs overlapped the new ones: allowed only because their leases were lost.
    expect(report.max).toBe(2 * LIMIT);
    expect(report.unexplained).toEqual([]);
    expect(owned.max).toBeLessThanOrEqual(LIMIT);
    expect(b.of('settled').every((e) => e.ok)).toBe(true);
    // A late renewal never restored ownership: the continued worker renewed nothing it had lost.
    const renewedAfter = a
      .of('call')
      .filter((c) => c.op === 'renew' && c.t0 > contAt && c.held?.some(Boolean));
    expect(renewedAfter).toEqual([]);
  }, 40_000);

  it('a job whose last synchronous stretch outlasts its lease rejects LEASE_LOST, though it returned a value', async () => {
    // The expiry timer cannot run inside a job's CPU-bound end: the job's end is checked. Each
    // job of both processes awaits 30 ms, then computes for 1.6 s with a 1 s lease, limit 1.
    const prefix = uniquePrefix('faults-tail');
    const tail = (name: string) =>
      startWorker(
        config(name, prefix, 'tail', {
          concurrency: { limit: 1, scope: 'global', leaseTtl: 1000 },
          jobs: 2,
          durationMs: [30, 30],
          syncTailMs: 1600,
        }),
      );
    const pair = [tail('tail-a'), tail('tail-b')];
    workers.push(...pair);
    await expectCleanExit(pair, 30_000);
    const report = concurrency(intervals(pair), 1);
    console.log(
      `[faults] CPU-bound job ends past leaseTtl: max concurrent ${report.max}, over-limit instants ` +
        `${report.over.length}, all with lost leases: ${report.unexplained.length === 0}`,
    );
    expect(unhandled(pair)).toEqual([]);
    for (const w of pair) {
      // Every job outlived its lease: each rejects LEASE_LOST, with one 'expired' event each.
      expect(w.of('settled').map((e) => e.code)).toEqual(['LEASE_LOST', 'LEASE_LOST']);
      expect(w.of('lease-lost').map((e) => e.reason)).toEqual(['expired', 'expired']);
    }
    // Where the store gave an expired lease's slot to the other process, both jobs knew it lost.
    expect(report.unexplained).toEqual([]);
  }, 40_000);

  it("SIGKILL: the dead worker's slots free after the TTL, not before", async () => {
    const prefix = uniquePrefix('faults-kill');
    const { a, b } = await holderAndWaiter(prefix, 'kill');
    const killedAt = mono();
    a.kill('SIGKILL');
    expect(await a.exited).toBe('SIGKILL');
    const firstB = await b.waitFor('start', undefined, TTL + 5000);
    await expectCleanExit([b], 20_000);
    const lastRenew = lastRenewBefore(a, killedAt);
    const freed = firstB.t - killedAt;
    console.log(
      `[faults] SIGKILL holder (leaseTtl ${TTL} ms): slot free ${freed.toFixed(0)} ms after the kill, ` +
        `${(firstB.t - lastRenew).toFixed(0)} ms after its last renewal was sent`,
    );
    expect(unhandled([b])).toEqual([]);
    expect(firstB.t).toBeGreaterThanOrEqual(lastRenew + TTL);
    expect(freed).toBeLessThan(TTL + 1000 + stalledDuring(b, killedAt, firstB.t));
    expect(b.of('settled').every((e) => e.ok)).toBe(true);
  }, 40_000);
});
