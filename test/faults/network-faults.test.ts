/**
 * Network faults between clients and Redis (issue 4), through the TCP fault proxy of
 * test/helpers/tcp-proxy.ts, on loopback, against a real server.
 *
 * 1. Four worker processes (two on ioredis, two on node-redis, with the settings of
 *    docs/timeouts-and-reconnection.md), one id, global concurrency and a rate rule, saturated, while the
 *    proxy adds latency, drops every connection, and blackholes all traffic for longer than
 *    the store deadline and the lease TTL. Checked on the logs: the rate bound on the logged
 *    starts (and on every grant), the concurrency limit (overlap only through logged lease
 *    losses), no job waits past its maxWait (+ a stated settling tolerance), each failed store
 *    call is reported once, each timed-out call is abandoned at valve's deadline, and no
 *    unhandled rejection.
 * 2. In this process, one call at a time: a blackholed acquire is abandoned at the store's
 *    deadline and reported; when the network heals the server still executes it and spends
 *    the budget; valve does not act as if it had not happened: the next grant comes a full
 *    emission interval later (throughput lost, rate never raised).
 * 3. The same with global concurrency (limit 1): the late call creates a lease nobody owns;
 *    it holds the only slot until its TTL runs out, then the job gets it (never two leases).
 * 4. A job cancelled while its acquisition is on the wire (proxy latency) never runs; the
 *    lease granted for it is released at once, and its rate grant stays spent.
 */
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createValve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { startProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import {
  expectCleanExit,
  fenceOrder,
  fenceViolations,
  mono,
  sleep,
  stalledDuring,
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
const proxies: TcpProxy[] = [];
const clients: IORedis[] = [];
afterAll(async () => {
  await stopWorkers(workers);
  for (const c of clients) c.disconnect();
  await Promise.all(proxies.map((p) => p.close()));
});

describe('network faults through a TCP proxy', () => {
  it('latency, dropped connections and a blackhole: bounds, limit and maxWait hold', async () => {
    const { host, port } = sharedRedis();
    const proxy = await startProxy({ target: { host, port } });
    proxies.push(proxy);
    const prefix = uniquePrefix('faults-net');
    const rule = { limit: 30, interval: 1000, burst: 3 };
    const limit = 6;
    const maxWait = 1500;
    const storeTimeout = 400;
    for (let i = 0; i < 4; i++) {
      // Two workers run long jobs (held across the faults: renewals time out, leases are lost),
      // two run short ones fast enough to saturate the rate rule.
      // Odd workers use node-redis, even ones ioredis, each with the recommended settings.
      const long = i < 2;
      const client = i % 2 === 0 ? 'ioredis' : 'node-redis';
      workers.push(
        startWorker({
          name: `${long ? 'long' : 'short'}-${client}-${i}`,
          client,
          host: proxy.host,
          port: proxy.port,
          prefix,
          id: 'net',
          rules: [rule],
          concurrency: { limit, scope: 'global', leaseTtl: 1500 },
          storeTimeout,
          subscriber: i % 2 === 0,
          jobs: long ? 14 : 100,
          submitEvery: long ? 600 : 60,
          submitAfter: 300,
          durationMs: long ? [800, 2500] : [10, 60],
          maxWait,
          exitAfterMs: 45_000,
        }),
      );
    }
    await Promise.all(workers.map((w) => w.waitFor('start', undefined, 20_000)));
    const phases: string[] = [];
    const phase = (name: string) => phases.push(`${name}@${(mono() - t0).toFixed(0)}`);
    const t0 = mono();
    await sleep(800);
    phase('latency 60ms');
    proxy.setLatency(60);
    await sleep(1500);
    phase('latency 0');
    proxy.setLatency(0);
    phase('drop');
    proxy.dropAll();
    await sleep(400);
    phase('drop');
    proxy.dropAll();
    await sleep(600);
    phase('blackhole');
    const blackholedAt = mono();
    proxy.blackhole(true);
    await sleep(2000);
    proxy.blackhole(false);
    const healedAt = mono();
    phase('healed');
    await expectCleanExit(workers, 45_000);

    const { all, lost, late, report, owned, startViolations, grantViolations, calls, codes, leaseLost } =
      summarize(workers, { maxWait, tolerance: SETTLE_TOLERANCE, limit, rule });
    const timedOut = calls.filter((c) => !c.ok && c.err?.startsWith('RedisStoreTimeoutError'));
    const timeoutElapsed = timedOut.map((c) => c.t1 - c.t0);
    const inBlackhole = timedOut.filter((c) => c.t0 >= blackholedAt && c.t1 <= healedAt + SETTLE_TOLERANCE);
    const waits = all.filter((o) => o.start !== null).map((o) => o.start! - o.submit);
    const overWait = Math.max(
      0,
      ...all.map((o) => (o.start ?? o.settled ?? Number.POSITIVE_INFINITY) - o.submit - maxWait),
    );
    console.log(
      `[faults] proxy faults (${phases.join(', ')}): ${all.length} jobs: ${[...codes].map(([k, v]) => `${k} ${v}`).join(', ')}; ` +
        `lost ${lost.length}; past maxWait+${SETTLE_TOLERANCE}ms ${late.length} (worst ${overWait.toFixed(0)} ms past maxWait), ` +
        `longest wait to start ${Math.max(...waits).toFixed(0)} ms; max concurrent ${report.max} ` +
        `(over-limit instants ${report.over.length}, unexplained ${report.unexplained.length}; counting lost leases ` +
        `until their earliest store expiry: ${owned.max}); leases lost ${leaseLost.length} ` +
        `(${[...new Set(leaseLost.map((e) => e.reason))].join(',')}); rate violations on starts ${startViolations.length}, ` +
        `on grants ${grantViolations.length}; store calls ${calls.length}, failed ${calls.filter((c) => !c.ok).length}, ` +
        `timed out ${timedOut.length} (${inBlackhole.length} in the blackhole), abandoned after ` +
        `${Math.min(...timeoutElapsed).toFixed(0)}..${Math.max(...timeoutElapsed).toFixed(0)} ms (deadline ${storeTimeout}); ` +
        `worst event-loop stall of a worker ${worstStall(workers).toFixed(0)} ms`,
    );

    if (process.env.FAULTS_DEBUG) {
      const rel = (t: number) => (t - t0).toFixed(0);
      for (const w of workers) {
        console.log(
          w.name,
          'renews',
          w
            .of('call')
            .filter((c) => c.op === 'renew')
            .map((c) => `${rel(c.t0)}-${rel(c.t1)}:${c.ok}`)
            .join(' '),
        );
        console.log(
          w.name,
          'starts',
          w
            .of('start')
            .map((s) => rel(s.t))
            .join(' '),
        );
        console.log(
          w.name,
          'acq',
          w
            .of('call')
            .filter((c) => c.op === 'acquire')
            .map((c) => `${rel(c.t0)}-${rel(c.t1)}:${c.ok ? c.granted : c.err?.slice(0, 30)}`)
            .join(' '),
        );
        console.log(
          w.name,
          'settled',
          w
            .of('settled')
            .map((c) => `${rel(c.t)}:${c.code}`)
            .join(' '),
        );
        console.log(
          w.name,
          'ends',
          w
            .of('cb-end')
            .map((s) => rel(s.t))
            .join(' '),
        );
      }
    }
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
    expect(report.max).toBeGreaterThanOrEqual(limit); // saturated
    // Fences still only grow in grant order, across reconnections.
    expect(fenceViolations(fenceOrder(workers))).toEqual([]);
    for (const w of workers) {
      const acc = storeErrorAccounting(w);
      expect(acc.events, `${w.name}: one 'store-error' per failed store call`).toBe(acc.failedCalls);
    }
    // The blackhole made calls time out; each was abandoned at valve's deadline, not before, not long after.
    expect(inBlackhole.length).toBeGreaterThan(0);
    for (const w of workers) {
      for (const c of w.of('call')) {
        if (c.ok || !c.err?.startsWith('RedisStoreTimeoutError')) continue;
        expect(c.t1 - c.t0).toBeGreaterThanOrEqual(storeTimeout - 2);
        expect(c.t1 - c.t0).toBeLessThan(storeTimeout + SETTLE_TOLERANCE + stalledDuring(w, c.t0, c.t1));
      }
    }
    // Every job ran again after the network healed.
    expect(all.some((o) => o.start !== null && o.start > healedAt)).toBe(true);
  }, 90_000);

  it('a blackholed acquire is abandoned at its deadline; its late spend is honoured, not retried away', async () => {
    const { host, port } = sharedRedis();
    const proxy = await startProxy({ target: { host, port } });
    proxies.push(proxy);
    const client = new IORedis({
      host: proxy.host,
      port: proxy.port,
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
    });
    client.on('error', () => {});
    clients.push(client);
    await client.connect();
    const timeout = 300;
    const interval = 2000;
    const valve = createValve({
      id: 'abandoned',
      rules: [{ limit: 1, interval }],
      store: redisStore({ client, prefix: uniquePrefix('faults-abandon'), timeout }),
      maxWait: 20_000,
    });
    const errors: { at: number; name: string; op: string }[] = [];
    valve.on('store-error', (err, ctx) => {
      errors.push({ at: mono(), name: err instanceof Error ? err.name : String(err), op: ctx.operation });
    });

    proxy.blackhole(true);
    const sentAt = mono();
    let startedAt = 0;
    const job = valve.run(() => {
      startedAt = mono();
    });
    job.catch(() => {}); // awaited below; never an unhandled rejection if the test fails first
    while (errors.length === 0 && mono() - sentAt < 5000) await sleep(10);
    expect(errors.length, 'the blackholed call was never abandoned').toBeGreaterThan(0);
    const first = errors[0]!;
    await sleep(500); // a retry or two, also held by the blackhole
    const healedAt = mono();
    proxy.blackhole(false);
    await job;
    await valve.close();

    const abandonedAfter = first.at - sentAt;
    const startAfterHeal = startedAt - healedAt;
    console.log(
      `[faults] blackholed acquire: abandoned and reported ${abandonedAfter.toFixed(0)} ms after it was sent ` +
        `(deadline ${timeout} ms), ${errors.length} timed-out calls in all; once healed, the held call spent the ` +
        `budget on the server and the job started ${startAfterHeal.toFixed(0)} ms later (emission interval ${interval} ms)`,
    );
    expect(first).toMatchObject({ name: 'RedisStoreTimeoutError', op: 'acquire' });
    expect(abandonedAfter).toBeGreaterThanOrEqual(timeout - 1);
    expect(abandonedAfter).toBeLessThan(timeout + SETTLE_TOLERANCE);
    for (const e of errors) expect(e.name).toBe('RedisStoreTimeoutError');
    // The abandoned call executed when the network healed and spent the only unit; the job got
    // the next one, a full interval later: the spend was honoured (throughput lost), never undone.
    expect(startAfterHeal).toBeGreaterThanOrEqual(interval - 10);
    expect(startAfterHeal).toBeLessThan(interval + 1500);
  }, 30_000);
  it("a blackholed acquire with global concurrency: its late answer's lease is released when it arrives, not held for its TTL", async () => {
    const { host, port } = sharedRedis();
    const proxy = await startProxy({ target: { host, port } });
    proxies.push(proxy);
    const settings = {
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
    };
    const client = new IORedis({ host: proxy.host, port: proxy.port, ...settings });
    const direct = new IORedis({ host, port, ...settings }); // reads the lease set, bypassing the proxy
    for (const c of [client, direct]) {
      c.on('error', () => {});
      clients.push(c);
      await c.connect();
    }
    const prefix = uniquePrefix('faults-abandon-lease');
    const leaseTtl = 1500;
    const valve = createValve({
      id: 'abandoned-lease',
      rules: [],
      concurrency: { limit: 1, scope: 'global', leaseTtl },
      store: redisStore({ client, prefix, timeout: 300 }),
      maxWait: 20_000,
    });
    let errors = 0;
    valve.on('store-error', () => {
      errors++;
    });
    proxy.blackhole(true);
    const sentAt = mono();
    let startedAt = 0;
    const job = valve.run(() => {
      startedAt = mono();
    });
    job.catch(() => {});
    while (errors === 0 && mono() - sentAt < 5000) await sleep(10);
    expect(errors, 'the blackholed call was never abandoned').toBeGreaterThan(0);
    await sleep(300);
    const healedAt = mono();
    proxy.blackhole(false);
    // Sample the store's lease set while the job waits: the abandoned call's lease (granted when
    // the network healed) is released as soon as its late answer arrives, so the job need not
    // wait for its TTL.
    let maxHeld = 0;
    while (startedAt === 0 && mono() - healedAt < 5000) {
      const held = await direct.zcard(`${prefix}:{abandoned-lease}:leases`);
      if (held > maxHeld) maxHeld = held;
      await sleep(25);
    }
    await job;
    await valve.close();
    const after = startedAt - healedAt;
    console.log(
      `[faults] blackholed acquire with global concurrency (limit 1, leaseTtl ${leaseTtl} ms): the held call ` +
        `was answered once the network healed and its lease released; the job started ${after.toFixed(0)} ms later ` +
        `(most leases on the store at once: ${maxHeld})`,
    );
    // Never two leases at once under a limit of 1; the job started before the abandoned lease's
    // TTL would have freed its slot; nothing is left once the job ended.
    expect(maxHeld).toBeLessThanOrEqual(1);
    expect(after).toBeLessThan(leaseTtl - 300);
    expect(await direct.zcard(`${prefix}:{abandoned-lease}:leases`)).toBe(0);
  }, 30_000);
  it('a job cancelled while its acquisition is in flight never runs; its grant stays spent, its lease is freed at once', async () => {
    const { host, port } = sharedRedis();
    const proxy = await startProxy({ target: { host, port }, latencyMs: 100 });
    proxies.push(proxy);
    const settings = {
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
    };
    const client = new IORedis({ host: proxy.host, port: proxy.port, ...settings });
    const direct = new IORedis({ host, port, ...settings });
    for (const c of [client, direct]) {
      c.on('error', () => {});
      clients.push(c);
      await c.connect();
    }
    const prefix = uniquePrefix('faults-cancel');
    const interval = 1000;
    const leaseTtl = 10_000;
    const valve = createValve({
      id: 'cancel',
      rules: [{ limit: 1, interval }],
      concurrency: { limit: 1, scope: 'global', leaseTtl },
      store: redisStore({ client, prefix, timeout: 2000 }),
    });
    const leases = () => direct.zcard(`${prefix}:{cancel}:leases`);
    // Warm up: the scripts are loaded (no NOSCRIPT round trip in the measurement).
    const warm = createValve({
      id: 'cancel-warm-up',
      rules: [],
      concurrency: { limit: 1, scope: 'global', leaseTtl },
      store: redisStore({ client, prefix, timeout: 2000 }),
    });
    await warm.run(() => {});
    await warm.close();
    const controller = new AbortController();
    let ran = false;
    const sentAt = mono();
    const cancelled = valve.run(
      () => {
        ran = true;
      },
      { signal: controller.signal },
    );
    cancelled.catch(() => {});
    await sleep(50); // the acquisition is on the wire (a round trip takes 200 ms)
    controller.abort(new Error('cancelled in flight'));
    await expect(cancelled).rejects.toThrow('cancelled in flight');
    // The grant arrives with a lease; valve releases it at once, long before its TTL.
    let sawLease = false;
    let freedAt = 0;
    while (mono() - sentAt < 3000) {
      const held = await leases();
      if (held > 0) sawLease = true;
      if (sawLease && held === 0) {
        freedAt = mono();
        break;
      }
      await sleep(10);
    }
    // The next job: the cancelled grant's unit is spent, so it waits for the next one.
    let startedAt = 0;
    await valve.run(() => {
      startedAt = mono();
    });
    await valve.close();
    console.log(
      `[faults] cancelled in flight (one-way latency 100 ms): never ran, lease freed ${(freedAt - sentAt).toFixed(0)} ms ` +
        `after the call (TTL ${leaseTtl} ms); the next job started ${(startedAt - sentAt).toFixed(0)} ms after it ` +
        `(1 per ${interval} ms: the spent grant was not reused)`,
    );
    expect(ran).toBe(false);
    expect(sawLease).toBe(true);
    expect(freedAt).toBeGreaterThan(0);
    expect(freedAt - sentAt).toBeLessThan(800); // a round trip for the grant, one way for the release, + slack
    expect(startedAt - sentAt).toBeGreaterThanOrEqual(interval - 10);
  }, 30_000);
});
