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
const DURATION_MS = 3000;

describe('a valve group on Redis Cluster, 8 processes × 1,000 keys', () => {
  it('every window of every key holds its bound on the store clock, default and overridden rules', async () => {
    // Slow rules: 8 processes ask for each key when its next unit frees, so the calls are
    // about 8 per grant (8,000 keys' valves on two cores, shared).
    const rules: Rule[] = [{ limit: 1, interval: '1s' }];
    const overrideRules: Rule[] = [{ limit: 2, interval: '2s', algorithm: 'sliding-window' }];
    const keys = Array.from({ length: KEYS }, (_, i) => `tenant-${i}`);
    const overridden = keys.filter((_, i) => i % 10 === 0);
    const prefix = uniquePrefix('group-cluster');
    // node-redis 4 ('redis6') is left out: under this load its cluster client failed every call
    // of one process with an empty `Error` in 2 of 3 runs (reported, not investigated yet).
    const families = ['ioredis', 'redis', 'ioredis6'] as const;
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
        depth: 1,
      };
      return spawnWorker<GroupWorkerReport>(workerFile, 'VALVE_GROUP_WORKER', config, 90_000);
    });
    await Promise.all(workers.map((w) => w.ready));
    const startAt = Date.now() + 500;
    for (const w of workers) w.go(startAt);
    const reports = await Promise.all(workers.map((w) => w.report));

    const special = new Set(overridden);
    const perKey = keys.map((key) => reports.flatMap((r) => r.grants[key] ?? []));
    const total = perKey.reduce((sum, times) => sum + times.length, 0);
    // What the rules allow from the first grant to the last (the run, and the answers still
    // arriving while the groups close): 1 plus 1/s (GCRA); 2 per started 2 s (sliding).
    const all = perKey.flat();
    const spanS = (Math.max(...all) - Math.min(...all)) / 1000;
    const capacity = keys.reduce(
      (sum, key) => sum + (special.has(key) ? 2 * Math.ceil(spanS / 2) : 1 + spanS),
      0,
    );
    const errors = reports.flatMap((r) => r.storeErrors);
    const fewest = Math.min(...perKey.map((times) => times.length));
    console.log(
      `group on a cluster, ${PROCESSES} processes × ${KEYS} keys: ${total} grants (${((100 * total) / capacity).toFixed(1)} % of what the rules allow, the fewest for one key ${fewest}), ${errors.length} store errors${errors.length > 0 ? `, first: ${errors[0]}` : ''}`,
    );
    const broken: string[] = [];
    keys.forEach((key, i) => {
      const own = special.has(key) ? overrideRules : rules;
      const violations = checkRules(
        perKey[i]!.map((t) => ({ t, cost: 1 })),
        own,
      );
      if (violations.length > 0) broken.push(`${key}: ${violations[0]!.message}`);
    });
    expect(broken).toEqual([]);
    // Not vacuous: every key was granted jobs.
    expect(fewest).toBeGreaterThanOrEqual(2);
    for (const r of reports) {
      expect(r.created, r.name).toBe(KEYS); // each process had a valve per key, none evicted
      expect(r.size, r.name).toBe(KEYS);
      expect(r.started, r.name).toBeGreaterThan(0);
    }
  }, 120_000);
});
