/**
 * A worker process for the multi-process tests: one valve over redisStore, kept saturated
 * (a fixed number of jobs always queued) from `startAt` for `durationMs`, logging every start.
 *
 * Run as `node --import tsx test/multiprocess/worker.ts` with the configuration in the
 * VALVE_WORKER environment variable (JSON, see WorkerConfig). Prints one JSON line (WorkerReport)
 * on stdout at the end.
 */
import { createValve } from '../../src/index.js';
import type { Rule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { type ClientFamily, connectClient, connectCluster, type Target } from '../helpers/redis-clients.js';
import { waitForGo } from '../helpers/workers.js';

export interface WorkerAction {
  /** ms after startAt. */
  at: number;
  do: 'pause' | 'resume';
  ms?: number;
}

export interface WorkerConfig {
  name: string;
  target: Target;
  /** Connect to this cluster (seed nodes) instead of `target`. */
  cluster?: { host: string; port: number }[] | undefined;
  family: ClientFamily;
  prefix: string;
  id: string;
  rules: Rule[];
  subscriber: boolean;
  /**
   * Epoch ms at which every worker starts queueing jobs. 0: the worker prints "ready" once
   * connected and reads the start time from a line "go <epoch ms>" on stdin.
   */
  startAt: number;
  durationMs: number;
  /** Jobs kept queued at all times (saturation). */
  queueDepth: number;
  actions?: WorkerAction[];
}

export interface WorkerReport {
  name: string;
  /** One per granted job: the store's clock at admission (the acquire reply's `now`, epoch ms), the job's cost, and the local time the job started. */
  grants: { t: number; cost: number }[];
  starts: number[];
  /** Pause/resume events of this valve (local epoch ms). */
  events: { type: string; at: number; until?: number; source?: string; detail?: unknown }[];
  /** Pauses this worker wrote: local time of the call and the store's answer. */
  pauses: { at: number; until: number }[];
  resumes: number[];
  storeErrors: string[];
  notifies: boolean;
  /** Store acquisitions, and those answered with a ticket in the id's line (stores/turns.ts). */
  calls: number;
  ticketed: number;
}

const config = JSON.parse(process.env.VALVE_WORKER ?? '{}') as WorkerConfig;
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms)));

const c = config.cluster
  ? await connectCluster(config.family, config.cluster)
  : await connectClient(config.family, config.target);
const inner = redisStore({
  client: c.client,
  subscriber: config.subscriber ? c.subscriber : undefined,
  prefix: config.prefix,
});
const report: WorkerReport = {
  name: config.name,
  grants: [],
  starts: [],
  events: [],
  pauses: [],
  resumes: [],
  storeErrors: [],
  notifies: false,
  calls: 0,
  ticketed: 0,
};

// The store as the valve sees it, logging the store's clock of every grant.
const store: Store = {
  acquire: async (request) => {
    const r = await inner.acquire(request);
    report.calls++;
    if ((r.turn ?? 0) > 0) report.ticketed++;
    for (let i = 0; i < r.granted; i++) report.grants.push({ t: r.now, cost: request.costs[i]! });
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

const valve = createValve({ id: config.id, rules: config.rules, store });
valve.on('pause', (e) => report.events.push({ type: 'pause', at: now(), until: e.until, source: e.source }));
valve.on('resume', (e) => report.events.push({ type: 'resume', at: now(), source: e.source }));
valve.on('store-error', (err) => report.storeErrors.push(String(err)));
valve.on('rule-mismatch', (e) => report.events.push({ type: 'rule-mismatch', at: now(), detail: e }));

if (!config.startAt) {
  process.stdout.write('ready\n');
  config.startAt = await waitForGo();
}
await sleep(config.startAt - now());
const end = config.startAt + config.durationMs;
let stopping = false;
const job = () => {
  report.starts.push(now());
};
const feed = (): void => {
  if (stopping) return;
  valve.run(job).then(feed, () => {});
};
for (let i = 0; i < config.queueDepth; i++) feed();

const actions = (config.actions ?? []).map(async (a) => {
  await sleep(config.startAt + a.at - now());
  if (a.do === 'pause') {
    const at = now();
    await valve.pause(a.ms ?? 1000);
    report.pauses.push({ at, until: valve.stats().pausedUntil ?? 0 });
  } else {
    report.resumes.push(now());
    await valve.resume();
  }
});
await sleep(end - now());
report.notifies = inner.notifies ?? false;
stopping = true;
await Promise.all(actions);
await valve.close();
await c.close();
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
