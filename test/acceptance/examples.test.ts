import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setup as ioredis } from '../../examples/redis-clients/ioredis.js';
import { setup as ioredisCluster } from '../../examples/redis-clients/ioredis-cluster.js';
import { setup as iovalkey } from '../../examples/redis-clients/iovalkey.js';
import { setup as iovalkeyCluster } from '../../examples/redis-clients/iovalkey-cluster.js';
import { setup as nodeRedis } from '../../examples/redis-clients/node-redis.js';
import { setup as nodeRedisCluster } from '../../examples/redis-clients/node-redis-cluster.js';
import type { Store } from '../../src/index.js';
import { type FakeApiKind, startFakeApi } from '../helpers/fake-apis.js';
import { runExample } from '../helpers/run-example.js';
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { expectStoreWorks } from '../helpers/store-smoke.js';

let api: Server;
const seen: string[] = [];

beforeAll(async () => {
  api = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
    res.setHeader('content-type', 'application/json');
    res.end('{"results":[]}');
  });
  await new Promise<void>((done) => api.listen(0, '127.0.0.1', done));
});
afterAll(() => new Promise<void>((done) => api.close(() => done())));

describe('examples/redis.ts (the README example)', () => {
  it('runs both jobs through a Redis-backed valve and exits by itself after its shutdown', async () => {
    const { port } = api.address() as AddressInfo;
    const result = await runExample('examples/redis.ts', {
      REDIS_URL: sharedRedis().url,
      HUBSPOT_API: `http://127.0.0.1:${port}`,
      HUBSPOT_TOKEN: 'test-token',
    });
    expect(result.signal, `killed: the process did not exit by itself\n${result.stderr}`).toBeNull();
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.trim()).toBe('contacts 200, owners 200');
    expect(result.stderr).not.toMatch(/Unhandled error event/);
    expect(seen).toEqual(['GET /crm/v3/objects/contacts Bearer test-token', 'GET /crm/v3/owners ']);
  }, 90_000);
});

describe('examples/redis-clients: the set-ups of docs/redis.md', () => {
  const setups: [string, () => Promise<{ store: Store; close(): Promise<unknown> }>][] = [
    ['examples/redis-clients/ioredis.ts', () => ioredis(sharedRedis().url)],
    ['examples/redis-clients/ioredis-cluster.ts', () => ioredisCluster(sharedCluster().nodes)],
    ['examples/redis-clients/iovalkey.ts', () => iovalkey(sharedRedis('valkey').url)],
    ['examples/redis-clients/iovalkey-cluster.ts', () => iovalkeyCluster(sharedCluster('valkey').nodes)],
    ['examples/redis-clients/node-redis.ts', () => nodeRedis(sharedRedis().url)],
    ['examples/redis-clients/node-redis-cluster.ts', () => nodeRedisCluster(sharedCluster().nodes)],
  ];
  it.each(setups)('%s', async (_, setup) => {
    const { store, close } = await setup();
    // The subscriber follows the store's channels (notifies: every subscription confirmed).
    await expectStoreWorks(store, uniquePrefix('example').replace(/:/g, '-'));
    await close();
  });
});

describe('examples of docs/integrations.md, run as scripts against local fakes of each provider', () => {
  const cases: [file: string, kind: FakeApiKind, env: string, output: RegExp][] = [
    ['examples/openai.ts', 'openai', 'OPENAI_BASE_URL', /^3 completions, 126 tokens, 3 requests$/],
    [
      'examples/anthropic.ts',
      'anthropic',
      'ANTHROPIC_BASE_URL',
      /^3 messages, 90 output tokens, 3 requests$/,
    ],
    ['examples/stripe.ts', 'stripe', 'STRIPE_API_URL', /^3 customers, 3 requests$/],
    ['examples/ky.ts', 'generic', 'API_URL', /^3 items, 3 requests$/],
    ['examples/undici.ts', 'generic', 'API_URL', /^fetch 200, request 200, 2 valves$/],
    ['examples/axios.ts', 'generic', 'API_URL', /^items: \{"ok":true,"n":1\}$/],
  ];
  it.each(cases)(
    '%s',
    async (file, kind, variable, output) => {
      const api = await startFakeApi(kind, { limit: 10, windowMs: 1000 });
      try {
        const result = await runExample(file, {
          [variable]: api.url,
          OPENAI_API_KEY: 'sk-test',
          ANTHROPIC_API_KEY: 'sk-ant-test',
          STRIPE_SECRET_KEY: 'sk_test_1',
        });
        expect(result.signal, `killed: the process did not exit by itself\n${result.stderr}`).toBeNull();
        expect(result.code, result.stderr).toBe(0);
        expect(result.stdout.trim()).toMatch(output);
        expect(api.log.length).toBeGreaterThan(0);
      } finally {
        await api.stop();
      }
    },
    90_000,
  );
});
