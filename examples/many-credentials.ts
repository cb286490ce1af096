/**
 * One budget per credential when there are thousands of them: a valve group. Run it with
 * `npx tsx examples/many-credentials.ts` (memory store), or `REDIS_URL=redis://127.0.0.1:6379
 * npx tsx examples/many-credentials.ts` to share the budgets through Redis.
 * test/stores/group-example.test.ts runs it both ways, and checks the docs blocks taken from it.
 */
import { Redis } from 'ioredis';
import { createValveGroup, memoryStore, redisStore, type Store } from '../src/index.js';

const url = process.env.REDIS_URL;
let client: Redis | undefined;
let subscriber: Redis | undefined;
let store: Store = memoryStore();
if (url !== undefined) {
  client = new Redis(url);
  subscriber = new Redis(url);
  client.on('error', (err) => console.error('redis', err.message));
  subscriber.on('error', (err) => console.error('redis subscriber', err.message));
  store = redisStore({ client, subscriber, prefix: 'example' });
}
const enterprise = new Set(['installation:42']);

// #region installations
// One valve per GitHub App installation, created on first use, dropped after 5 idle minutes.
const installations = createValveGroup({
  rules: [{ limit: 5000, interval: '1h', algorithm: 'fixed-window' }],
  store, // every installation's budget in the one store (one Redis client, one subscriber)
  idleTimeout: '5m',
  options: (key) =>
    enterprise.has(key)
      ? { rules: [{ limit: 15_000, interval: '1h', algorithm: 'fixed-window' }] }
      : undefined,
});

async function listRepos(installationId: number, token: string): Promise<unknown> {
  return installations.run(`installation:${installationId}`, async ({ signal }) => {
    const response = await fetchFn('https://api.github.com/installation/repositories', {
      headers: { authorization: `Bearer ${token}` },
      signal,
    });
    installations.valve(`installation:${installationId}`).observe(response);
    return response.json();
  });
}
// #endregion installations

// #region hubspot
// A per-customer HubSpot integration: each request goes through its portal's valve.
const portals = createValveGroup({
  rules: [
    { limit: 100, interval: '10s', algorithm: 'sliding-window' },
    { limit: 250_000, interval: '1d', algorithm: 'fixed-window' },
  ],
  store,
  maxWait: '30s',
});

const hubspotFetch = portals.wrapFetch(fetchFn, {
  key: (_input, init) => `hubspot:${new Headers(init?.headers).get('x-portal-id')}`,
  retries: 3,
});

portals.on('pause', ({ until, source }, key) => {
  console.log(`${key} paused until ${new Date(until).toISOString()} (${source})`);
});

async function contacts(portalId: string, token: string): Promise<unknown> {
  const response = await hubspotFetch('https://api.hubapi.com/crm/v3/objects/contacts', {
    headers: { authorization: `Bearer ${token}`, 'x-portal-id': portalId },
  });
  return response.json();
}
// #endregion hubspot

/** A stand-in for the providers, so the example runs offline: one 429 for portal 7. */
let throttled = false;
async function fetchFn(input: string | URL | Request, init?: RequestInit): Promise<Response> {
  const portal = new Headers(init?.headers).get('x-portal-id');
  if (portal === '7' && !throttled) {
    throttled = true;
    return new Response('{}', { status: 429, headers: { 'retry-after-ms': '50' } });
  }
  return Response.json({ url: String(input), portal });
}

await Promise.all([listRepos(1, 't1'), listRepos(42, 't42'), listRepos(1, 't1')]);
await Promise.all(['3', '7', '3'].map((portal) => contacts(portal, 'token')));
const i = installations.stats();
const p = portals.stats();
console.log(
  `installations: ${i.size} valves, ${i.started} jobs; portals: ${p.size} valves, ${p.started} requests`,
);

// #region shutdown
await Promise.all([installations.close(), portals.close()]);
client?.disconnect();
subscriber?.disconnect();
// #endregion shutdown
