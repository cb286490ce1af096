/**
 * Experiment (not part of `npm run bench`): what one acquire.lua call costs a Redis server that is
 * idle between calls, as in the shared-limit scenario (one call per turn, ~140 calls/s), next to
 * `return 1`. Sends the same call (6 keys, 14 arguments: burst 20 at 2000/s, 20 jobs, ticket 0)
 * RATE times a second for SECONDS, each script in turn, ROUNDS times, on a private redis-server;
 * prints the medians of commandstats usec per call (execution) and of used_cpu per call (the
 * whole server: wake-up, read, reply and the script).
 *
 *   node --import tsx bench/experiments/script-cold-cost.ts [rounds=5] [rate=150] [seconds=2]
 *   BASELINE_ACQUIRE=old-acquire.lua node --import tsx bench/experiments/script-cold-cost.ts
 *     (old-acquire.lua: an older acquire.lua with its includes expanded, e.g. from
 *     `git show <sha>:src/stores/redis/scripts.generated.ts`)
 */
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { ACQUIRE } from '../../src/stores/redis/scripts.generated.js';
import { startRedis } from '../lib/redis-server.js';

const rounds = Number(process.argv[2] ?? 5);
const rate = Number(process.argv[3] ?? 150);
const seconds = Number(process.argv[4] ?? 2);
const scripts: [string, string][] = [
  ['return 1', '#!lua\nreturn 1\n'],
  ['acquire.lua', ACQUIRE.source],
];
if (process.env.BASELINE_ACQUIRE) {
  scripts.push([
    `baseline ${process.env.BASELINE_ACQUIRE}`,
    readFileSync(process.env.BASELINE_ACQUIRE, 'utf8'),
  ]);
}

const server = await startRedis();
const r = new Redis({ port: server.port, host: '127.0.0.1' });
const keys = ['pause', 'leases', 'fence', 'r:g2000.1000000.20', 'rules', 'line:g2000.1000000.20'].map(
  (k) => `b:{cold}:${k}`,
);
const argv = ['', '20', '1', '0', '0', '', 'g', '500', '20', '1', '=g2000.1000000.20', '1000', '0', ''];
async function counters(): Promise<{ cpu: number; calls: number; usec: number }> {
  const t = await r.info('all');
  const cpu = [...t.matchAll(/used_cpu_(?:sys|user):([\d.]+)/g)].reduce((s, m) => s + Number(m[1]), 0);
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(t);
  return { cpu, calls: Number(m?.[1] ?? 0), usec: Number(m?.[2] ?? 0) };
}
const median = (x: number[]) => [...x].sort((a, b) => a - b)[Math.floor(x.length / 2)]!;
try {
  const shas = await Promise.all(scripts.map(([, source]) => r.script('LOAD', source) as Promise<string>));
  const usec = scripts.map(() => [] as number[]);
  const cpu = scripts.map(() => [] as number[]);
  for (let k = 0; k < rounds; k++) {
    for (let s = 0; s < scripts.length; s++) {
      await r.del(keys[3]!, keys[4]!, keys[5]!);
      const a = await counters();
      const t0 = performance.now();
      for (let i = 0; i < rate * seconds; i++) {
        const wait = t0 + (i * 1000) / rate - performance.now();
        if (wait > 0) await new Promise((res) => setTimeout(res, wait));
        await r.evalsha(shas[s]!, keys.length, ...keys, ...argv);
      }
      const b = await counters();
      const calls = b.calls - a.calls;
      usec[s]!.push((b.usec - a.usec) / calls);
      cpu[s]!.push(((b.cpu - a.cpu) * 1e6) / calls);
    }
  }
  for (let s = 0; s < scripts.length; s++) {
    console.log(
      `${scripts[s]![0]}: ${median(usec[s]!).toFixed(1)} µs of execution, ${median(cpu[s]!).toFixed(1)} µs of server CPU per call (medians of ${rounds} at ${rate}/s)`,
    );
  }
} finally {
  r.disconnect();
  await server.stop();
}
