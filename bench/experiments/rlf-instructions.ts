/**
 * Instructions per `consume()` of rate-limiter-flexible's RateLimiterRedis, counted by
 * callgrind in a redis-server: the load-independent counterpart of
 * script-instructions-many.ts for the peer of the group scenario. Sends CALLS rounds of K
 * consumes at once (K env, default 100; each consume its own key, 1,000 keys in turn, a limit
 * that never binds) to the server at REDIS_PORT.
 *
 *   valgrind --tool=callgrind --callgrind-out-file=OUT redis-server --port P --save '' &
 *   REDIS_PORT=P npx tsx bench/experiments/rlf-instructions.ts 60
 *   redis-cli -p P shutdown nosave; grep '^summary:' OUT
 *
 * Run it with 10 rounds and with 60 on fresh servers: (total₆₀ − total₁₀) / (50 × K) is the
 * count per consume.
 */
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';

const calls = Number(process.argv[2] ?? 60);
const K = Number(process.env.K ?? 100);
const client = new Redis({ port: Number(process.env.REDIS_PORT), host: '127.0.0.1' });
const limiter = new RateLimiterRedis({
  points: 1_000_000_000,
  duration: 1,
  storeClient: client,
  keyPrefix: 'b',
});
let id = 0;
for (let c = 0; c < calls; c++) {
  const consumes: Promise<unknown>[] = [];
  for (let i = 0; i < K; i++) consumes.push(limiter.consume(`t${id++ % 1000}`, 1));
  await Promise.all(consumes);
}
client.disconnect();
