/**
 * Chains of rule changes, differentially: the Lua script (redisStore on its test-only clock)
 * and the memory store, driven through the same chain by the valve's RuleSet on the same
 * virtual clock, give identical answers, and the Redis grants keep every rule's bound per
 * window (test/helpers/rule-chain.ts), the previous rules' `previousSince` included.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { chainViolations, runChain } from '../helpers/rule-chain.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { chainRunArb } from './rule-chain-arbitraries.js';

const runs = Number(process.env.VALVE_PROPERTY_RUNS ?? 400);

describe('chains of rule changes: the Lua script and the memory store agree', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis('redis'));
  });
  afterAll(async () => {
    await c?.close();
  });

  it('on random chains and schedules, and Redis keeps every rule’s bound', async () => {
    await fc.assert(
      fc.asyncProperty(chainRunArb, async ({ sets, segments, lost }) => {
        const start = 1_700_000_000_000 + Math.floor(Math.random() * 1e9);
        const memClock = new FakeClock(start);
        const luaClock = new FakeClock(start);
        const mem = memoryStore({ clock: memClock });
        const lua = redisStore({
          client: c.client,
          prefix: uniquePrefix('chain'),
          unsafeTestClock: luaClock,
        });
        const a = await runChain(mem, memClock, 'id', sets, segments, lost);
        const b = await runChain(lua, luaClock, 'id', sets, segments, lost);
        // `recorded` is left out as in rule-change-redis.test.ts (the stores forget the record
        // at different moments).
        const without = (answers: typeof a.answers) => answers.map(({ recorded: _, ...rest }) => rest);
        expect(without(b.answers)).toEqual(without(a.answers));
        expect(chainViolations(b)).toEqual([]);
      }),
      { numRuns: runs },
    );
  }, 120_000);
});
