/**
 * valve's client-side CPU per job with many keys, without a network or a server: a fake ioredis
 * client answers every EVALSHA at once ("everything granted"). Counts timers set per job.
 * `node --import tsx bench/experiments/fake-client.ts [keys] [rounds]` (valve as bench/lib/valve-module.ts loads it).
 */
import { loadValve } from '../lib/valve-module.js';

const { createValveGroup, redisStore } =
  (await loadValve()) as unknown as typeof import('../../src/index.js');
const keys = Number(process.argv[2] ?? 10_000);
const rounds = Number(process.argv[3] ?? 20);
let timers = 0;
const realSet = globalThis.setTimeout;
(globalThis as { setTimeout: unknown }).setTimeout = ((fn: () => void, ms?: number) => {
  timers++;
  return realSet(fn, ms);
}) as typeof setTimeout;
let calls = 0;
const client = {
  isCluster: false,
  evalsha(_sha: string, _n: number, all: string[]) {
    calls++;
    const count = Number(all[_n + 1]);
    return Promise.resolve([
      count,
      0,
      0,
      0,
      Math.round(performance.timeOrigin * 1000 + performance.now() * 1000),
      0,
    ]);
  },
  eval() {
    throw new Error('no eval');
  },
};
const group = createValveGroup({
  rules: [{ limit: 1e9, interval: 1000, burst: 1e9 }],
  store: redisStore({ client, prefix: 'b' }),
});
const ids = Array.from({ length: keys }, (_, i) => `tenant-${i}`);
let t = performance.now();
let c0 = process.cpuUsage();
await Promise.all(ids.map((id) => group.run(id, () => {})));
let c = process.cpuUsage(c0);
console.log(
  `first use: ${((c.user + c.system) / keys).toFixed(1)} µs CPU/key (${(performance.now() - t).toFixed(0)} ms)`,
);
timers = 0;
calls = 0;
c0 = process.cpuUsage();
t = performance.now();
for (let r = 0; r < rounds; r++) await Promise.all(ids.map((id) => group.run(id, () => {})));
c = process.cpuUsage(c0);
const jobs = keys * rounds;
console.log(
  `steady: ${((c.user + c.system) / jobs).toFixed(2)} µs CPU/job, ${(timers / jobs).toFixed(2)} timers/job, ${(calls / jobs).toFixed(2)} calls/job (${(performance.now() - t).toFixed(0)} ms)`,
);
c0 = process.cpuUsage();
await group.close();
c = process.cpuUsage(c0);
console.log(`close: ${((c.user + c.system) / keys).toFixed(1)} µs CPU/key`);
process.exit(0);
