/**
 * A worker process for test/multiprocess/octokit-redis.test.ts: one Octokit with valve/octokit's
 * `throttling` on a redisStore, sending `requests` GET requests at once to the fake GitHub from
 * the common start, all with the same token (one GitHub budget shared by every process).
 * Configuration in the VALVE_OCTOKIT_WORKER environment variable (JSON); prints "ready", waits
 * for "go <epoch ms>", and ends by printing one JSON line (OctokitWorkerReport).
 */
import { Octokit } from '@octokit/core';
import { throttling } from '../../src/integrations/octokit/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { type ClientFamily, connectClient, type Target } from '../helpers/redis-clients.js';
import { waitForGo } from '../helpers/workers.js';

export interface OctokitWorkerConfig {
  name: string;
  target: Target;
  family: ClientFamily;
  prefix: string;
  id: string;
  githubUrl: string;
  requests: number;
}

export interface OctokitWorkerReport {
  name: string;
  succeeded: number;
  failed: string[];
  primary: number;
  secondary: number;
}

const config = JSON.parse(process.env.VALVE_OCTOKIT_WORKER ?? '{}') as OctokitWorkerConfig;
const connected = await connectClient(config.family, config.target);
const store = redisStore({
  client: connected.client,
  subscriber: connected.subscriber,
  prefix: config.prefix,
} as never);
let primary = 0;
let secondary = 0;
const ThrottledOctokit = Octokit.plugin(throttling);
const octokit = new ThrottledOctokit({
  baseUrl: config.githubUrl,
  auth: 'shared-token',
  log: { debug() {}, info() {}, warn() {}, error() {} },
  throttle: {
    id: config.id,
    store,
    // GitHub's own limits for this fake: 20 requests per second, 4 at a time.
    limits: { core: { limit: 20, interval: '1s', algorithm: 'fixed-window' }, concurrency: 4 },
    onRateLimit: (_retryAfter: number, _options: unknown, _octokit: unknown, retryCount: number) => {
      primary++;
      return retryCount < 20;
    },
    onSecondaryRateLimit: (_retryAfter: number, _options: unknown, _octokit: unknown, retryCount: number) => {
      secondary++;
      return retryCount < 20;
    },
  },
});
process.stdout.write('ready\n');
const startAt = await waitForGo();
await new Promise((r) => setTimeout(r, Math.max(0, startAt - Date.now())));
const results = await Promise.allSettled(
  Array.from({ length: config.requests }, (_, i) =>
    octokit.request(`GET /repos/o/r/issues/${config.name}-${i}`),
  ),
);
const report: OctokitWorkerReport = {
  name: config.name,
  succeeded: results.filter((r) => r.status === 'fulfilled').length,
  failed: results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : [])),
  primary,
  secondary,
};
await connected.close();
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
