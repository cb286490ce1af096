/**
 * One truth per id: two real processes use one id on one Redis with different rules. Each
 * gets 'rule-mismatch' once, naming its own rules and the other process's as recorded.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { Rule } from '../../src/rules/rule.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { spawnWorker } from '../helpers/workers.js';
import type { WorkerConfig, WorkerReport } from './worker.js';

const workerFile = path.join(path.dirname(fileURLToPath(import.meta.url)), 'worker.ts');

describe('two processes, one id, different rules', () => {
  it("each gets 'rule-mismatch' once, with its rules and the other's recorded", async () => {
    const server = sharedRedis();
    const prefix = uniquePrefix('mismatch');
    const id = `mm:${Math.random().toString(36).slice(2)}`;
    const rules: Rule[][] = [
      [{ limit: 50, interval: 1000 }],
      [{ limit: 80, interval: 1000, algorithm: 'fixed-window' }],
    ];
    const workers = rules.map((r, i) => {
      const config: WorkerConfig = {
        name: `w${i}`,
        target: { host: server.host, port: server.port },
        family: i === 0 ? 'ioredis' : 'redis',
        prefix,
        id,
        rules: r,
        subscriber: true,
        startAt: 0,
        durationMs: 1500,
        queueDepth: 10,
      };
      return spawnWorker<WorkerReport>(workerFile, 'VALVE_WORKER', config, 60_000);
    });
    await Promise.all(workers.map((w) => w.ready));
    const startAt = Date.now() + 300;
    for (const w of workers) w.go(startAt);
    const reports = await Promise.all(workers.map((w) => w.report));
    const expected = [
      [{ limit: 50, interval: 1000, algorithm: 'gcra', burst: 1 }],
      [{ limit: 80, interval: 1000, algorithm: 'fixed-window' }],
    ];
    for (let i = 0; i < 2; i++) {
      const mismatches = reports[i]!.events.filter((e) => e.type === 'rule-mismatch');
      expect(mismatches.map((e) => e.detail)).toEqual([
        { id, rules: expected[i], recorded: expected[1 - i] },
      ]);
      expect(reports[i]!.storeErrors).toEqual([]);
      expect(reports[i]!.grants.length).toBeGreaterThan(0);
    }
  }, 60_000);
});
