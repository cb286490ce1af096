import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { StoreRule } from '../../src/rules/rule.js';
import { normalizeRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';
import { checkBounds, checkRules, type Grant } from '../helpers/bounds.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { simulateFleet } from '../helpers/fleet-sim.js';

/**
 * Properties of the memory store, driven directly with a FakeClock: random rules (1–3,
 * GCRA with bursts, fixed windows and sliding windows; each acquisition uses all of them or a subset, like
 * several valves sharing an id and some rules), random batches of random costs (positive
 * integers: 1, quarters of the largest cost rounded up, and any share of it), random clock steps (µs granularity), random
 * pauses and resumes. Three properties, each on its own (so that a broken arithmetic is
 * caught by each one separately):
 *
 * 1. Bounds: the grant log satisfies every row of the Guarantees "Rate bounds" table,
 *    per the independent checker in test/helpers/bounds.ts.
 * 2. Exact admission: every answer (granted, blocked, retryAfter) equals an oracle
 *    written in a different form from the store: the GCRA envelope over the whole log
 *    (a job fits iff for every earlier grant i, t_i + Σ inc(i..new) − now ≤ burst × T),
 *    fixed-window sums over the log, and for sliding windows the earliest instant at which
 *    the grants still inside the window ending there leave room (by brute force over the log). So the store never refuses a job that fits
 *    (the prefix is the longest one) and never grants one that does not.
 * 3. Exact hints: a job refused with retryAfter r is refused 1 µs before now + r and
 *    granted at now + r, with the clock moved by the ms value the store returned.
 */

const ID = 'prop';

const ruleArb: fc.Arbitrary<StoreRule> = fc
  .record({
    kind: fc.constantFrom('gcra', 'fixed-window', 'sliding-window'),
    limit: fc.integer({ min: 1, max: 20 }),
    intervalUs: fc.oneof(
      fc.integer({ min: 1, max: 1000 }),
      fc.integer({ min: 1000, max: 2_000_000 }),
      fc.constantFrom(1_000_000, 100_000, 250_000),
    ),
    burst: fc.integer({ min: 1, max: 5 }),
  })
  .map(({ kind, limit, intervalUs, burst }) =>
    normalizeRule(
      kind === 'gcra'
        ? { limit, interval: intervalUs / 1000, burst }
        : { limit, interval: intervalUs / 1000, algorithm: kind },
      'rule',
    ),
  );

type Command =
  /** `valve` picks which rules this acquisition uses (-1: all; else a non-empty subset), like valves sharing an id. */
  | { kind: 'acquire'; costs: number[]; retry: boolean; valve: number }
  | { kind: 'advance'; us: number }
  | { kind: 'pause'; us: number }
  | { kind: 'resume' };

/** A cost as a share of the rules' smallest maxCost, resolved to a positive integer later. */
const unitCostArb = fc.oneof(
  { arbitrary: fc.constant(-1), weight: 4 }, // "1 unit"
  { arbitrary: fc.integer({ min: 1, max: 4 }).map((q) => -q / 4 - 10), weight: 2 }, // quarters of maxCost
  { arbitrary: fc.double({ min: 0.01, max: 1, noNaN: true }), weight: 1 }, // any share of maxCost
);

const commandArb = (spanUs: number): fc.Arbitrary<Command> =>
  fc.oneof(
    {
      arbitrary: fc.record({
        kind: fc.constant('acquire' as const),
        costs: fc.array(unitCostArb, { minLength: 1, maxLength: 8 }),
        retry: fc.boolean(),
        valve: fc.oneof(fc.constant(-1), fc.integer({ min: 0, max: 6 })),
      }),
      weight: 6,
    },
    {
      arbitrary: fc.record({
        kind: fc.constant('advance' as const),
        us: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: spanUs })),
      }),
      weight: 5,
    },
    {
      arbitrary: fc.record({ kind: fc.constant('pause' as const), us: fc.integer({ min: 0, max: spanUs }) }),
      weight: 1,
    },
    { arbitrary: fc.constant({ kind: 'resume' as const }), weight: 1 },
  );

const scenarioArb = fc.array(ruleArb, { minLength: 1, maxLength: 3 }).chain((rules) => {
  const span = Math.max(...rules.map((r) => r.intervalUs)) * 2;
  return fc.record({
    rules: fc.constant(rules),
    startUs: fc.integer({ min: 0, max: 10_000_000 }),
    commands: fc.array(commandArb(span), { minLength: 10, maxLength: 80, size: 'max' }),
  });
});

/** Resolves a generated cost against the rules: every job must be admissible by every rule. */
function resolveCost(raw: number, rules: readonly StoreRule[]): number {
  const max = Math.min(...rules.map((r) => r.maxCost));
  if (raw === -1) return 1;
  // Costs are cost units: positive integers, at most the rules' maxCost.
  if (raw < -10) {
    const q = -(raw + 10); // 0.25..1
    return Math.max(1, Math.ceil(q * max));
  }
  return Math.min(max, Math.max(1, Math.round(raw * max)));
}

/** How often each interesting case came up, so the generators cannot silently become vacuous. */
const seen = {
  grants: 0,
  partial: 0,
  rate: 0,
  pause: 0,
  retries: 0,
  multiUnit: 0,
  windowRefusals: 0,
  slidingRefusals: 0,
  subsets: 0,
};

interface LoggedGrant {
  us: number;
  cost: number;
}

/** The oracle: how long (µs) a job of `cost` at `nowUs` must wait under `rule`, given every grant so far. */
function oracleWait(log: readonly LoggedGrant[], rule: StoreRule, nowUs: number, cost: number): number {
  if (rule.algorithm === 'gcra') {
    const T = rule.emissionUs;
    const incNew = Math.ceil(cost * T);
    // GCRA envelope: the largest t_i + Σ_{m ≥ i} inc_m (+ the new job) over the log, or now.
    let worst = nowUs + incNew;
    let suffix = incNew;
    for (let i = log.length - 1; i >= 0; i--) {
      suffix += Math.ceil(log[i]!.cost * T);
      worst = Math.max(worst, log[i]!.us + suffix);
    }
    return Math.max(0, worst - nowUs - rule.burst * T);
  }
  if (rule.algorithm === 'sliding-window') {
    // The earliest w ≥ 0 at which the grants inside (now + w − I, now + w] leave room for `cost`:
    // only 0 and the instants at which a grant leaves (t + I) can be it.
    const I = rule.intervalUs;
    const candidates = [0, ...log.map((g) => g.us + I - nowUs).filter((w) => w > 0)].sort((x, y) => x - y);
    for (const w of candidates) {
      let inside = 0;
      for (const g of log) if (g.us > nowUs + w - I) inside += g.cost;
      if (inside + cost <= rule.limit) return w;
    }
    throw new Error('oracle: a valid cost always fits eventually');
  }
  const k = Math.floor(nowUs / rule.intervalUs);
  let sum = 0;
  for (const g of log) if (Math.floor(g.us / rule.intervalUs) === k) sum += g.cost;
  return sum + cost <= rule.limit ? 0 : (k + 1) * rule.intervalUs - nowUs;
}

/**
 * Moves a FakeClock to the epoch-ms value closest to `us` µs. A FakeClock holds epoch ms
 * in a double, whose resolution near 1.7e12 is 2^-12 ms (0.24 µs): chaining many
 * relative advances such as 0.001 ms drifts (each adds 0.9766 µs). The property
 * therefore keeps time in integer µs and moves the clock to absolute targets;
 * x - now is exact here (Sterbenz), so the clock lands on the double nearest us / 1000,
 * which the store reads back as exactly `us`.
 */
function moveTo(clock: FakeClock, us: number): void {
  const delta = us / 1000 - clock.now();
  // A sub-µs step back only removes float error: the store's µs reading is unchanged.
  if (delta < -0.0005) throw new Error(`moveTo: cannot go back ${-delta} ms`);
  if (delta !== 0) clock.advance(delta);
}

interface Run {
  clock: FakeClock;
  store: Store;
  /** Per rule digest (the store's unit of state): every grant that spent it. */
  log: Map<string, LoggedGrant[]>;
  grants: Map<string, Grant[]>;
  pauseUs: number;
}

/** The rules of one acquisition: all of them, or a non-empty subset picked by `valve`. */
function rulesOf(rules: StoreRule[], valve: number): StoreRule[] {
  if (valve < 0) return rules;
  const mask = (valve % ((1 << rules.length) - 1)) + 1;
  return rules.filter((_, i) => mask & (1 << i));
}

/** Distinct rules by digest: identical rules are one quota in the store. */
function distinct(rules: readonly StoreRule[]): StoreRule[] {
  return [...new Map(rules.map((r) => [r.digest, r])).values()];
}

function logOf<T>(map: Map<string, T[]>, rule: StoreRule): T[] {
  let list = map.get(rule.digest);
  if (list === undefined) {
    list = [];
    map.set(rule.digest, list);
  }
  return list;
}

function nowUs(run: Run): number {
  return Math.round(run.clock.now() * 1000);
}

interface Mode {
  /** Compare every answer with the oracle. */
  oracle: boolean;
  /** Check the exactness of retry hints (for acquisitions generated with `retry`). */
  hints: boolean;
}

/** One acquisition: its grants logged, its answer checked against the oracle when asked. */
function acquireChecked(run: Run, allRules: StoreRule[], costs: number[], mode: Mode): AcquireResult {
  const now = nowUs(run);
  const r = run.store.acquire({ id: ID, rules: allRules, costs, count: costs.length }) as AcquireResult;
  const rules = distinct(allRules);
  expect(Math.round(r.now * 1000)).toBe(now);
  if (run.pauseUs > now) {
    seen.pause++;
    expect(r).toMatchObject({ granted: 0, blocked: 'pause' });
    expect(Math.round(r.retryAfter * 1000)).toBe(run.pauseUs - now);
    expect(Math.round(r.pausedUntil! * 1000)).toBe(run.pauseUs);
    return r;
  }
  expect(r.pausedUntil).toBeNull();
  expect(r.blocked).toBe(r.granted < costs.length ? 'rate' : null);
  if (r.granted < costs.length) {
    seen.rate++;
    if (r.granted > 0) seen.partial++;
  }
  if (mode.oracle) {
    let expectedGranted = costs.length;
    let expectedWait = 0;
    for (let j = 0; j < costs.length; j++) {
      let wait = 0;
      for (const rule of rules) wait = Math.max(wait, oracleWait(logOf(run.log, rule), rule, now, costs[j]!));
      if (wait > 0) {
        const byWindow = (rule: StoreRule) =>
          rule.algorithm === 'fixed-window' && oracleWait(logOf(run.log, rule), rule, now, costs[j]!) > 0;
        if (rules.some(byWindow)) seen.windowRefusals++;
        const bySliding = (rule: StoreRule) =>
          rule.algorithm === 'sliding-window' && oracleWait(logOf(run.log, rule), rule, now, costs[j]!) > 0;
        if (rules.some(bySliding)) seen.slidingRefusals++;
        expectedGranted = j;
        expectedWait = wait;
        break;
      }
      for (const rule of rules) logOf(run.log, rule).push({ us: now, cost: costs[j]! });
    }
    expect(r.granted).toBe(expectedGranted);
    expect(r.retryAfter * 1000).toBeCloseTo(expectedWait, 6);
  }
  for (let j = 0; j < r.granted; j++) {
    seen.grants++;
    if (costs[j]! > 1) seen.multiUnit++;
    for (const rule of rules) logOf(run.grants, rule).push({ t: r.now, cost: costs[j]! });
  }
  return r;
}

function execute(rules: StoreRule[], startUs: number, commands: Command[], mode: Mode): Run {
  const clock = new FakeClock(1_700_000_000_000 + startUs / 1000);
  const run: Run = { clock, store: memoryStore({ clock }), log: new Map(), grants: new Map(), pauseUs: 0 };
  for (const c of commands) {
    switch (c.kind) {
      case 'advance':
        moveTo(clock, nowUs(run) + c.us);
        break;
      case 'pause': {
        const until = run.store.pause(ID, c.us / 1000) as number;
        if (c.us > 0) run.pauseUs = Math.max(run.pauseUs, nowUs(run) + c.us);
        if (run.pauseUs > nowUs(run)) expect(Math.round(until * 1000)).toBe(run.pauseUs);
        break;
      }
      case 'resume':
        run.store.resume(ID);
        run.pauseUs = 0;
        break;
      case 'acquire': {
        const valveRules = rulesOf(rules, c.valve);
        if (valveRules.length < rules.length) seen.subsets++;
        const costs = c.costs.map((raw) => resolveCost(raw, valveRules));
        const r = acquireChecked(run, valveRules, costs, mode);
        if (mode.hints && c.retry && r.blocked === 'rate') {
          // Exact hint: 1 µs early is still refused; on time the refused job is granted.
          seen.retries++;
          const rest = costs.slice(r.granted, r.granted + 1);
          clock.advance(r.retryAfter - 0.001);
          const early = acquireChecked(run, valveRules, rest, mode);
          expect(early.granted).toBe(0);
          clock.advance(0.001);
          const onTime = acquireChecked(run, valveRules, rest, mode);
          expect(onTime.granted).toBe(1);
          // Two relative steps from an exact µs leave the clock within 0.4 µs of the grid; re-align.
          moveTo(clock, nowUs(run) + 1);
        }
        break;
      }
    }
  }
  return run;
}

describe('memory store properties', () => {
  const property = (mode: Mode) =>
    fc.property(scenarioArb, ({ rules, startUs, commands }) => {
      const run = execute(rules, startUs, commands, mode);
      // Each rule holds on the grants that spent it (all of them when every valve uses every rule).
      for (const rule of distinct(rules)) {
        const violations = checkBounds(run.grants.get(rule.digest) ?? [], rule);
        expect(violations.map((v) => v.message)).toEqual([]);
      }
    });

  it('every rate bound of the Guarantees holds (independent checker)', () => {
    fc.assert(property({ oracle: false, hints: false }), { numRuns: 400 });
  });

  it('retry hints are exact: refused 1 µs before now + retryAfter, granted at it', () => {
    fc.assert(property({ oracle: false, hints: true }), { numRuns: 400 });
    expect(seen.retries).toBeGreaterThan(500);
  });

  it('admission equals the oracle: the longest prefix that fits, and the exact wait', () => {
    fc.assert(property({ oracle: true, hints: false }), { numRuns: 400 });
  });

  it('the generators reach every case many times', () => {
    // Counts over all runs of the properties above (same file, run in order).
    expect(seen.grants).toBeGreaterThan(5000);
    expect(seen.partial).toBeGreaterThan(1000);
    expect(seen.rate).toBeGreaterThan(3000);
    expect(seen.pause).toBeGreaterThan(1000);
    expect(seen.multiUnit).toBeGreaterThan(1000);
    expect(seen.windowRefusals).toBeGreaterThan(500);
    expect(seen.slidingRefusals).toBeGreaterThan(500);
    expect(seen.subsets).toBeGreaterThan(2000);
  });

  it('saturated traffic stays within every bound (long runs, dense asks)', () => {
    const denseArb = fc.record({
      rules: fc.array(ruleArb, { minLength: 1, maxLength: 3 }),
      startUs: fc.integer({ min: 0, max: 10_000_000 }),
      steps: fc.array(fc.integer({ min: 0, max: 400 }), { minLength: 50, maxLength: 400 }),
      batch: fc.integer({ min: 1, max: 6 }),
    });
    fc.assert(
      fc.property(denseArb, ({ rules, startUs, steps, batch }) => {
        const min = Math.min(...rules.map((r) => r.intervalUs));
        const clock = new FakeClock(1_700_000_000_000 + startUs / 1000);
        const store = memoryStore({ clock });
        const grants: Grant[] = [];
        const costs = Array.from({ length: batch }, () => 1);
        for (const step of steps) {
          const r = store.acquire({ id: ID, rules, costs, count: batch }) as AcquireResult;
          for (let j = 0; j < r.granted; j++) grants.push({ t: r.now, cost: 1 });
          // Steps scaled to the shortest interval, so windows fill up.
          moveTo(clock, Math.round(clock.now() * 1000) + Math.floor((step * min) / 1000));
        }
        expect(checkRules(grants, rules).map((v) => v.message)).toEqual([]);
        // Liveness: something was granted.
        expect(grants.length).toBeGreaterThan(0);
      }),
      { numRuns: 200 },
    );
  });

  it('a saturated sliding window admits the whole limit at once, then exactly limit per interval', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 5_000_000 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.integer({ min: 1, max: 8 }),
        (limit, intervalUs, startUs, batch) => {
          const rule = normalizeRule(
            { limit, interval: intervalUs / 1000, algorithm: 'sliding-window' },
            'rule',
          );
          const clock = new FakeClock(1_700_000_000_000 + startUs / 1000);
          const store = memoryStore({ clock });
          const t0 = Math.round(clock.now() * 1000);
          const times: number[] = [];
          const costs = Array.from({ length: batch }, () => 1);
          // Always ask again exactly at the hint, for 5 intervals.
          while (Math.round(clock.now() * 1000) < t0 + 5 * intervalUs) {
            const r = store.acquire({ id: ID, rules: [rule], costs, count: batch }) as AcquireResult;
            for (let j = 0; j < r.granted; j++) times.push(Math.round(r.now * 1000));
            if (r.granted === batch) continue;
            expect(r.retryAfter).toBeGreaterThan(0);
            clock.advance(r.retryAfter);
            moveTo(clock, Math.round(clock.now() * 1000));
          }
          // The whole limit at once, and the full rate: limit in each [t0 + kI, t0 + (k + 1)I).
          expect(times.slice(0, limit).every((t) => t === t0)).toBe(true);
          for (let k = 0; k < 5; k++) {
            const inside = times.filter((t) => t >= t0 + k * intervalUs && t < t0 + (k + 1) * intervalUs);
            expect(inside.length).toBe(limit);
          }
          expect(
            checkBounds(
              times.map((t) => ({ t: t / 1000, cost: 1 })),
              rule,
            ).map((v) => v.message),
          ).toEqual([]);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('a saturated GCRA rule with burst 1 admits at the full rate, spaced exactly one emission apart', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 5_000_000 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        (limit, intervalUs, startUs) => {
          const rule = normalizeRule({ limit, interval: intervalUs / 1000 }, 'rule');
          const clock = new FakeClock(1_700_000_000_000 + startUs / 1000);
          const store = memoryStore({ clock });
          const times: number[] = [];
          // Always wake exactly at the hint: starts must be exactly emissionUs apart.
          for (let i = 0; i < 30; i++) {
            const r = store.acquire({ id: ID, rules: [rule], costs: [1, 1], count: 2 }) as AcquireResult;
            expect(r.granted).toBe(1);
            const now = Math.round(r.now * 1000);
            times.push(now);
            expect(r.retryAfter * 1000).toBeCloseTo(rule.emissionUs, 6);
            clock.advance(r.retryAfter); // one step by the returned ms value, then re-align to the µs grid
            moveTo(clock, Math.round(clock.now() * 1000));
          }
          for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBe(rule.emissionUs);
        },
      ),
      { numRuns: 200 },
    );
  });
});

/**
 * The line of turns (src/stores/turns.ts): callers taking part send the ticket of their last
 * answer. The line only ever refuses, so whatever tickets the callers send (held, stale, made
 * up), every bound holds; and a fleet whose callers follow the answers (the simulation in
 * test/helpers/fleet-sim.ts, on the virtual clock) asks the store about once per granted job
 * while keeping the rule busy, where without the line it asks several times.
 */
describe('the line of turns', () => {
  const gcraArb = fc
    .record({
      limit: fc.integer({ min: 1, max: 20 }),
      intervalUs: fc.oneof(fc.integer({ min: 100, max: 20_000 }), fc.constantFrom(1_000_000, 100_000)),
      burst: fc.constantFrom(1, 1, 2, 5, 20),
    })
    .map(({ limit, intervalUs, burst }) =>
      normalizeRule({ limit, interval: intervalUs / 1000, burst }, 'rule'),
    );
  type Ask = { kind: 'ask'; caller: number; jobs: number; ticket: 'held' | 'none' | 'stale' | 'made-up' };
  type Step = Ask | { kind: 'advance'; us: number };
  const stepArb: fc.Arbitrary<Step> = fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('ask' as const),
        caller: fc.integer({ min: 0, max: 5 }),
        jobs: fc.integer({ min: 1, max: 4 }),
        ticket: fc.constantFrom('held', 'held', 'held', 'none', 'stale', 'made-up'),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('advance' as const),
        us: fc.oneof(fc.integer({ min: 0, max: 3000 }), fc.integer({ min: 0, max: 200_000 })),
      }),
    },
  );

  it('every bound holds whatever tickets the callers send', () => {
    let lined = 0;
    fc.assert(
      fc.property(
        fc.array(gcraArb, { minLength: 1, maxLength: 3 }),
        fc.array(stepArb, { minLength: 10, maxLength: 120 }),
        (rules, steps) => {
          const clock = new FakeClock();
          const store = memoryStore({ clock });
          const held = [0, 0, 0, 0, 0, 0];
          const stale = [0, 0, 0, 0, 0, 0];
          const grants: Grant[] = [];
          for (const s of steps) {
            if (s.kind === 'advance') {
              clock.advance(s.us / 1000);
              continue;
            }
            const ticket = {
              held: held[s.caller]!,
              none: 0,
              stale: stale[s.caller]!,
              'made-up': held[s.caller]! + 1,
            }[s.ticket];
            const r = store.acquire({
              id: ID,
              rules,
              costs: Array.from({ length: s.jobs }, () => 1),
              count: s.jobs,
              turn: ticket,
            }) as AcquireResult;
            if (held[s.caller]! > 0) stale[s.caller] = held[s.caller]!;
            held[s.caller] = r.turn ?? 0;
            if ((r.turn ?? 0) > 0) lined++;
            for (let k = 0; k < r.granted; k++) grants.push({ t: r.now, cost: 1 });
          }
          expect(checkRules(grants, rules).map((v) => v.message)).toEqual([]);
        },
      ),
      { numRuns: 300 },
    );
    // The line was there most of the time: the property is not vacuous.
    expect(lined).toBeGreaterThan(1000);
  });

  /** Simulates `callers` following the answers for 1 s on a rule of 2000/s with `burst`. */
  async function fleet(callers: number, burst: number, turns: boolean, seed: number) {
    const clock = new FakeClock();
    const rule = normalizeRule({ limit: 2000, interval: 1000, burst }, 'rule');
    let x = seed;
    const random = (): number => {
      x = (x * 1103515245 + 12345) % 2147483648;
      return x / 2147483648;
    };
    const r = await simulateFleet({
      store: memoryStore({ clock }),
      now: () => clock.now(),
      advanceTo: (ms) => clock.advance(ms - clock.now()),
      id: ID,
      rules: [rule],
      callers,
      durationMs: 1000,
      // A precise timer and a quiet network: up to 50 µs late, 100 µs round trips.
      lateness: () => random() * 0.05,
      rttMs: 0.1,
      turns,
    });
    const violations = checkBounds(
      r.grants.map((t) => ({ t, cost: 1 })),
      rule,
    );
    return { ...r, violations, perJob: r.calls / r.grants.length, used: r.grants.length / 2000 };
  }

  it('a fleet following the answers asks at most 1.5 times per granted job and keeps the rule busy', async () => {
    for (const callers of [2, 4, 16]) {
      for (const burst of [1, 20]) {
        for (const seed of [1, 2, 3]) {
          const r = await fleet(callers, burst, true, seed);
          const what = `${callers} callers, burst ${burst}, seed ${seed}: ${r.calls} calls, ${r.grants.length} grants`;
          expect(
            r.violations.map((v) => v.message),
            what,
          ).toEqual([]);
          expect(r.perJob, what).toBeLessThanOrEqual(burst === 1 ? 1.5 : 0.3);
          expect(r.used, what).toBeGreaterThanOrEqual(burst === 1 ? 0.85 : 0.99);
        }
      }
    }
  });

  it('without the line the same fleet races: several calls per granted job, growing with the fleet', async () => {
    const four = await fleet(4, 1, false, 1);
    const sixteen = await fleet(16, 1, false, 1);
    expect(four.perJob).toBeGreaterThan(2);
    expect(sixteen.perJob).toBeGreaterThan(2 * four.perJob);
  });
});
