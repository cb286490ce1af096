/**
 * The runnable examples of docs/api.md, each in a `#region` inside a function that gives it the
 * names it uses. Run by test/acceptance/api-docs.test.ts, which checks what it prints.
 *
 * Memory stores only, no network: the Redis clients of the createValve and createValveGroup
 * examples are made with `lazyConnect` and never used (a valve calls its store only for a job,
 * a pause or a lease), and the script prints their status to show they never connected.
 */
import { Redis } from 'ioredis';
import { createValve, createValveGroup, redisStore, type Valve } from '../../src/index.js';

/** `createValve(options)`: every option at once. */
async function create(client: Redis): Promise<string> {
  // #region create
  const valve = createValve({
    id: 'github:app-42',
    rules: [
      { limit: 10, interval: '1s' },
      { limit: 5000, interval: '1h', algorithm: 'fixed-window' },
    ],
    store: redisStore({ client }),
    concurrency: { limit: 20, scope: 'global', leaseTtl: '30s' },
    maxQueue: 10_000,
    maxWait: '2m',
    batch: 32,
    onStoreError: 'wait',
    feedback: { maxPause: '15m' },
  });
  // #endregion create
  await valve.close();
  return `createValve ${valve.id}`;
}

/** `createValveGroup(options)`: per-key rules for some keys. */
async function group(client: Redis, subscriber: Redis, enterprise: Set<string>): Promise<string> {
  // #region group
  const installations = createValveGroup({
    rules: [{ limit: 5000, interval: '1h', algorithm: 'fixed-window' }],
    store: redisStore({ client, subscriber }),
    idleTimeout: '5m',
    options: (key) =>
      enterprise.has(key)
        ? { rules: [{ limit: 15000, interval: '1h', algorithm: 'fixed-window' }] }
        : undefined,
  });
  // #endregion group
  const ids = [installations.valve('installation:1').id, installations.valve('installation:2').id];
  const size = installations.size;
  await installations.close();
  return `createValveGroup ${size} valves (${ids.join(' ')})`;
}

/** `valve.wrap(fn, options?)`. */
async function wrap(valve: Valve): Promise<string> {
  const api = { users: { get: async (id: string) => ({ id, name: `user ${id}` }) } };
  // #region wrap
  const getUser = valve.wrap((id: string) => api.users.get(id), { priority: 1 });
  await getUser('42');
  // #endregion wrap
  return `wrap ${JSON.stringify(await getUser('7'))}`;
}

/** `valve.setRules(rules)`. */
async function setRules(valve: Valve): Promise<string> {
  // #region set-rules
  await valve.setRules([{ limit: 15_000, interval: '1h', algorithm: 'fixed-window' }]);
  // #endregion set-rules
  const ran = await valve.run(() => 'ran');
  return `setRules ${ran}`;
}

/** Events: a listener of 'pause'. */
async function events(valve: Valve): Promise<string> {
  const lines: string[] = [];
  const log = {
    info: (fields: { until: Date; source: string }, message: string) =>
      lines.push(`${message} (${fields.source}, ${fields.until instanceof Date ? 'a Date' : 'not a Date'})`),
  };
  // #region events
  valve.on('pause', ({ until, source }) => log.info({ until: new Date(until), source }, 'paused'));
  // #endregion events
  await valve.pause('1s');
  await valve.resume();
  return `events ${lines.join('; ')}`;
}

// Never connected: a command would connect them (and fail, with no server to connect to).
const client = new Redis({ lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
const subscriber = client.duplicate();
const out = [await create(client), await group(client, subscriber, new Set(['installation:2']))];

// GitHub's core limit, raised by the setRules example as for an enterprise installation.
const valve = createValve({
  id: 'api:usage',
  rules: [{ limit: 5000, interval: '1h', algorithm: 'fixed-window' }],
});
out.push(await wrap(valve), await setRules(valve), await events(valve));
await valve.close();

out.push(`redis ${client.status} ${subscriber.status}`);
client.disconnect();
subscriber.disconnect();
console.log(out.join('\n'));
