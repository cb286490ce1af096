/**
 * Differential property test: the Lua scripts (redisStore in its test-only clock mode) and the
 * memory store, driven by the same random command sequences on the same virtual clock, give
 * identical answers: grants, retry hints, block reasons, pause ends, store clock, lease fences
 * and expiries, renewals. Any divergence between the two implementations of the arithmetic in
 * docs/architecture.md fails with a shrunk counterexample.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_SLIDING_LIMIT, normalizeRule, type Rule, type StoreRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Connected, connectClient, connectCluster } from '../helpers/redis-clients.js';
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const ruleArb: fc.Arbitrary<Rule> = fc.oneof(
  fc.record({
    limit: fc.integer({ min: 1, max: 20 }),
    interval: fc.constantFrom(1, 7, 10, 100, 250, 333, 1000, 1500.5, 60_000),
    burst: fc.integer({ min: 1, max: 5 }),
  }),
  fc.record({
    limit: fc.integer({ min: 1, max: 20 }),
    interval: fc.constantFrom(1, 7, 10, 100, 250, 333, 1000, 1500.5, 60_000),
    algorithm: fc.constant('fixed-window' as const),
  }),
  fc.record({
    limit: fc.integer({ min: 1, max: 20 }),
    interval: fc.constantFrom(1, 7, 10, 100, 250, 333, 1000, 1500.5, 60_000),
    algorithm: fc.constant('sliding-window' as const),
  }),
);

type Command =
  | {
      t: 'acquire';
      costs: number[];
      mask: number;
      lease: { limit: number; ttl: number } | undefined;
      /** Which of four callers asks, sending the ticket of its last answer (the line, stores/turns.ts); none: no part in it. */
      caller?: number | undefined;
    }
  | { t: 'advance'; us: number }
  /** Advances by the last retry hint plus `delta` µs: the boundaries where rounding errors hide. */
  | { t: 'wait'; delta: number }
  | { t: 'pause'; ms: number }
  | { t: 'resume' }
  | { t: 'renew'; which: number[]; ttl: number }
  | { t: 'release'; which: number[] };

const costArb = fc.constantFrom(1, 1, 1, 1, 2, 3, 5);
const commandArb: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      t: fc.constant('acquire' as const),
      costs: fc.array(costArb, { minLength: 1, maxLength: 6 }),
      mask: fc.integer({ min: 0, max: 7 }),
      lease: fc.option(
        fc.record({ limit: fc.integer({ min: 1, max: 4 }), ttl: fc.constantFrom(1000, 1500, 3000.5) }),
        { nil: undefined, freq: 3 },
      ),
      caller: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined, freq: 4 }),
    }),
  },
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant('advance' as const),
      us: fc.oneof(fc.integer({ min: 0, max: 2_000 }), fc.integer({ min: 0, max: 3_000_000 })),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({ t: fc.constant('wait' as const), delta: fc.constantFrom(-1, 0, 0, 1) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('pause' as const),
      ms: fc.oneof(fc.constantFrom(0, 0.001, 1), fc.double({ min: 0, max: 5000, noNaN: true })),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('resume' as const) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('renew' as const),
      which: fc.array(fc.nat(20), { maxLength: 3 }),
      ttl: fc.constantFrom(1000, 2000.25),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('release' as const),
      which: fc.array(fc.nat(20), { maxLength: 3 }),
    }),
  },
);

/** Replays `commands` on both stores and compares every answer. */
async function compare(
  redis: (clock: FakeClock) => Store,
  rules: Rule[],
  commands: Command[],
  startMs = 1_700_000_000_000 + 0.123,
  /**
   * Each acquisition is sent to Redis at once with another id's (so that, on a standalone
   * server, the two go out as one acquire-many.lua call, the short form when it applies).
   */
  together = false,
): Promise<void> {
  const clock = new FakeClock(startMs);
  const mem = memoryStore({ clock });
  const lua = redis(clock);
  const id = `diff:${Math.random().toString(36).slice(2)}`;
  const storeRules: StoreRule[] = rules.map((r, i) => normalizeRule(r, `rules[${i}]`));
  // Lease tokens issued so far, [memory token, redis token] in the same order.
  const tokens: [string, string][] = [];
  let lastHintUs = 0;
  // Each caller's ticket in the id's line, from its last answer (the same in both stores).
  const tickets = [0, 0, 0, 0];
  for (const [step, c] of commands.entries()) {
    const where = `step ${step}: ${JSON.stringify(c)}`;
    if (c.t === 'advance') {
      clock.advance(c.us / 1000);
    } else if (c.t === 'wait') {
      clock.advance(Math.max(0, lastHintUs + c.delta) / 1000);
    } else if (c.t === 'acquire') {
      const subset = storeRules.filter((_, i) => (c.mask >> i) & 1);
      const maxCost = Math.min(...subset.map((r) => r.maxCost));
      // A cost above 5 stands for the rule's largest cost (the extremes).
      const costs = c.costs.map((x) => (x > 5 ? Math.min(maxCost, 1e15) : Math.min(x, maxCost)));
      const turn = c.caller === undefined ? undefined : tickets[c.caller];
      const request = { id, rules: subset, costs, count: costs.length, lease: c.lease, turn };
      const a = await mem.acquire(request);
      const b = together
        ? (
            await Promise.all([
              lua.acquire(request),
              lua.acquire({ ...request, id: `${id}:other`, turn: undefined }),
            ])
          )[0]
        : await lua.acquire(request);
      expect(
        {
          granted: b.granted,
          retryAfter: b.retryAfter,
          blocked: b.blocked,
          pausedUntil: b.pausedUntil,
          now: b.now,
          leases: b.leases?.map((l) => [l.fence, l.expiresAt]),
          turn: b.turn,
        },
        where,
      ).toEqual({
        granted: a.granted,
        retryAfter: a.retryAfter,
        blocked: a.blocked,
        pausedUntil: a.pausedUntil,
        now: a.now,
        leases: a.leases?.map((l) => [l.fence, l.expiresAt]),
        turn: a.turn,
      });
      if (c.caller !== undefined) tickets[c.caller] = a.turn ?? 0;
      if (a.retryAfter > 0) lastHintUs = Math.round(a.retryAfter * 1000);
      for (let i = 0; i < (a.leases?.length ?? 0); i++)
        tokens.push([a.leases![i]!.token, b.leases![i]!.token]);
    } else if (c.t === 'pause') {
      expect(await lua.pause(id, c.ms), where).toBe(await mem.pause(id, c.ms));
    } else if (c.t === 'resume') {
      await mem.resume(id);
      await lua.resume(id);
    } else {
      const picked = c.which.filter((i) => i < tokens.length).map((i) => tokens[i]!);
      if (c.t === 'renew') {
        const a = await mem.renew(
          id,
          picked.map((p) => p[0]),
          c.ttl,
        );
        const b = await lua.renew(
          id,
          picked.map((p) => p[1]),
          c.ttl,
        );
        expect(b, where).toEqual(a);
      } else {
        await mem.release(
          id,
          picked.map((p) => p[0]),
        );
        await lua.release(
          id,
          picked.map((p) => p[1]),
        );
      }
    }
  }
}

const runs = Number(process.env.VALVE_PROPERTY_RUNS ?? 400);

for (const target of ['redis standalone', 'redis cluster', 'valkey standalone'] as const) {
  describe(`Lua scripts (${target}) and the memory store agree`, () => {
    let c: Connected;
    beforeAll(async () => {
      c =
        target === 'redis cluster'
          ? await connectCluster('ioredis', sharedCluster('redis').nodes)
          : await connectClient('ioredis', sharedRedis(target === 'redis standalone' ? 'redis' : 'valkey'));
    });
    afterAll(async () => {
      await c?.close();
    });
    const make = (clock: FakeClock) =>
      redisStore({ client: c.client, prefix: uniquePrefix('diff'), unsafeTestClock: clock });

    it('on random rules and command sequences', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(ruleArb, { minLength: 1, maxLength: 3 }),
          fc.array(commandArb, { minLength: 1, maxLength: 40 }),
          async (rules, commands) => {
            await compare(make, rules, commands);
          },
        ),
        { numRuns: target === 'redis standalone' ? runs : Math.ceil(runs / 3) },
      );
    }, 120_000);

    // acquire-many.lua serves standalone servers only: on a cluster each id's keys have their own
    // slot, and every acquisition is its own acquire.lua call (the test above).
    if (target !== 'redis cluster') {
      it("through acquire-many.lua (each acquisition sent at once with another id's)", async () => {
        await fc.assert(
          fc.asyncProperty(
            fc.array(ruleArb, { minLength: 1, maxLength: 3 }),
            fc.array(commandArb, { minLength: 1, maxLength: 40 }),
            fc.constantFrom(1_700_000_000_000.123, 4_102_444_800_000.5),
            async (rules, commands, start) => {
              await compare(make, rules, commands, start, true);
            },
          ),
          { numRuns: target === 'redis standalone' ? runs : Math.ceil(runs / 3) },
        );
      }, 120_000);
    }

    it('at the validation bounds (yearly rules, the largest burst and limit, far-future clocks)', async () => {
      const YEAR_US = 31_536_000_000_000;
      const extremeRule: fc.Arbitrary<Rule> = fc.constantFrom<Rule>(
        { limit: 1, interval: '365d' },
        { limit: 10, interval: '365d', burst: 10 },
        { limit: 1e15, interval: '1ms', burst: YEAR_US },
        { limit: 1e15, interval: '365d', burst: YEAR_US / 1e6 },
        { limit: 1e15, interval: '365d', algorithm: 'fixed-window' },
        { limit: 1, interval: '365d', algorithm: 'fixed-window' },
        { limit: 7, interval: '1ms' },
      );
      const extremeCommand: fc.Arbitrary<Command> = fc.oneof(
        {
          weight: 4,
          arbitrary: fc.record({
            t: fc.constant('acquire' as const),
            // 1e18 stands for "the rule's largest cost".
            costs: fc.array(fc.constantFrom(1, 2, 1e18), { minLength: 1, maxLength: 4 }),
            mask: fc.integer({ min: 1, max: 7 }),
            lease: fc.option(
              fc.record({
                limit: fc.integer({ min: 1, max: 3 }),
                ttl: fc.constantFrom(1000, 365 * 86_400_000),
              }),
              { nil: undefined, freq: 3 },
            ),
            // The line of turns on yearly rules: a step of up to a year per waiting caller.
            caller: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined, freq: 3 }),
          }),
        },
        {
          weight: 3,
          arbitrary: fc.record({
            t: fc.constant('advance' as const),
            us: fc.constantFrom(1, 1000, 86_400_000_000, YEAR_US - 1, YEAR_US),
          }),
        },
        {
          weight: 2,
          arbitrary: fc.record({ t: fc.constant('wait' as const), delta: fc.constantFrom(-1, 0, 1) }),
        },
        {
          weight: 1,
          arbitrary: fc.record({
            t: fc.constant('pause' as const),
            ms: fc.constantFrom(1, 365 * 86_400_000),
          }),
        },
        { weight: 1, arbitrary: fc.record({ t: fc.constant('resume' as const) }) },
      );
      await fc.assert(
        fc.asyncProperty(
          fc.array(extremeRule, { minLength: 1, maxLength: 3 }),
          fc.array(extremeCommand, { minLength: 1, maxLength: 30 }),
          // Today, and 2100-01-01. Lease expiries are sorted-set scores (float64 epoch ms): exact
          // to the µs until 2^42 ms (the year 2109); every other value until 2^53 µs (2255).
          fc.constantFrom(1_700_000_000_000.123, 4_102_444_800_000.5),
          async (rules, commands, start) => {
            await compare(make, rules, commands, start);
          },
        ),
        { numRuns: target === 'redis standalone' ? Math.ceil(runs / 2) : Math.ceil(runs / 6) },
      );
    }, 120_000);

    it('on saturating sequences (many small steps against one tight rule set)', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(ruleArb, { minLength: 1, maxLength: 3 }),
          fc.array(
            fc.oneof(
              commandArb.filter((x) => x.t === 'acquire'),
              fc.record({ t: fc.constant('wait' as const), delta: fc.constantFrom(-1, 0, 0, 1) }),
              fc.record({ t: fc.constant('advance' as const), us: fc.integer({ min: 0, max: 50_000 }) }),
            ),
            { minLength: 10, maxLength: 60 },
          ),
          async (rules, commands) => {
            await compare(make, rules, commands);
          },
        ),
        { numRuns: target === 'redis standalone' ? runs : Math.ceil(runs / 3) },
      );
    }, 120_000);

    it('on the line of turns (tight GCRA rules, four callers, steps around the hints and the grace; on a standalone server half the runs through acquire-many.lua)', async () => {
      const gcraArb: fc.Arbitrary<Rule> = fc.record({
        limit: fc.integer({ min: 1, max: 20 }),
        interval: fc.constantFrom(1, 7, 10, 100, 1000),
        burst: fc.constantFrom(1, 1, 2, 5, 20),
      });
      const lineArb = fc.array(
        fc.oneof(
          {
            weight: 8,
            arbitrary: fc.record({
              t: fc.constant('acquire' as const),
              costs: fc.array(fc.constantFrom(1, 1, 1, 2, 3), { minLength: 1, maxLength: 4 }),
              mask: fc.integer({ min: 1, max: 7 }),
              lease: fc.constant(undefined),
              caller: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined, freq: 8 }),
            }),
          },
          {
            weight: 4,
            arbitrary: fc.record({ t: fc.constant('wait' as const), delta: fc.constantFrom(-1, 0, 1, 2000) }),
          },
          {
            weight: 3,
            arbitrary: fc.record({
              t: fc.constant('advance' as const),
              us: fc.oneof(fc.integer({ min: 0, max: 3_000 }), fc.constantFrom(1999, 2000, 2001, 20_000)),
            }),
          },
          {
            weight: 1,
            arbitrary: fc.record({ t: fc.constant('pause' as const), ms: fc.constantFrom(0, 1) }),
          },
        ),
        { minLength: 10, maxLength: 60 },
      );
      await fc.assert(
        fc.asyncProperty(
          fc.array(gcraArb, { minLength: 1, maxLength: 3 }),
          lineArb,
          fc.boolean(),
          async (rules, commands, together) => {
            // Together: the short form with ticket 0 (acquire-many.lua), handed to acquire_one()
            // when refused; acquire-many.lua serves standalone servers only.
            await compare(make, rules, commands, undefined, together && target !== 'redis cluster');
          },
        ),
        { numRuns: target === 'redis standalone' ? runs : Math.ceil(runs / 3) },
      );
    }, 120_000);

    it('on sliding windows with long logs (chunked reads, far scans) and the largest limit', async () => {
      const slidingArb = fc.record({
        limit: fc.oneof(fc.integer({ min: 30, max: 300 }), fc.constant(MAX_SLIDING_LIMIT)),
        interval: fc.constantFrom(50, 60, 1000, 60_000, 365 * 86_400_000),
        algorithm: fc.constant('sliding-window' as const),
      });
      const longArb = fc.array(
        fc.oneof(
          {
            weight: 8,
            arbitrary: fc.record({
              t: fc.constant('acquire' as const),
              costs: fc.oneof(
                fc.array(fc.constant(1), { minLength: 1, maxLength: 3 }),
                fc.array(fc.integer({ min: 1, max: 400 }), { minLength: 1, maxLength: 3 }),
              ),
              mask: fc.constant(7),
              lease: fc.constant(undefined),
            }),
          },
          {
            weight: 6,
            arbitrary: fc.record({
              t: fc.constant('advance' as const),
              us: fc.integer({ min: 1, max: 3_000 }),
            }),
          },
          {
            weight: 1,
            arbitrary: fc.record({
              t: fc.constant('advance' as const),
              us: fc.integer({ min: 0, max: 70_000_000 }),
            }),
          },
          {
            weight: 3,
            arbitrary: fc.record({ t: fc.constant('wait' as const), delta: fc.constantFrom(-1, 0, 0, 1) }),
          },
        ),
        { minLength: 50, maxLength: 300 },
      );
      // A log of n single-unit grants d µs apart, then a step into the window's tail (so that
      // many, but not all, entries leave at once), then random traffic.
      const fillArb = fc
        .record({
          n: fc.integer({ min: 1, max: 120 }),
          d: fc.integer({ min: 1, max: 400 }),
          skip: fc.integer({ min: 0, max: 60_000 }),
        })
        .map(({ n, d, skip }) => {
          const fill: Command[] = [];
          for (let i = 0; i < n; i++) {
            fill.push({ t: 'acquire', costs: [1], mask: 7, lease: undefined }, { t: 'advance', us: d });
          }
          fill.push({ t: 'advance', us: skip });
          return fill;
        });
      await fc.assert(
        fc.asyncProperty(
          fc.array(slidingArb, { minLength: 1, maxLength: 2 }),
          fillArb,
          longArb,
          async (rules, fill, commands) => {
            await compare(make, rules, [...fill, ...commands]);
          },
        ),
        { numRuns: target === 'redis standalone' ? Math.ceil(runs / 4) : Math.ceil(runs / 12) },
      );
    }, 120_000);
  });
}
