/**
 * References for the Redis scenarios, not products. Each queues jobs and runs one loop that
 * makes one awaited Redis call at a time, then starts as many queued jobs as that call allows.
 *
 * - `ref-redis-poll` (shared limit): the smallest possible Redis GCRA limiter with burst 1 (one
 *   key, one tiny script, one job per call). When refused with less than a millisecond to wait
 *   it asks again at once (the network round trip is its timer), otherwise it sleeps with
 *   setTimeout until just before the slot. It shows how much of a burst-1 rate shared by
 *   several processes this machine allows at all with admission on Redis's clock.
 * - `ref-roundtrip` (Redis throughput): not a limiter: one awaited PING per 32 jobs, then runs
 *   them. It shows what one sequential round trip per batch of 32 costs the Redis server and
 *   allows in jobs/s on this machine: the floor for any design that asks Redis once per 32 jobs.
 */
import { Redis } from 'ioredis';
import { type Adapter, acquireStats, type LimiterOptions } from './adapters.js';

// KEYS[1] = tat key; ARGV[1] = emission µs. Returns {1, now µs} when granted, or {0, wait µs}.
const GCRA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if now < tat then return {0, tat - now} end
redis.call('SET', KEYS[1], now + tonumber(ARGV[1]), 'PX', 60000)
return {1, now}
`;

/**
 * The shared scaffolding: a queue of jobs and one loop. `step` makes one Redis call and returns
 * how many queued jobs may start now (0 after a refusal, having waited as it saw fit).
 */
function loopAdapter(
  name: string,
  setup: (o: LimiterOptions, client: Redis) => void,
  step: (client: Redis) => Promise<number>,
): Adapter {
  let client: Redis | undefined;
  let queue: (() => void)[] = [];
  let head = 0;
  let running = false;
  let stopped = false;

  const loop = async (): Promise<void> => {
    running = true;
    while (!stopped && head < queue.length) {
      let allowed: number;
      try {
        allowed = await step(client!);
      } catch {
        break;
      }
      if (stopped) break;
      const end = Math.min(queue.length, head + allowed);
      while (head < end) {
        const run = queue[head]!;
        queue[head++] = undefined as unknown as () => void;
        run();
      }
      if (head > 1024 && head * 2 > queue.length) {
        queue = queue.slice(head);
        head = 0;
      }
    }
    running = false;
  };

  return {
    name,
    async setup(o: LimiterOptions) {
      if (!o.redis) throw new Error(`${name} needs a Redis server`);
      client = new Redis({ port: o.redis.port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
      client.on('error', () => {});
      stopped = false;
      setup(o, client);
    },
    schedule(fn) {
      return new Promise<void>((resolve) => {
        queue.push(() => {
          fn();
          resolve();
        });
        if (!running) void loop();
      });
    },
    async teardown() {
      stopped = true;
      queue = [];
      head = 0;
      client?.disconnect();
    },
  };
}

export function redisReferenceAdapter(): Adapter {
  let key = '';
  let emissionUs = 0;
  let log: number[] | undefined;
  return loopAdapter(
    'ref-redis-poll',
    (o) => {
      if (o.burst !== 1) throw new Error('ref-redis-poll implements burst 1 only');
      key = `ref:{${o.redis!.id}}`;
      emissionUs = Math.round((o.intervalMs * 1000) / o.limit);
      log = o.grantLog;
    },
    async (client) => {
      const reply = (await client.eval(GCRA, 1, key, emissionUs)) as [number, number];
      acquireStats.calls++;
      if (reply[0] === 1) {
        log?.push(reply[1] / 1000);
        return 1;
      }
      acquireStats.empty++;
      const waitMs = reply[1] / 1000;
      if (waitMs >= 1) await new Promise((r) => setTimeout(r, Math.floor(waitMs)));
      return 0;
    },
  );
}

export function roundTripReferenceAdapter(): Adapter {
  return loopAdapter(
    'ref-roundtrip',
    () => {},
    async (client) => {
      await client.ping();
      return 32;
    },
  );
}
