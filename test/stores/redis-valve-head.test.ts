/**
 * A valve over redisStore (the shared test server, the real clock): when the head of the queue
 * leaves or a job comes before it, a cheaper new head is asked for at once instead of waiting
 * the rate wait the store gave for the head; an equal-cost new head costs no store call. The
 * scheduler's side, on the controlled clock: test/unit/valve-head-change.test.ts.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createValve, isValveError } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { countingAcquires } from '../helpers/spy-store.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let c: Connected;
beforeAll(async () => {
  c = await connectClient('ioredis', sharedRedis());
});
afterAll(async () => {
  await c?.close();
});

/**
 * A valve on Redis with 60 of its 100 units (per 10 s, burst 100) spent: a cost-60 job fits
 * about 2 s later, a cost-40 one at once.
 */
async function spent(id: string): Promise<{ valve: ReturnType<typeof createValve>; acquires: () => number }> {
  const counted = countingAcquires(redisStore({ client: c.client, prefix: uniquePrefix('head') }) as Store);
  const valve = createValve({ id, rules: { limit: 100, interval: '10s', burst: 100 }, store: counted.store });
  await valve.run(() => {}, { cost: 60 });
  return { valve, acquires: counted.acquires };
}

/** Resolves with the ms from `from()` to the job's start. */
function startedAfter(promise: Promise<unknown>, from: () => number): Promise<number> {
  return promise.then(() => performance.now() - from());
}

it('the aborted head (cost 60) leaves: the cost-40 job behind it starts at once, not 2 s later', async () => {
  const { valve } = await spent('abort');
  const ac = new AbortController();
  const a = valve.run(() => 'A', { cost: 60, signal: ac.signal }).catch((e: unknown) => e);
  let abortedAt = Number.NaN;
  const b = startedAfter(
    valve.run(() => 'B', { cost: 40 }),
    () => abortedAt,
  );
  await sleep(150);
  abortedAt = performance.now();
  ac.abort();
  expect((await a) instanceof Error).toBe(true);
  // Without asking again: about 1850 ms.
  expect(await b).toBeLessThan(500);
  await valve.close();
});

it('the head reaches its maxWait: the cost-40 job behind it starts then', async () => {
  const { valve } = await spent('maxwait');
  const t0 = performance.now();
  const a = valve.run(() => 'A', { cost: 60, maxWait: 200 }).catch((e: unknown) => e);
  const b = startedAfter(
    valve.run(() => 'B', { cost: 40 }),
    () => t0,
  );
  expect(isValveError(await a, 'MAX_WAIT')).toBe(true);
  const at = await b;
  expect(at).toBeGreaterThanOrEqual(190);
  expect(at).toBeLessThan(700);
  await valve.close();
});

it('a cost-10 job of a higher priority, the new head, starts at once', async () => {
  const { valve } = await spent('priority');
  const a = valve.run(() => 'A', { cost: 60 });
  await sleep(150);
  const t0 = performance.now();
  const took = await startedAfter(
    valve.run(() => 'C', { cost: 10, priority: 5 }),
    () => t0,
  );
  expect(took).toBeLessThan(500);
  expect(await a).toBe('A');
  await valve.close();
});

it('the aborted head leaves a job of the same cost at the head: no store call until its slot', async () => {
  const { valve, acquires } = await spent('equal');
  const ac = new AbortController();
  const a = valve.run(() => 'A', { cost: 60, signal: ac.signal }).catch((e: unknown) => e);
  const t0 = performance.now();
  const b = startedAfter(
    valve.run(() => 'B', { cost: 60 }),
    () => t0,
  );
  await sleep(200);
  const calls = acquires();
  ac.abort();
  await a;
  await sleep(1000);
  expect(acquires()).toBe(calls);
  // B starts at A's slot, about 2 s after A was refused.
  expect(await b).toBeGreaterThan(1500);
  await valve.close();
});
