/**
 * Instructions per admission of `acquire-many.lua`'s short form, counted by callgrind in a
 * redis-server (repeatable whatever the machine's load, unlike CPU seconds). Sends the script
 * itself, CALLS calls of K requests (1 GCRA rule, each request its own id, IDS ids in turn,
 * the rule-set record sent unless NOREC=1) to the server at REDIS_PORT; SRC picks the tree
 * whose script is sent (default: this one), so two trees compare with one copy of this file
 * (the short form's arguments as that tree's script takes them).
 * The rule's state expires within a millisecond (each GET finds no key) unless STATE=1: then a
 * rule of 1 per hour with a burst of 1,000 keeps every id's tat for hours (each GET reads a
 * 16-digit tat, as a key in use does, however slowly the server runs).
 *
 *   valgrind --tool=callgrind --callgrind-out-file=OUT redis-server --port P --save '' &
 *   REDIS_PORT=P [SRC=<tree>] [NOREC=1] [STATE=1] npx tsx bench/experiments/script-instructions-many.ts 60
 *   redis-cli -p P shutdown nosave; grep '^summary:' OUT
 *
 * Run it with 10 calls and with 60 on fresh servers: (total₆₀ − total₁₀) / (50 × K) is the
 * count per admission, the server's start and the first calls subtracted.
 */
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';

const src = process.env.SRC ?? fileURLToPath(new URL('../..', import.meta.url));
const { normalizeRule } = await import(`${src}/src/rules/rule.ts`);
const { recordOf } = await import(`${src}/src/rulesets.ts`);
const { ACQUIRE_MANY } = await import(`${src}/src/stores/redis/scripts.generated.ts`);
const calls = Number(process.argv[2] ?? 60);
const K = Number(process.env.K ?? 100);
const IDS = Number(process.env.IDS ?? 1000);
const client = new Redis({ port: Number(process.env.REDIS_PORT), host: '127.0.0.1' });
const rule = process.env.STATE
  ? normalizeRule({ limit: 1, interval: 3_600_000, burst: 1000 }, 'r')
  : normalizeRule({ limit: 1_000_000_000, interval: 1000, burst: 1_000_000_000 }, 'r');
const record = process.env.NOREC ? '-' : `=${recordOf([rule])}`;
const shape = ['1', '0', '0', 'g', String(rule.emissionUs), String(rule.burst), record, '900000'];
// The short form's requests: one string per run of requests alike ("-1:1:1:K"), or (a tree
// before that form) three strings each.
const runs = (ACQUIRE_MANY.source as string).includes(
  '"-<shape>:<n>:<cost of every job>:<requests in the run>"',
);
await client.script('LOAD', ACQUIRE_MANY.source);
let id = 0;
for (let c = 0; c < calls; c++) {
  const keys: string[] = [];
  const args: string[] = ['', String(K), '1', String(shape.length), ...shape];
  for (let i = 0; i < K; i++) {
    const t = `t${id++ % IDS}`;
    keys.push(`${t}:p`, `${t}:r`, `${t}:rec`);
    if (!runs) args.push('-1', '1', '1');
  }
  if (runs) args.push(`-1:1:1:${K}`);
  await client.evalsha(ACQUIRE_MANY.sha, keys.length, ...keys, ...args);
}
client.disconnect();
