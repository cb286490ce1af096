/**
 * A live valve in its own process, for test/cli/cli.test.ts: it runs known jobs, holds two
 * global-concurrency leases, pauses, prints what it did as one JSON line, then prints each
 * 'pause' and 'resume' event it hears (from the command: a resume through the store's wake-up,
 * a pause through the store's answer to the next job) as a JSON line, until it reads "done" on
 * stdin ("job" queues one more job).
 *
 * Bundled by cli.test.ts's beforeAll and run as `node <build>/live-worker.js` (or as
 * `node --import tsx test/cli/live-worker.ts`) with VALVE_CLI_WORKER set to the JSON of
 * LiveWorkerConfig.
 */
import { createValve } from '../../src/index.js';
import type { Rule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { type ClientFamily, connectClient, connectCluster, type Target } from '../helpers/redis-clients.js';

export interface LiveWorkerConfig {
  target: Target;
  cluster?: { host: string; port: number }[] | undefined;
  family: ClientFamily;
  prefix: string;
  id: string;
  rules: Rule[];
  /** Costs of the jobs run to completion, one after another. */
  costs: number[];
  /** Jobs (cost 1) started and held, each with a global lease, until "done". */
  held: number;
  /** The pause (ms) written after the jobs. */
  pauseMs: number;
}

export interface LiveWorkerState {
  /** The store's answer to valve.pause(): the pause's end, epoch ms. */
  pausedUntil: number;
  leases: { token: string; fence: number }[];
  /** Local epoch ms when the first job started and when the last one did. */
  firstStart: number;
  lastStart: number;
}

const config = JSON.parse(process.env.VALVE_CLI_WORKER ?? '{}') as LiveWorkerConfig;
const line = (value: object) => process.stdout.write(`${JSON.stringify(value)}\n`);

const c = config.cluster
  ? await connectCluster(config.family, config.cluster)
  : await connectClient(config.family, config.target);
const store = redisStore({ client: c.client, subscriber: c.subscriber, prefix: config.prefix });
const valve = createValve({
  id: config.id,
  rules: config.rules,
  store,
  concurrency: { limit: config.held + 1, scope: 'global', leaseTtl: 60_000 },
});
valve.on('store-error', (err) => line({ storeError: String(err) }));

const firstStart = Date.now();
let lastStart = firstStart;
for (const cost of config.costs) {
  await valve.run(
    () => {
      lastStart = Date.now();
    },
    { cost },
  );
}
let release: () => void = () => {};
const gate = new Promise<void>((resolve) => {
  release = resolve;
});
const leases: { token: string; fence: number }[] = [];
const held: Promise<unknown>[] = [];
for (let i = 0; i < config.held; i++) {
  held.push(
    valve.run(async (ctx) => {
      lastStart = Date.now();
      const lease = (ctx as { lease?: { token: string; fence: number } }).lease;
      if (lease) leases.push({ token: lease.token, fence: lease.fence });
      await gate;
    }),
  );
}
while (leases.length < config.held) await new Promise((r) => setTimeout(r, 5));
// The command's pause and resume reach this valve through the store's wake-ups: wait until the
// store confirms they are delivered for the id.
while (!store.listening?.(config.id)) await new Promise((r) => setTimeout(r, 10));
await valve.pause(config.pauseMs);
const state: LiveWorkerState = { pausedUntil: valve.stats().pausedUntil ?? 0, leases, firstStart, lastStart };
line({ state });
valve.on('pause', (e) => line({ event: 'pause', until: e.until, source: e.source }));
valve.on('resume', () => line({ event: 'resume' }));

// "job" on stdin queues one more job (cost 1, held until "done" like the others; CLOSED at
// "done" if a pause still holds it).
let input = '';
let queued = 0;
const extra: Promise<unknown>[] = [];
process.stdin.on('data', async (chunk) => {
  input += chunk;
  const lines = input.split('\n');
  for (const asked = lines.filter((l) => l === 'job').length; queued < asked; queued++) {
    extra.push(valve.run(() => gate).catch(() => {}));
  }
  if (!lines.includes('done')) return;
  release();
  await Promise.all(held);
  await valve.close();
  await Promise.all(extra);
  await c.close();
  line({ done: true });
  process.exit(0);
});
