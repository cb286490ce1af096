/**
 * Rule changes, differentially: the Lua script (redisStore on its test-only clock) and the
 * memory store, driven through the same change on the same virtual clock, give identical
 * answers (grants, hints, block reasons, the store clock and the recorded rule set), and the
 * Redis grants keep the stricter rule set's bound per window (test/helpers/rule-change.ts).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Connected, connectClient } from '../helpers/redis-clients.js';
import { runChange, stricterViolations } from '../helpers/rule-change.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { setsArb, stepArb } from './rule-change-arbitraries.js';

const runs = Number(process.env.VALVE_PROPERTY_RUNS ?? 400);

describe('a rule change: the Lua script and the memory store agree', () => {
  let c: Connected;
  beforeAll(async () => {
    c = await connectClient('ioredis', sharedRedis('redis'));
  });
  afterAll(async () => {
    await c?.close();
  });

  it('on random rule sets and schedules across the change, and Redis keeps the stricter bound', async () => {
    await fc.assert(
      fc.asyncProperty(
        setsArb,
        fc.array(stepArb, { minLength: 1, maxLength: 20 }),
        fc.array(stepArb, { minLength: 1, maxLength: 30 }),
        async ({ oldRules, newRules }, before, after) => {
          const start = 1_700_000_000_000 + Math.floor(Math.random() * 1e9);
          const memClock = new FakeClock(start);
          const luaClock = new FakeClock(start);
          const mem = memoryStore({ clock: memClock });
          const lua = redisStore({ client: c.client, prefix: uniquePrefix('rc'), unsafeTestClock: luaClock });
          const a = await runChange(mem, memClock, 'id', oldRules, newRules, before, after);
          const b = await runChange(lua, luaClock, 'id', oldRules, newRules, before, after);
          // The rule-set record lives one interval on Redis and, in one process, no longer than
          // the id's rule state (so idle ids leave nothing behind): the two stores forget it at
          // different moments, so `recorded` is left out here; the store contract checks what
          // it reports on both stores, test/stores/redis-rules.test.ts its key and TTL.
          const without = (answers: typeof a.answers) => answers.map(({ recorded: _, ...rest }) => rest);
          expect(without(b.answers)).toEqual(without(a.answers));
          expect(stricterViolations(b, oldRules, newRules)).toEqual([]);
        },
      ),
      { numRuns: Math.ceil(runs / 2) },
    );
  }, 120_000);
});
