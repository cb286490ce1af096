/**
 * valve/octokit: a budget's valves over their life. Here a group drops an idle valve after
 * 300 ms instead of five minutes (the plugin's groups are made through a wrapped
 * createValveGroup), so that a lane's valve is dropped while its requests wait, outside it, for
 * a long pause: nothing is sent to GitHub before the pause ends, on a memory store and on Redis.
 * And a `limits` function is asked once per budget, not once per lane.
 */
import { Octokit } from '@octokit/core';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { throttling } from '../../src/integrations/octokit/index.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { type FakeGitHub, startFakeGitHub } from '../helpers/fake-github.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const groups = vi.hoisted(() => ({ made: [] as { stats(): { evicted: number; size: number } }[] }));
vi.mock('../../src/group.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../src/group.js')>();
  return {
    ...original,
    createValveGroup: (options: Parameters<typeof original.createValveGroup>[0]) => {
      const group = original.createValveGroup({ ...options, idleTimeout: 300 });
      groups.made.push(group);
      return group;
    },
  };
});

const ThrottledOctokit = Octokit.plugin(throttling);
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function github(): Promise<FakeGitHub> {
  const gh = await startFakeGitHub();
  cleanups.push(() => gh.stop());
  return gh;
}

function client(url: string, store: Store, throttle: Record<string, unknown> = {}) {
  const octokit = new ThrottledOctokit({
    baseUrl: url,
    log: quiet,
    throttle: {
      id: `t${Math.random().toString(36).slice(2, 8)}`,
      onRateLimit: () => true,
      onSecondaryRateLimit: () => true,
      store,
      ...throttle,
    },
  });
  cleanups.push(() => octokit.throttle.close());
  return octokit;
}

function redis(): Store {
  const server = sharedRedis();
  const client = new Redis({ host: server.host, port: server.port, lazyConnect: false });
  const subscriber = new Redis({ host: server.host, port: server.port, lazyConnect: false });
  cleanups.push(() => {
    client.disconnect();
    subscriber.disconnect();
  });
  return redisStore({ client, subscriber, prefix: uniquePrefix('octokit-budgets') });
}

/** Waits until `check` holds (polling every 20 ms), at most `ms`. */
async function until(check: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('a lane valve dropped while its requests wait for a pause', () => {
  for (const kind of ['memory', 'redis'] as const) {
    it(`sends nothing before the pause ends, to the waiting requests nor to later ones (${kind})`, async () => {
      const gh = await github();
      const store = kind === 'memory' ? memoryStore() : redis();
      const octokit = client(gh.url, store);
      // The last unit of `core` spent: the lane pauses until the reset, 3 s on.
      const reset = Math.ceil(Date.now() / 1000) + 3;
      gh.script({
        status: 200,
        headers: {
          'x-ratelimit-remaining': '0',
          'x-ratelimit-reset': String(reset),
          'x-ratelimit-resource': 'core',
        },
        body: {},
      });
      await octokit.request('GET /first');
      const waiting = [octokit.request('GET /waiting-1'), octokit.request('GET /waiting-2')];
      // The `core` valve has no work (its requests wait outside it) and is dropped.
      const evicted = () => groups.made.reduce((n, g) => n + g.stats().evicted, 0);
      const before = evicted();
      await until(() => evicted() > before, 2500);
      expect(Date.now()).toBeLessThan(reset * 1000);
      // A request made now meets a new `core` valve.
      const later = octokit.request('GET /later');
      const results = await Promise.all([...waiting, later]);
      expect(results.map((r) => r.status)).toEqual([200, 200, 200]);
      const after = gh.log.filter((e) => e.path !== '/first');
      expect(after.map((e) => e.path).sort()).toEqual(['/later', '/waiting-1', '/waiting-2']);
      for (const e of after) expect(e.t).toBeGreaterThanOrEqual(reset * 1000);
      expect(gh.limited()).toBe(0);
    }, 15_000);
  }
});

describe('a `limits` function', () => {
  it('is asked once per budget, whatever the lanes its requests spend; again once its valves were dropped', async () => {
    const gh = await github();
    const asked: string[] = [];
    const mine = groups.made.length;
    const octokit = client(gh.url, memoryStore(), {
      key: (options: { headers?: Record<string, string> }) => options.headers?.['x-budget'],
      limits: (budget: string) => {
        asked.push(budget);
        return budget.endsWith(':big') ? { core: { limit: 15_000, interval: '1h' } } : undefined;
      },
    });
    const budgets = ['big', 'small'];
    for (const b of budgets) {
      const headers = { 'x-budget': b };
      await octokit.request('GET /repos/o/r', { headers });
      await octokit.request('POST /repos/o/r/issues', { headers, title: 'x' });
      await octokit.request('GET /search/issues', { headers, q: 'x' });
      await octokit.request('GET /search/code', { headers, q: 'x' });
      await octokit.request('POST /graphql', { headers, query: 'mutation { x }' });
    }
    expect(asked.map((b) => b.split(':').pop())).toEqual(budgets);
    // Once every valve of a budget was dropped (idle), its next valve asks again.
    await until(() => groups.made.slice(mine).every((g) => g.stats().size === 0), 5000);
    await octokit.request('GET /repos/o/r', { headers: { 'x-budget': 'big' } });
    expect(asked.map((b) => b.split(':').pop())).toEqual([...budgets, 'big']);
  }, 15_000);
});
