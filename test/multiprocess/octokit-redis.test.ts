/**
 * valve/octokit over three processes sharing one Redis (the test servers' own, see
 * test/helpers/global-setup.ts) and one GitHub token against the fake GitHub: every request
 * reaches the caller as a success (0 rejected), each process's retries wait for the pauses the
 * others wrote, and GitHub's limits are kept together.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeGitHub, startFakeGitHub } from '../helpers/fake-github.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { spawnWorker } from '../helpers/workers.js';
import type { OctokitWorkerConfig, OctokitWorkerReport } from './octokit-worker.js';

const workerFile = path.join(path.dirname(fileURLToPath(import.meta.url)), 'octokit-worker.ts');

let github: FakeGitHub;
beforeAll(async () => {
  // 20 requests per second per token (windows on whole seconds), 4 in flight, 20 ms per answer.
  github = await startFakeGitHub({ limit: 20, windowMs: 1000, concurrency: 4, latencyMs: 20 });
});
afterAll(() => github.stop());

describe('valve/octokit on Redis, three processes, one token', () => {
  it('rejects no request to the caller and keeps the concurrency limit', async () => {
    const server = sharedRedis();
    const prefix = uniquePrefix('octokit');
    const id = `github-${Math.random().toString(36).slice(2, 8)}`;
    const families = ['ioredis', 'redis', 'iovalkey'] as const;
    const workers = families.map((family, i) =>
      spawnWorker<OctokitWorkerReport>(
        workerFile,
        'VALVE_OCTOKIT_WORKER',
        {
          name: `w${i}`,
          target: { host: server.host, port: server.port },
          family,
          prefix,
          id,
          githubUrl: github.url,
          requests: 20,
        } satisfies OctokitWorkerConfig as { name: string },
        60_000,
      ),
    );
    await Promise.all(workers.map((w) => w.ready));
    const startAt = Date.now() + 300;
    for (const w of workers) w.go(startAt);
    const reports = await Promise.all(workers.map((w) => w.report));

    expect(reports.flatMap((r) => r.failed)).toEqual([]);
    expect(reports.map((r) => r.succeeded)).toEqual([20, 20, 20]);
    const answered = github.log.filter((e) => e.status === 200);
    expect(answered).toHaveLength(60);
    // Global concurrency over the three processes: GitHub never saw more than 4 at once.
    expect(github.maxInFlight()).toBeLessThanOrEqual(4);
    expect(github.log.filter((e) => e.kind === 'secondary')).toHaveLength(0);
    // What reached GitHub as a limit was met by a handler in some process, and retried.
    const limited = github.limited();
    expect(reports.reduce((s, r) => s + r.primary + r.secondary, 0)).toBe(limited);
    console.log(
      `octokit over Redis, 3 processes: 60 requests, ${limited} answered 403 (primary), 0 rejected`,
    );
  }, 60_000);
});
