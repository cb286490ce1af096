/**
 * A reference for the shared-limit scenario, not a product: the smallest possible Redis GCRA
 * limiter with burst 1 (one key, one tiny script, one job per call). Each process asks Redis
 * for one job at a time; when refused with less than a millisecond to wait it asks again at
 * once (the network round trip is its timer), otherwise it sleeps with setTimeout until just
 * before the slot. It shows how much of a burst-1 rate shared by several processes this
 * machine allows at all with admission on Redis's clock, in the same run as valve.
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

export function redisReferenceAdapter(): Adapter {
  let client: Redis | undefined;
  let key = '';
  let emissionUs = 0;
  let log: number[] | undefined;
  let queue: (() => void)[] = [];
  let head = 0;
  let running = false;
  let stopped = false;

  const loop = async (): Promise<void> => {
    running = true;
    while (!stopped && head < queue.length) {
      let reply: [number, number];
      try {
        reply = (await client!.eval(GCRA, 1, key, emissionUs)) as [number, number];
      } catch {
        break;
      }
      acquireStats.calls++;
      if (stopped) break;
      if (reply[0] === 1) {
        log?.push(reply[1] / 1000);
        const run = queue[head]!;
        queue[head++] = undefined as unknown as () => void;
        run();
      } else {
        acquireStats.empty++;
        const waitMs = reply[1] / 1000;
        if (waitMs >= 1) await new Promise((r) => setTimeout(r, Math.floor(waitMs)));
      }
      if (head > 1024 && head * 2 > queue.length) {
        queue = queue.slice(head);
        head = 0;
      }
    }
    running = false;
  };

  return {
    name: 'ref-redis-poll',
    async setup(o: LimiterOptions) {
      if (!o.redis) throw new Error('ref-redis-poll needs a Redis server');
      if (o.burst !== 1) throw new Error('ref-redis-poll implements burst 1 only');
      client = new Redis({ port: o.redis.port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
      client.on('error', () => {});
      key = `ref:{${o.redis.id}}`;
      emissionUs = Math.round((o.intervalMs * 1000) / o.limit);
      log = o.grantLog;
      stopped = false;
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

/**
 * A reference for the Redis throughput scenario, not a limiter: it makes one awaited PING per
 * 32 jobs (never more than one in flight) and then runs them. It admits nothing; it shows what
 * one sequential round trip per batch of 32 costs the Redis server and allows in jobs/s on this
 * machine, in the same run: the floor for any design that asks Redis once per 32 jobs.
 */
export function roundTripReferenceAdapter(): Adapter {
  let client: Redis | undefined;
  let queue: (() => void)[] = [];
  let head = 0;
  let running = false;
  let stopped = false;

  const loop = async (): Promise<void> => {
    running = true;
    while (!stopped && head < queue.length) {
      try {
        await client!.ping();
      } catch {
        break;
      }
      if (stopped) break;
      const end = Math.min(queue.length, head + 32);
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
    name: 'ref-roundtrip',
    async setup(o: LimiterOptions) {
      if (!o.redis) throw new Error('ref-roundtrip needs a Redis server');
      client = new Redis({ port: o.redis.port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
      client.on('error', () => {});
      stopped = false;
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
