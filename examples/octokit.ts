/**
 * GitHub through Octokit with valve/octokit: the one-line migration from
 * @octokit/plugin-throttling, a GitHub App with one budget per installation, and the budgets
 * shared through Redis. Run it against GitHub (GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY,
 * GITHUB_INSTALLATION_IDS) or a stand-in (GITHUB_URL); REDIS_URL shares the budgets between
 * processes. test/integrations/octokit-example.test.ts runs it against the fake GitHub and Redis,
 * and docs/octokit.md shows its regions.
 */
import { createAppAuth } from '@octokit/auth-app';
import { Octokit } from '@octokit/core';
import { Redis } from 'ioredis';
import { memoryStore, redisStore, type Store } from '../src/index.js';
import { throttling } from '../src/integrations/octokit/index.js';

const baseUrl = process.env.GITHUB_URL ?? 'https://api.github.com';
const log = { debug() {}, info() {}, warn: console.warn, error: console.error };

// #region migrate
// Before: import { throttling } from '@octokit/plugin-throttling';
const MyOctokit = Octokit.plugin(throttling);

const octokit = new MyOctokit({
  auth: process.env.GITHUB_TOKEN,
  throttle: {
    onRateLimit: (retryAfter, options, octokit, retryCount) => {
      octokit.log.warn(`Primary limit met by ${options.method} ${options.url}`);
      if (retryCount < 2) {
        octokit.log.info(`Retry #${retryCount + 1} in ${retryAfter} s at most`);
        return true; // retried at its place in the queue, once GitHub's reset has come
      }
    },
    onSecondaryRateLimit: (_retryAfter, options, octokit) => {
      octokit.log.warn(`Secondary limit met by ${options.method} ${options.url}: not retried`);
    },
  },
  // #endregion migrate
  baseUrl,
  log,
  // #region migrate
});
// #endregion migrate

const { data: zen } = await octokit.request('GET /zen');
console.log('token client:', typeof zen === 'string' ? zen : JSON.stringify(zen));

// #region redis
// One Redis for every process: GitHub's limits, pauses and the 100 concurrent requests are shared.
let client: Redis | undefined;
let subscriber: Redis | undefined;
let store: Store = memoryStore();
if (process.env.REDIS_URL) {
  client = new Redis(process.env.REDIS_URL);
  subscriber = new Redis(process.env.REDIS_URL); // wakes waiting processes when a pause ends
  client.on('error', (err) => console.error('redis', err.message));
  subscriber.on('error', (err) => console.error('redis subscriber', err.message));
  store = redisStore({ client, subscriber });
}
// #endregion redis

// #region app
// A GitHub App: one Octokit per installation (as Probot makes them), each with its own budget.
const enterprise = new Set([42]); // installations on GitHub Enterprise Cloud: 15,000 requests per hour

function installationOctokit(installationId: number) {
  return new MyOctokit({
    authStrategy: createAppAuth,
    auth: {
      appId: process.env.GITHUB_APP_ID,
      privateKey: process.env.GITHUB_APP_PRIVATE_KEY,
      installationId,
    },
    throttle: {
      id: 'my-app', // budgets are `my-app:installation:<id>`, found from auth.installationId
      store,
      limits: (budget) =>
        enterprise.has(Number(budget.split(':').pop()))
          ? { core: { limit: 15_000, interval: '1h', algorithm: 'fixed-window' } }
          : undefined,
      onRateLimit: (_retryAfter, _options, _octokit, retryCount) => retryCount < 3,
      onSecondaryRateLimit: (_retryAfter, _options, _octokit, retryCount) => retryCount < 3,
    },
    // #endregion app
    baseUrl,
    log,
    // #region app
  });
}

const installations = (process.env.GITHUB_INSTALLATION_IDS ?? '42,7').split(',').map(Number);
const clients = installations.map(installationOctokit);
const results = await Promise.all(clients.map((gh) => gh.request('GET /installation/repositories')));
// #endregion app
console.log('installations:', results.map((r, i) => `${installations[i]}: ${r.status}`).join(', '));

// #region shutdown
// Queued requests end, leases are released in the store; then the connections can go.
await Promise.all([octokit, ...clients].map((gh) => gh.throttle.close()));
client?.disconnect();
subscriber?.disconnect();
// #endregion shutdown
