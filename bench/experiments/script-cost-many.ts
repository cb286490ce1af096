/**
 * Redis CPU per acquire request through redisStore, many ids at once (diagnosis of the
 * 10,000-keys case): `tsx bench/experiments/script-cost-many.ts [keys] [rounds] [variant]`.
 * Each round sends one acquire per key (all at once) and waits for them; prints Redis CPU µs and
 * commands per request (INFO deltas on a private server). Variants: 'record' (the default, as a
 * valve sends), 'norecord' (no rule-set record), 'binds' (a rule whose state outlives the call).
 */
import { Redis } from 'ioredis';
import { normalizeRule } from '../../src/rules/rule.js';
import { recordOf } from '../../src/rulesets.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { startRedis } from '../lib/redis-server.js';

const keys = Number(process.argv[2] ?? 10_000);
const rounds = Number(process.argv[3] ?? 10);
const variant = process.argv[4] ?? 'record';

async function stats(admin: Redis): Promise<Map<string, number>> {
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
const store = redisStore({ client, prefix: 'bench' });
const rule =
  variant === 'binds'
    ? normalizeRule({ limit: 1_000_000_000, interval: 3_600_000, burst: 1_000_000_000 }, 'r')
    : normalizeRule({ limit: 1_000_000_000, interval: 1000, burst: 1_000_000_000 }, 'r');
const rules = [rule];
const record = variant === 'norecord' ? undefined : recordOf(rules);
const ids = Array.from({ length: keys }, (_, i) => `tenant-${i}`);
const round = () => Promise.all(ids.map((id) => store.acquire({ id, rules, costs: [1], count: 1, record })));
await round();
const before = await stats(admin);
for (let i = 0; i < rounds; i++) await round();
const after = await stats(admin);
const n = keys * rounds;
const parts: string[] = [];
for (const [name, calls] of after) {
  const d = calls - (before.get(name) ?? 0);
  if (d > 0 && name !== 'info' && name !== 'cpu' && !name.startsWith('info'))
    parts.push(`${name}=${(d / n).toFixed(3)}`);
}
console.log(
  `${variant}: Redis CPU ${((((after.get('cpu') ?? 0) - (before.get('cpu') ?? 0)) * 1e6) / n).toFixed(2)} µs per request; ${parts.join(' ')}`,
);
client.disconnect();
admin.disconnect();
await server.stop();
process.exit(0);
