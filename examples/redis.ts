/**
 * The README's example: a valve whose budget lives in Redis, shared by every process that
 * uses the same credential, with a subscriber for wake-ups and a full shutdown. Run it with
 * `REDIS_URL=redis://… HUBSPOT_TOKEN=… npx tsx examples/redis.ts`; test/acceptance/examples.test.ts
 * runs it against a test Redis and a local stand-in for the API.
 */
// #region readme
import { Redis } from 'ioredis';
import { createValve, redisStore } from '../src/index.js';

// #endregion readme

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const api = process.env.HUBSPOT_API ?? 'https://api.hubapi.com';
const token = process.env.HUBSPOT_TOKEN ?? '';

// #region readme
const client = new Redis(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
const subscriber = client.duplicate(); // optional: hears other processes pause, resume, free a slot
// ioredis emits 'error' on every failed (re)connection; with no listener it prints "Unhandled error event".
client.on('error', (err) => console.warn('redis:', err.message));
subscriber.on('error', (err) => console.warn('redis subscriber:', err.message));
await Promise.all([client.connect(), subscriber.connect()]); // no offline queue: connect before use

const valve = createValve({
  id: 'hubspot:portal-123', // one id per provider credential
  rules: [
    { limit: 10, interval: '1s' }, // one start every 100 ms: never more than 100 in any 10 s
    { limit: 250_000, interval: '1d', algorithm: 'fixed-window' }, // and 250,000 per UTC day
  ],
  store: redisStore({ client, subscriber }), // shared by every process using this Redis (docs/redis.md)
  maxWait: '2m', // give up (MAX_WAIT) rather than wait longer
});

// fetch through the valve: queued, started within the rules; a 429 or Retry-After pauses
// every process sharing the id, and the request is retried at its original position.
const hubspot = valve.wrapFetch(fetch);
const res = await hubspot(`${api}/crm/v3/objects/contacts`, {
  headers: { authorization: `Bearer ${token}` },
});

// Any other job (an SDK call, a batch of 20 units with cost: 20), highest priority first.
const owners = await valve.run(({ signal }) => fetch(`${api}/crm/v3/owners`, { signal }), { priority: 1 });

// On shutdown: the valve first (queued jobs reject with CLOSED, its leases are released), then
// both connections (quit() fails while Redis is down: disconnect then). valve never closes a
// client you pass it.
await valve.close();
await Promise.all([client, subscriber].map((c) => c.quit().catch(() => c.disconnect())));
// #endregion readme

console.log(`contacts ${res.status}, owners ${owners.status}`);
