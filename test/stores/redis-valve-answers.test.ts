/**
 * A valve over redisStore whose rule key holds what valve never writes (`inf`, which Redis's
 * Lua used to turn into -2^63): the script's VALVE_CORRUPT_STATE error is an ordinary store
 * failure ('store-error', backoff, onStoreError), never a tight loop of EVALSHA. Counted on a
 * private server through INFO commandstats (no other client talks to it).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { createValve } from '../../src/index.js';
import { normalizeRule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { uniquePrefix } from '../helpers/shared-servers.js';

type IORedis = import('ioredis').Redis;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('a valve over a Redis rule key holding inf', () => {
  let server: RedisServer;
  let c: Connected;
  beforeAll(async () => {
    server = await startRedis();
    c = await connectClient('ioredis', server);
  });
  afterAll(async () => {
    await c?.close();
    await server?.stop();
  });

  /** EVALSHA and EVAL calls the server has run so far. */
  async function scriptCalls(): Promise<number> {
    const info = String(await server.command(['INFO', 'commandstats']));
    let calls = 0;
    for (const m of info.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)) calls += Number(m[1]);
    return calls;
  }

  for (const mode of ['wait', 'throw'] as const) {
    it(`onStoreError '${mode}': a few calls with backoff and a 'store-error' each, the error naming the key`, async () => {
      const rule = { limit: 2000, interval: '1s' };
      const prefix = uniquePrefix('inf');
      const key = `${prefix}:{inf}:r:${normalizeRule(rule, 'rules').digest}`;
      await (c.client as IORedis).set(key, 'inf', 'PX', 60_000);
      const valve = createValve({
        id: 'inf',
        rules: rule,
        store: redisStore({ client: c.client, prefix }),
        onStoreError: mode,
        maxWait: 1000,
      });
      const errors: unknown[] = [];
      valve.on('store-error', (err) => errors.push(err));
      const before = await scriptCalls();
      const job = valve.run(() => 'ran').catch((e: unknown) => e);
      await sleep(1200);
      const calls = (await scriptCalls()) - before;
      const error = await job;
      await valve.close();
      expect(isValveError(error, 'STORE_UNAVAILABLE')).toBe(true);
      expect(String((error as Error).cause)).toContain(`VALVE_CORRUPT_STATE ${key} holds`);
      expect(errors.length).toBeGreaterThanOrEqual(1);
      expect(String(errors[0])).toContain('VALVE_CORRUPT_STATE');
      // The backoff (100, 200, 400 ms, half jittered) allows about 5 calls in the job's second;
      // a loop made tens of thousands. Each call is one EVALSHA (a NOSCRIPT retry adds an EVAL).
      expect(calls).toBeGreaterThanOrEqual(1);
      expect(calls).toBeLessThanOrEqual(mode === 'throw' ? 2 : 12);
      expect(await (c.client as IORedis).get(key)).toBe('inf');
    });
  }
});
