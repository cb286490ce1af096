/**
 * A worker process for test/feedback/fleet-window-redis.test.ts: one valve over redisStore
 * (ioredis, with a subscriber) and `callers` callers sending `requests` requests in all through
 * `valve.wrapFetch(fetch)` to one real server-side limiter. Logs every ticket of the fleet window
 * (Store.windowSend: send number, probe, local epoch ms) and every report (send number, local
 * epoch ms when the store answered it) and every request (local epoch ms when fetch was called and
 * when its answer came, status), so that the test can check across processes that at most one
 * probe is in flight at a time and that nothing else is sent while it is.
 *
 * Run as `node --import tsx test/feedback/fleet-worker.ts` with the configuration in the
 * FLEET_WORKER environment variable (JSON, see FleetWorkerConfig). `fleet: false` hides the
 * store's window methods from the valve (the per-process behaviour, for comparison).
 */
import { createValve } from '../../src/index.js';
import type { Rule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { connectClient, type Target } from '../helpers/redis-clients.js';
import { anchoredWallClock } from '../helpers/wall-clock.js';
import { waitForGo } from '../helpers/workers.js';

export interface FleetWorkerConfig {
  name: string;
  target: Target;
  prefix: string;
  id: string;
  rules: Rule[];
  callers: number;
  requests: number;
  url: string;
  /** A plain server to warm fetch up on (the provider would count the warm-up). */
  warmUrl: string;
  fleet: boolean;
}

export interface FleetWorkerReport {
  name: string;
  /** Final status of each request. */
  statuses: number[];
  /** Tickets granted: send number, whether it is a probe, local epoch ms when asked for and when granted. */
  tickets: { seq: number; probe: boolean; asked: number; at: number }[];
  /**
   * Reports: send number, remaining count reported, the wait the store returned (> 0: the window's
   * count is spent), local epoch ms when sent to the store and when it answered.
   */
  reports: { seq: number; remaining: number; wait: number; sentAt: number; at: number }[];
  /**
   * Every request sent (each attempt): its ticket's send number, local epoch ms when the ticket
   * was asked for and when the store's answer came (the fetch call's when it had none), local
   * epoch ms of the fetch call and of its answer, status.
   */
  requests: {
    seq: number;
    askedAt: number;
    ticketAt: number;
    sent: number;
    answered: number;
    status: number;
  }[];
  storeErrors: string[];
}

const config = JSON.parse(process.env.FLEET_WORKER ?? '{}') as FleetWorkerConfig;
const now = anchoredWallClock();

const c = await connectClient('ioredis', config.target);
const inner = redisStore({ client: c.client, subscriber: c.subscriber, prefix: config.prefix });
const report: FleetWorkerReport = {
  name: config.name,
  statuses: [],
  tickets: [],
  reports: [],
  requests: [],
  storeErrors: [],
};

/** Tickets granted to this process and not yet used by a request, oldest first. */
const unsent: { seq: number; probe: boolean; asked: number; at: number }[] = [];

const store: Store = {
  acquire: (request) => inner.acquire(request),
  pause: (id, ms) => inner.pause(id, ms),
  resume: (id) => inner.resume(id),
  renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
  release: (id, tokens) => inner.release(id, tokens),
  ...(inner.subscribe ? { subscribe: inner.subscribe.bind(inner) } : {}),
  ...(inner.listening ? { listening: inner.listening.bind(inner) } : {}),
  get notifies() {
    return inner.notifies ?? false;
  },
  ...(config.fleet
    ? {
        windowSend: async (id: string, probeTtl: number) => {
          const asked = now();
          const t = await inner.windowSend!(id, probeTtl);
          if (t.seq > 0) {
            const granted = { seq: t.seq, probe: t.probe, asked, at: now() };
            report.tickets.push(granted);
            unsent.push(granted);
          }
          return t;
        },
        windowReport: async (id: string, seq: number, remaining: number, resetMs: number) => {
          const sentAt = now();
          const wait = await inner.windowReport!(id, seq, remaining, resetMs);
          report.reports.push({ seq, remaining, wait, sentAt, at: now() });
          return wait;
        },
      }
    : {}),
};

const valve = createValve({ id: config.id, rules: config.rules, store });
valve.on('store-error', (err) => report.storeErrors.push(String(err)));
// Each request is sent right after its ticket was granted (the same chain of promises, so in the
// order of the tickets): the oldest ticket not yet used is this request's.
const logged: typeof fetch = async (input, init) => {
  const sent = now();
  const ticket = unsent.shift();
  const res = await fetch(input, init);
  report.requests.push({
    seq: ticket?.seq ?? 0,
    askedAt: ticket?.asked ?? sent,
    ticketAt: ticket?.at ?? sent,
    sent,
    answered: now(),
    status: res.status,
  });
  return res;
};
const f = valve.wrapFetch(logged, { retries: 10 });

// Warm up fetch and the scripts on another id, so that the run starts at steady-state speed.
const warm = createValve({ id: `${config.id}:warm`, rules: config.rules, store: inner });
await warm.run(async () => {
  await inner.windowSend!(`${config.id}:warm`, 1);
  await (await fetch(config.warmUrl)).arrayBuffer();
});
await warm.close();

process.stdout.write('ready\n');
const startAt = await waitForGo();
await new Promise((r) => setTimeout(r, Math.max(0, startAt - now())));

let next = 0;
await Promise.all(
  Array.from({ length: config.callers }, async () => {
    while (next < config.requests) {
      next++;
      const res = await f(`${config.url}/${config.name}`);
      await res.arrayBuffer();
      report.statuses.push(res.status);
    }
  }),
);
await valve.close();
await c.close();
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
