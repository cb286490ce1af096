/**
 * Experiment (not part of `npm run bench`): would Redis Functions make valve's turn cheaper for
 * a server idle between calls? The same acquire.lua call as script-cold-cost.ts (burst 20 at
 * 2000/s, 20 jobs, ticket 0) sent RATE times a second for SECONDS, ROUNDS times, once as
 * EVALSHA of acquire.lua and once as FCALL of a library made of the same code (its local
 * functions then made once at FUNCTION LOAD instead of on every call; Redis 7 runs a library's
 * load code without the standard globals, so they are bound on each call). Prints both replies
 * (they must match but for the time) and the medians of commandstats usec and used_cpu per call.
 *
 *   node --import tsx bench/experiments/fcall-cold.ts [rounds=5] [rate=150] [seconds=2]
 */
import { Redis } from 'ioredis';
import { ACQUIRE } from '../../src/stores/redis/scripts.generated.js';
import { startRedis } from '../lib/redis-server.js';

const rounds = Number(process.argv[2] ?? 5);
const rate = Number(process.argv[3] ?? 150);
const seconds = Number(process.argv[4] ?? 2);
let body = ACQUIRE.source.replace(/^#!lua\n/, '');
body = body.replace(/if redis\.replicate_commands then\n {2}redis\.replicate_commands\(\)\nend\n/, '');
body = body.replace('local rcall, rpcall = redis.call, redis.pcall', 'local rcall, rpcall');
body = body.replace('local tonumber, type = tonumber, type', 'local tonumber, type');
body = body.replace(
  'local format, find, match, sub = string.format, string.find, string.match, string.sub',
  'local format, find, match, sub',
);
body = body.replace('local floor, ceil = math.floor, math.ceil', 'local floor, ceil');
body = body.replace(/return acquire_one\(KEYS, ARGV, nil\)\s*$/, '');
const lib = `#!lua name=vt\n${body}\nredis.register_function('vt_acquire', function(keys, args) rcall, rpcall = redis.call, redis.pcall tonumber, type = _G.tonumber, _G.type format, find, match, sub = string.format, string.find, string.match, string.sub floor, ceil = math.floor, math.ceil return acquire_one(keys, args, nil) end)\n`;

const server = await startRedis();
const r = new Redis({ port: server.port, host: '127.0.0.1' });
const keys = ['pause', 'leases', 'fence', 'r:g2000.1000000.20', 'rules', 'line:g2000.1000000.20'].map(
  (k) => `b:{cold}:${k}`,
);
const argv = ['', '20', '1', '0', '0', '', 'g', '500', '20', '1', '=g2000.1000000.20', '1000', '0', ''];
async function counters(name: string): Promise<{ cpu: number; calls: number; usec: number }> {
  const t = await r.info('all');
  const cpu = [...t.matchAll(/used_cpu_(?:sys|user):([\d.]+)/g)].reduce((s, m) => s + Number(m[1]), 0);
  const m = new RegExp(`cmdstat_${name}:calls=(\\d+),usec=(\\d+)`).exec(t);
  return { cpu, calls: Number(m?.[1] ?? 0), usec: Number(m?.[2] ?? 0) };
}
const median = (x: number[]) => [...x].sort((a, b) => a - b)[Math.floor(x.length / 2)]!;
try {
  const sha = (await r.script('LOAD', ACQUIRE.source)) as string;
  await r.call('FUNCTION', 'LOAD', 'REPLACE', lib);
  const kinds: [string, string, () => Promise<unknown>][] = [
    ['evalsha acquire.lua', 'evalsha', () => r.evalsha(sha, keys.length, ...keys, ...argv)],
    ['fcall acquire', 'fcall', () => r.call('FCALL', 'vt_acquire', keys.length, ...keys, ...argv)],
  ];
  // Same reply from both.
  await r.del(keys[3]!, keys[4]!, keys[5]!);
  const a1 = await kinds[0]![2]();
  await r.del(keys[3]!, keys[4]!, keys[5]!);
  const a2 = await kinds[1]![2]();
  console.log(JSON.stringify(a1), JSON.stringify(a2));
  const usec = kinds.map(() => [] as number[]);
  const cpu = kinds.map(() => [] as number[]);
  for (let k = 0; k < rounds; k++) {
    for (let s = 0; s < kinds.length; s++) {
      await r.del(keys[3]!, keys[4]!, keys[5]!);
      const a = await counters(kinds[s]![1]);
      const t0 = performance.now();
      for (let i = 0; i < rate * seconds; i++) {
        const wait = t0 + (i * 1000) / rate - performance.now();
        if (wait > 0) await new Promise((res) => setTimeout(res, wait));
        await kinds[s]![2]();
      }
      const b = await counters(kinds[s]![1]);
      const calls = b.calls - a.calls;
      usec[s]!.push((b.usec - a.usec) / calls);
      cpu[s]!.push(((b.cpu - a.cpu) * 1e6) / calls);
    }
  }
  for (let s = 0; s < kinds.length; s++) {
    console.log(
      `${kinds[s]![0]}: ${median(usec[s]!).toFixed(1)} µs of execution, ${median(cpu[s]!).toFixed(1)} µs of server CPU per call (medians of ${rounds} at ${rate}/s)`,
    );
  }
} finally {
  r.disconnect();
  await server.stop();
}
