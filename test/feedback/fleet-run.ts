/**
 * Runs fleet-worker.ts processes against one provider over the shared Redis: each a valve over
 * redisStore sharing one id and prefix, warmed up on `warmUrl`, all starting together `delayMs`
 * after every worker is ready. Returns their reports.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { sharedRedis } from '../helpers/shared-servers.js';
import { spawnWorker } from '../helpers/workers.js';
import type { FleetWorkerConfig, FleetWorkerReport } from './fleet-worker.js';

const workerFile = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fleet-worker.ts');

/** What each worker gets (its name and the Redis are filled in), how many, and when they start. */
export interface FleetRun extends Omit<FleetWorkerConfig, 'name' | 'target' | 'fleet'> {
  processes: number;
  /** ms from every worker ready to the common start. */
  delayMs: number;
}

export async function runFleetWorkers(o: FleetRun): Promise<FleetWorkerReport[]> {
  const redis = sharedRedis();
  const { processes, delayMs, ...shared } = o;
  const workers = Array.from({ length: processes }, (_, i) => {
    const config: FleetWorkerConfig = {
      ...shared,
      name: `w${i}`,
      target: { host: redis.host, port: redis.port },
      fleet: true,
    };
    return spawnWorker<FleetWorkerReport>(workerFile, 'FLEET_WORKER', config, 90_000);
  });
  await Promise.all(workers.map((w) => w.ready));
  const startAt = Date.now() + delayMs;
  for (const w of workers) w.go(startAt);
  return Promise.all(workers.map((w) => w.report));
}

/** No worker saw a store error, and every one of the fleet's `total` requests ended 200. */
export function expectAllEnded200(reports: readonly FleetWorkerReport[], total: number): void {
  for (const r of reports) expect(r.storeErrors).toEqual([]);
  const statuses = reports.flatMap((r) => r.statuses);
  expect(statuses).toHaveLength(total);
  expect(statuses.every((s) => s === 200)).toBe(true);
}
