/**
 * Experiment: Redis-side execution time of valve's acquire script per call and per job, by batch
 * size, next to a minimal one-job GCRA script, on a private redis-server. 20k calls each,
 * pipelined; reports commandstats usec per call (execution only, no network).
 *
 *   node --import tsx bench/experiments/script-cost.ts
 *   BASELINE_ACQUIRE=old-acquire.lua node --import tsx bench/experiments/script-cost.ts   (before/after)
 */
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import * as scripts from '../../src/stores/redis/scripts.generated.js';
import { startRedis } from '../lib/redis-server.js';

const minimal = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000) + 1)
return 1
`;

async function cost(source: string, keys: string[], argv: (string | number)[]): Promise<number> {
  const calls = 10_000;
  await client.config('RESETSTAT');
  const sha = (await client.script('LOAD', source)) as string;
  for (let done = 0; done < calls; done += 500) {
    const pipe = client.pipeline();
    for (let i = 0; i < 500; i++) pipe.evalsha(sha, keys.length, ...keys, ...argv);
    await pipe.exec();
  }
  const info = await client.info('commandstats');
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(info);
  return Number(m?.[2] ?? 0) / Number(m?.[1] ?? 1);
}

/**
 * What acquire.lua's grant loop could cost with an equal-cost fast path: same keys, same commands
 * (TIME, GET pause, GET rule, SET rule with PX), the granted prefix computed arithmetically
 * per rule instead of job by job. ARGV: n, cost, emissionUs, burst.
 */
const uniform = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local paused = redis.call('GET', KEYS[1])
if paused and math.floor(tonumber(paused) * 1000 + 0.5) > now then return { 0, 0, 1 } end
local n, c, T, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[4]) or now)
if tat < now then tat = now end
local inc = math.ceil(c * T)
local k = math.floor((now + burst * T - tat) / inc)
if k > n then k = n end
if k < 0 then k = 0 end
local retry = 0
if k < n then retry = tat + (k + 1) * inc - now - burst * T end
if k > 0 then
  tat = tat + k * inc
  redis.call('SET', KEYS[4], string.format('%d', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
end
return { k, retry, k < n and 2 or 0, 0, now, 0 }
`;

const server = await startRedis();
const client = new Redis({ port: server.port, host: '127.0.0.1' });
try {
  const keys = ['x:{a}:pause', 'x:{a}:leases', 'x:{a}:fence', 'x:{a}:r:1'];
  // One GCRA rule that never binds: emission 1 µs, burst 1e9.
  const rule = ['g', 1, 1_000_000_000];
  // Equal costs travel as one cost (the script's arithmetic fast path); mixed costs as "" and
  // then one cost per job (the per-job loop). Same encoding as store.ts.
  const argv = (n: number) => ['', n, 1, 0, 0, 'nonce', ...rule, 1];
  const mixed = (n: number) => [
    '',
    n,
    1,
    0,
    0,
    'nonce',
    ...rule,
    '',
    ...Array.from({ length: n }, (_, i) => 1 + (i % 2)),
  ];
  const noReplicate = scripts.ACQUIRE.source.replace(/if redis\.replicate_commands then[\s\S]*?\nend\n/, '');
  // Optional: the same measurements for an older acquire.lua (expanded source, one cost per job),
  // e.g. `git show <rev>:src/stores/redis/scripts.generated.ts` → its ACQUIRE source saved to a file.
  const baselineFile = process.env.BASELINE_ACQUIRE;
  const baseline = baselineFile ? readFileSync(baselineFile, 'utf8') : undefined;
  const perJob = (n: number) => ['', n, 1, 0, 0, 'nonce', ...rule, ...Array.from({ length: n }, () => 1)];
  const variants: { name: string; jobs: number; run: () => Promise<number> }[] = [
    ...(baseline
      ? [1, 8, 32, 128].map((n) => ({
          name: `baseline acquire, batch ${n}`,
          jobs: n,
          run: () => cost(baseline, keys, perJob(n)),
        }))
      : []),
    ...[1, 8, 32, 128].map((n) => ({
      name: `valve acquire, batch ${n}`,
      jobs: n,
      run: () => cost(scripts.ACQUIRE.source, keys, argv(n)),
    })),
    ...[8, 32].map((n) => ({
      name: `valve acquire, batch ${n}, mixed costs`,
      jobs: n,
      run: () => cost(scripts.ACQUIRE.source, keys, mixed(n)),
    })),
    {
      name: 'valve acquire, batch 32, no replicate_commands()',
      jobs: 32,
      run: () => cost(noReplicate, keys, argv(32)),
    },
    ...[1, 32].map((n) => ({
      name: `equal-cost fast path, batch ${n}`,
      jobs: n,
      run: () => cost(uniform, keys, [n, 1, 1, 1_000_000_000]),
    })),
    { name: 'minimal GCRA, 1 job', jobs: 1, run: () => cost(minimal, ['y:{a}:r'], [1]) },
  ];
  const samples = variants.map(() => [] as number[]);
  for (let round = 0; round < 5; round++) {
    for (const [i, v] of variants.entries()) samples[i]!.push(await v.run());
  }
  for (const [i, v] of variants.entries()) {
    const sorted = samples[i]!.sort((a, b) => a - b);
    const med = sorted[2]!;
    process.stdout.write(
      `${v.name.padEnd(50)} ${med.toFixed(2).padStart(7)} µs per call, ${(med / v.jobs).toFixed(2).padStart(6)} µs per job  (min ${sorted[0]!.toFixed(1)})\n`,
    );
  }
} finally {
  client.disconnect();
  await server.stop();
}
