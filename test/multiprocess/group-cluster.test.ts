/**
 * Bounds per key with many keys and many processes on Redis Cluster: 8 real processes (node
 * --import tsx group-worker.ts), each with one valve group over redisStore on the shared
 * 3-master cluster, all using the same 1,000 keys (every tenth with its own rule through
 * `options(key)`), every key saturated. Each grant is logged with the store's clock (the acquire
 * reply's `now`); over all processes together, every window of every key must hold its bound
 * (test/helpers/bounds.ts).
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { Rule } from '../../src/rules/rule.js';
import { checkRules } from '../helpers/bounds.js';
import { sharedCluster, uniquePrefix } from '../helpers/shared-servers.js';
import { spawnWorker } from '../helpers/workers.js';
import type { GroupWorkerConfig, GroupWorkerReport } from './group-worker.js';

const workerFile = path.join(path.dirname(fileURLToPath(import.meta.url)), 'group-worker.ts');

const PROCESSES = 8;
const KEYS = 1000;
const DURATION_MS = 4000;

describe('a valve group on Redis Cluster, 8 processes × 1,000 keys', () => {
  it('every window of every key holds its bound on the store clock, default and overridden rules', async () => {
    const rules: Rule[] = [{ limit: 2, interval: '1s' }];
    const overrideRules: Rule[] = [{ limit: 3, interval: '1s', algorithm: 'sliding-window' }];
    const keys = Array.from({ length: KEYS }, (_, i) => `tenant-${i}`);
    const overridden = keys.filter((_, i) => i % 10 === 0);
    const prefix = uniquePrefix('group-cluster');
    const families = ['ioredis', 'redis', 'ioredis6', 'redis6'] as const;
    const workers = Array.from({ length: PROCESSES }, (_, i) => {
      const config: GroupWorkerConfig = {
        name: `w${i}`,
        cluster: sharedCluster().nodes,
        family: families[i % families.length]!,
        // Half of the processes follow wake-ups (sharded subscriptions on one connection).
        subscriber: i % 2 === 0,
        prefix,
        keys,
        rules,
        overridden,
        overrideRules,
        durationMs: DURATION_MS,
        depth: 2,
      };
      return spawnWorker<GroupWorkerReport>(workerFile, 'VALVE_GROUP_WORKER', config, 90_000);
    });
    await Promise.all(workers.map((w) => w.ready));
    const startAt = Date.now() + 500;
    for (const w of workers) w.go(startAt);
    const reports = await Promise.all(workers.map((w) => w.report));

    const special = new Set(overridden);
    let total = 0;
    let capacity = 0;
    const broken: string[] = [];
    for (const key of keys) {
      const times = reports.flatMap((r) => r.grants[key] ?? []);
      total += times.length;
      const own = special.has(key) ? overrideRules : rules;
      const violations = checkRules(
        times.map((t) => ({ t, cost: 1 })),
        own,
      );
      if (violations.length > 0) broken.push(`${key}: ${violations[0]!.message}`);
      // Not vacuous: every key was granted jobs, in several processes' calls.
      expect(times.length, key).toBeGreaterThanOrEqual(2);
      capacity += special.has(key) ? 3 * (DURATION_MS / 1000 + 1) : 2 * (DURATION_MS / 1000) + 1;
    }
    expect(broken).toEqual([]);
    for (const r of reports) {
      expect(r.created, r.name).toBe(KEYS); // each process had a valve per key, none evicted
      expect(r.size, r.name).toBe(KEYS);
      expect(r.started, r.name).toBeGreaterThan(0);
    }
    const errors = reports.flatMap((r) => r.storeErrors);
    console.log(
      `group on a cluster, ${PROCESSES} processes × ${KEYS} keys: ${total} grants (${((100 * total) / capacity).toFixed(1)} % of what the rules allow), ${errors.length} store errors${errors.length > 0 ? `, first: ${errors[0]}` : ''}`,
    );
  }, 120_000);
});
