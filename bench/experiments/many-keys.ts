/**
 * Many keys in one process through one valve group on Redis (diagnosis of the 10,000-keys case):
 * `tsx bench/experiments/many-keys.ts [keys] [durationMs] [valve|rlf]`. Creates the group, runs one
 * job per key (timed: first use), then keeps one job outstanding per key for the duration; prints
 * jobs/s, store errors, and the Redis commands by name during the timed run.
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';

const { createValveGroup, redisStore } =
  (await loadValve()) as unknown as typeof import('../../src/index.js');

import { nowMs } from '../lib/common.js';
import { startRedis } from '../lib/redis-server.js';
import { loadValve } from '../lib/valve-module.js';

const keys = Number(process.argv[2] ?? 10_000);
const durationMs = Number(process.argv[3] ?? 2000);
const peer = process.argv[4] ?? 'valve';

async function commandstats(admin: Redis): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of (await admin.info('all')).split('\r\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
    if (m) {
      out.set(m[1]!, Number(m[2]));
      out.set(`${m[1]!} µs`, Number(m[3]));
    }
    const cpu = /^used_cpu_(sys|user):([\d.]+)/.exec(line);
    if (cpu) out.set('cpu', (out.get('cpu') ?? 0) + Number(cpu[2]));
  }
  return out;
}

const server = await startRedis();
const client = new Redis({ port: server.port, host: '127.0.0.1' });
const admin = new Redis({ port: server.port, host: '127.0.0.1' });
let storeErrors = 0;
let run: (key: string) => Promise<unknown>;
let close: () => Promise<void> = async () => {};
if (peer === 'valve') {
  const group = createValveGroup({
    rules: [{ limit: 1_000_000_000, interval: 1000, burst: 1_000_000_000 }],
    store: redisStore({ client, prefix: 'bench' }),
  });
  group.on('store-error', (err) => {
    if (storeErrors++ === 0) console.log(`first store error: ${String(err)}`);
  });
  run = (key) => group.run(key, () => {});
  close = () => group.close();
} else {
  const limiters = new Map<string, RateLimiterRedis>();
  run = (key) => {
    let l = limiters.get(key);
    if (!l) {
      l = new RateLimiterRedis({ points: 1_000_000_000, duration: 1, storeClient: client, keyPrefix: key });
      limiters.set(key, l);
    }
    return l.consume('bench', 1);
  };
}
const ids = Array.from({ length: keys }, (_, i) => `tenant-${i}`);
const h0 = process.memoryUsage().heapUsed;
let t = nowMs();
await Promise.all(ids.map((id) => run(id)));
console.log(
  `first use: ${(nowMs() - t).toFixed(0)} ms for ${keys} keys; heap +${((process.memoryUsage().heapUsed - h0) / keys).toFixed(0)} B/key`,
);
const session = process.env.PROFILE ? new Session() : undefined;
if (session) {
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
}
const before = await commandstats(admin);
const cpu0 = process.cpuUsage();
t = nowMs();
const deadline = t + durationMs;
let started = 0;
await Promise.all(
  ids.map(async (id) => {
    while (nowMs() < deadline) {
      await run(id);
      started++;
    }
  }),
);
const elapsed = nowMs() - t;
if (session) {
  const { profile } = await session.post('Profiler.stop');
  writeFileSync(process.env.PROFILE!, JSON.stringify(profile));
}
const cpu = process.cpuUsage(cpu0);
const after = await commandstats(admin);
const delta: string[] = [];
for (const [name, calls] of after) {
  const d = calls - (before.get(name) ?? 0);
  if (d > 0 && !name.startsWith('info') && name !== 'cpu')
    delta.push(`${name}=${(d / Math.max(1, started)).toFixed(3)}`);
}
console.log(
  `${peer} ${keys} keys: ${Math.round((started / elapsed) * 1000)} jobs/s, ${started} jobs in ${elapsed.toFixed(0)} ms, store errors ${storeErrors}, client CPU ${((cpu.user + cpu.system) / Math.max(1, started)).toFixed(1)} µs/job, Redis CPU ${((((after.get('cpu') ?? 0) - (before.get('cpu') ?? 0)) * 1e6) / Math.max(1, started)).toFixed(1)} µs/job; per job: ${delta.join(' ')}`,
);
await close();
client.disconnect();
admin.disconnect();
await server.stop();
process.exit(0);
