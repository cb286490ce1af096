/**
 * The cluster variant of the network-fault run (issue 4 with the cluster settings of
 * docs/timeouts-and-reconnection.md): four worker processes (two ioredis `Cluster`, two
 * node-redis cluster clients) share one id on the shared 3-master Redis Cluster, through one
 * TCP fault proxy per node (MOVED and CLUSTER SLOTS addresses are mapped to the proxies), while
 * the proxies add latency, drop every connection and blackhole all traffic. Checked on the
 * logs as in network-faults.test.ts: rate bound, concurrency limit (overlap only through
 * logged lease losses), maxWait, fences, one 'store-error' per failed call, no unhandled
 * rejection.
 *
 * The workers start together (a ready/go handshake: on a loaded machine they take seconds apart
 * to compile and connect) and the faults are timed from that start, so they always fall while
 * jobs are being submitted. The two polling workers (no subscriber, long jobs) each submit less
 * than the limit can hold: across processes there is no fairness, so one worker with a backlog
 * can keep every slot (it reuses its own releases at once) and starve the other, and then that
 * worker would run no job at all.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { sharedCluster, uniquePrefix } from '../helpers/shared-servers.js';
import { type ClusterProxies, startClusterProxies } from '../helpers/tcp-proxy.js';
import {
  expectCleanExit,
  fenceOrder,
  fenceViolations,
  mono,
  sleep,
  startWorker,
  stopWorkers,
  storeErrorAccounting,
  summarize,
  unhandled,
  type Worker,
  worstStall,
} from './harness.js';

/** Timer and event-loop slack allowed on a loaded 2-core machine when checking deadlines. */
const SETTLE_TOLERANCE = 250;

const workers: Worker[] = [];
let proxies: ClusterProxies | undefined;
afterAll(async () => {
  await stopWorkers(workers);
  await proxies?.close();
});

describe('network faults on a Redis Cluster', () => {
  it('latency, dropped connections and a blackhole on every node: bounds, limit and maxWait hold', async () => {
    const { nodes } = sharedCluster();
    proxies = await startClusterProxies(nodes);
    const prefix = uniquePrefix('faults-cluster');
    const rule = { limit: 30, interval: 1000, burst: 3 };
    const limit = 4;
    const maxWait = 2000;
    for (let i = 0; i < 4; i++) {
      const client = i % 2 === 0 ? 'ioredis' : 'node-redis';
      workers.push(
        startWorker({
          name: `cluster-${client}-${i}`,
          client,
          cluster: { seeds: proxies.seeds, natMap: proxies.natMap },
          host: '',
          port: 0,
          prefix,
          id: 'cluster-net',
          rules: [rule],
          concurrency: { limit, scope: 'global', leaseTtl: 1500 },
          storeTimeout: 500,
          subscriber: i < 2,
          // Short jobs often, or long ones (about 2 slots' worth each) less often: about 5 s.
          jobs: i < 2 ? 40 : 20,
          submitEvery: i < 2 ? 110 : 250,
          submitAfter: 300,
          durationMs: i < 2 ? [10, 60] : [200, 900],
          maxWait,
          exitAfterMs: 45_000,
          waitForGo: true,
        }),
      );
    }
    await Promise.all(workers.map((w) => w.waitFor('ready', undefined, 30_000)));
    for (const w of workers) w.go();
    const t0 = mono();
    const phases: string[] = [];
    const phase = (name: string) => phases.push(`${name}@${(mono() - t0).toFixed(0)}`);
    // The first submissions come 300 ms after go; the faults start 600 ms later.
    await sleep(900);
    phase('latency 40ms');
    proxies.setLatency(40);
    await sleep(1000);
    phase('latency 0');
    proxies.setLatency(0);
    phase('drop');
    proxies.dropAll();
    await sleep(700);
    phase('blackhole');
    proxies.blackhole(true);
    await sleep(1200);
    proxies.blackhole(false);
    const healedAt = mono();
    phase('healed');
    await expectCleanExit(workers, 45_000);

    const { all, lost, late, report, owned, startViolations, grantViolations, calls, codes, leaseLost } =
      summarize(workers, { maxWait, tolerance: SETTLE_TOLERANCE, limit, rule });
    const perClient = workers.map((w) => `${w.name} ${w.of('start').length}`).join(', ');
    console.log(
      `[faults] cluster proxy faults (${phases.join(', ')}): ${all.length} jobs: ${[...codes].map(([k, v]) => `${k} ${v}`).join(', ')}; ` +
        `started per worker: ${perClient}; lost ${lost.length}; past maxWait+${SETTLE_TOLERANCE}ms ${late.length}; ` +
        `max concurrent ${report.max} (over-limit instants ${report.over.length}, unexplained ${report.unexplained.length}, ` +
        `counting lost leases until their earliest store expiry ${owned.max}); ` +
        `leases lost ${leaseLost.length}; rate violations on starts ${startViolations.length}, on grants ${grantViolations.length}; ` +
        `store calls ${calls.length}, failed ${calls.filter((c) => !c.ok).length}; worst worker stall ${worstStall(workers).toFixed(0)} ms`,
    );

    expect(unhandled(workers)).toEqual([]);
    expect(lost).toEqual([]);
    expect(late).toEqual([]);
    for (const o of all) {
      if (o.ok === false) expect(['MAX_WAIT', 'STORE_UNAVAILABLE', 'LEASE_LOST']).toContain(o.code);
    }
    expect(startViolations).toEqual([]);
    expect(grantViolations).toEqual([]);
    expect(report.unexplained).toEqual([]);
    expect(owned.max).toBeLessThanOrEqual(limit);
    expect(fenceViolations(fenceOrder(workers))).toEqual([]);
    for (const w of workers) {
      const acc = storeErrorAccounting(w);
      expect(acc.events, `${w.name}: one 'store-error' per failed store call`).toBe(acc.failedCalls);
      // Every client family ran jobs, before and after the faults.
      expect(w.of('start').length).toBeGreaterThan(0);
    }
    expect(all.some((o) => o.start !== null && o.start > healedAt)).toBe(true);
  }, 90_000);
});
