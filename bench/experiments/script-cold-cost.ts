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
 *     `git show <sha>:src/stores/redis/scripts.generated.ts`, or
 *     bench/experiments/turn-commands-only.lua: the turn's Redis commands without its logic)
 *   FCALL=1 node --import tsx bench/experiments/script-cold-cost.ts
 *     (also acquire.lua's code as a Redis Functions library, called with FCALL: its local
 *     functions are then made once at FUNCTION LOAD instead of on every call; Redis 7 runs a
 *     library's load code without the standard globals, so they are bound on each call)
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
async function counters(command: string): Promise<{ cpu: number; calls: number; usec: number }> {
  const t = await r.info('all');
  const cpu = [...t.matchAll(/used_cpu_(?:sys|user):([\d.]+)/g)].reduce((s, m) => s + Number(m[1]), 0);
  const m = new RegExp(`cmdstat_${command}:calls=(\\d+),usec=(\\d+)`).exec(t);
  return { cpu, calls: Number(m?.[1] ?? 0), usec: Number(m?.[2] ?? 0) };
}

/** acquire.lua as a Functions library with one function, `cold_acquire`. */
function asLibrary(source: string): string {
  const body = source
    .replace(/^#!lua\n/, '')
    .replace(/if redis\.replicate_commands then\n {2}redis\.replicate_commands\(\)\nend\n/, '')
    .replace('local rcall, rpcall = redis.call, redis.pcall', 'local rcall, rpcall')
    .replace('local tonumber, type = tonumber, type', 'local tonumber, type')
    .replace(
      'local format, find, match, sub = string.format, string.find, string.match, string.sub',
      'local format, find, match, sub',
    )
    .replace('local floor, ceil = math.floor, math.ceil', 'local floor, ceil')
    .replace(/return acquire_one\(KEYS, ARGV, nil\)\s*$/, '');
  const bind =
    'rcall, rpcall = redis.call, redis.pcall tonumber, type = _G.tonumber, _G.type ' +
    'format, find, match, sub = string.format, string.find, string.match, string.sub ' +
    'floor, ceil = math.floor, math.ceil';
  return `#!lua name=cold\n${body}\nredis.register_function('cold_acquire', function(keys, args) ${bind} return acquire_one(keys, args, nil) end)\n`;
}
const median = (x: number[]) => [...x].sort((a, b) => a - b)[Math.floor(x.length / 2)]!;
try {
  const shas = await Promise.all(scripts.map(([, source]) => r.script('LOAD', source) as Promise<string>));
  // Each kind: its name, its command's commandstats name, one call.
  const kinds: [string, string, () => Promise<unknown>][] = scripts.map(([name], s) => [
    name,
    'evalsha',
    () => r.evalsha(shas[s]!, keys.length, ...keys, ...argv),
  ]);
  if (process.env.FCALL) {
    await r.call('FUNCTION', 'LOAD', 'REPLACE', asLibrary(ACQUIRE.source));
    kinds.push([
      'acquire.lua as a function (FCALL)',
      'fcall',
      () => r.call('FCALL', 'cold_acquire', keys.length, ...keys, ...argv),
    ]);
    // The same reply as EVALSHA's but for the time.
    const replies: unknown[] = [];
    for (const s of [1, kinds.length - 1]) {
      await r.del(keys[3]!, keys[4]!, keys[5]!);
      const reply = (await kinds[s]![2]()) as unknown[];
      replies.push(JSON.stringify(reply.map((v, i) => (i === 4 ? 'now' : v))));
    }
    if (replies[0] !== replies[1]) throw new Error(`FCALL answered ${replies[1]}, EVALSHA ${replies[0]}`);
  }
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
