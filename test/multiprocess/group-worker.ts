/**
 * A worker process for test/multiprocess/redis-multiprocess.test.ts ("a valve group on Redis Cluster"): one valve group over
 * redisStore (on a cluster), every key of `keys` kept saturated (`depth` jobs always queued per
 * key) from the common start for `durationMs`, logging the store's clock of every grant per key.
 * The keys start 100 at a time, 20 ms apart: 8 processes' 8,000 first calls (and subscriptions)
 * at one instant is not what is tested.
 *
 * Run as `node --import tsx test/multiprocess/group-worker.ts` with the configuration in the
 * VALVE_GROUP_WORKER environment variable (JSON, see GroupWorkerConfig). Prints "ready" once
 * connected and warmed up, waits for "go <epoch ms>" on stdin, and ends by printing one JSON
 * line (GroupWorkerReport).
 */
import { createValveGroup } from '../../src/index.js';
import type { Rule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { type ClientFamily, connectCluster } from '../helpers/redis-clients.js';
import { waitForGo } from '../helpers/workers.js';

export interface GroupWorkerConfig {
  name: string;
  cluster: { host: string; port: number }[];
  family: ClientFamily;
  subscriber: boolean;
  prefix: string;
  /** Every process uses every key. */
  keys: string[];
  rules: Rule[];
  /** Keys whose valve gets `overrideRules` instead (the group's `options(key)`). */
  overridden: string[];
  overrideRules: Rule[];
  durationMs: number;
  depth: number;
}

export interface GroupWorkerReport {
  name: string;
  /** Per key: the store's clock (epoch ms, the acquire reply's `now`) of each grant, one per unit. */
  grants: Record<string, number[]>;
  /** Jobs started, over every key. */
  started: number;
  /** acquire calls made, and those the store answered (granting or not), over every key. */
  calls: number;
  answered: number;
  storeErrors: string[];
  /** Live valves at the end, and the group's totals. */
  size: number;
  created: number;
}

const config = JSON.parse(process.env.VALVE_GROUP_WORKER ?? '{}') as GroupWorkerConfig;
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms)));

const c = await connectCluster(config.family, config.cluster);
const inner = redisStore({
  client: c.client,
  subscriber: config.subscriber ? c.subscriber : undefined,
  prefix: config.prefix,
  // 8 processes on a shared machine: a slow moment must not turn into store errors (which
  // would not break a bound, only leave keys without grants).
  timeout: 10_000,
});
const grants: Record<string, number[]> = {};
for (const key of config.keys) grants[key] = [];
let calls = 0;
let answered = 0;
// The store as the group sees it, logging the store's clock of every grant (every job costs 1).
const store: Store = {
  acquire: async (request) => {
    calls++;
    const r = await inner.acquire(request);
    answered++;
    for (let i = 0; i < r.granted; i++) grants[request.id]!.push(r.now);
    return r;
  },
  pause: (id, ms) => inner.pause(id, ms),
  resume: (id) => inner.resume(id),
  renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
  release: (id, tokens) => inner.release(id, tokens),
  ...(inner.subscribe ? { subscribe: inner.subscribe.bind(inner) } : {}),
  get notifies() {
    return inner.notifies ?? false;
  },
};

const overridden = new Set(config.overridden);
const group = createValveGroup({
  rules: config.rules,
  store,
  options: (key) => (overridden.has(key) ? { rules: config.overrideRules } : undefined),
});
const storeErrors: string[] = [];
group.on('store-error', (err, _context, key) => {
  if (storeErrors.length < 20) {
    const e = err as { name?: unknown; message?: unknown; cause?: unknown; errors?: unknown[] };
    const inner = e.errors?.map(String).join('; ') ?? (e.cause === undefined ? '' : String(e.cause));
    storeErrors.push(`${key}: ${String(e.name)}: ${String(e.message)}${inner ? ` (${inner})` : ''}`);
  }
});

process.stdout.write('ready\n');
const startAt = await waitForGo();
await sleep(startAt - now());
const end = startAt + config.durationMs;
let stopping = false;
let started = 0;
const job = () => {
  started++;
};
for (let k = 0; k < config.keys.length; k++) {
  if (k > 0 && k % 100 === 0) await sleep(20);
  const key = config.keys[k]!;
  const feed = (): void => {
    if (stopping) return;
    group.run(key, job).then(feed, () => {});
  };
  for (let i = 0; i < config.depth; i++) feed();
}
await sleep(end - now());
stopping = true;
const stats = group.stats();
await group.close();
await c.close();
const report: GroupWorkerReport = {
  name: config.name,
  grants,
  started,
  calls,
  answered,
  storeErrors,
  size: stats.size,
  created: stats.created,
};
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
