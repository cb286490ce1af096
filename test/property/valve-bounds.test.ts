/**
 * Property tests of the engine over the memory store on one virtual clock: random rules,
 * costs, priorities, arrival times, concurrency, batch sizes and timer lateness. Every
 * start is recorded (store clock = valve clock here) and checked against the "Rate bounds"
 * table of the Guarantees page, the ordering guarantee, and "every job ends".
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import type { Rule } from '../../src/rules/rule.js';
import { normalizeRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import type { Store } from '../../src/stores/store.js';
import { createValve, type Valve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';

interface JobSpec {
  arrival: number;
  cost: number;
  priority: number;
  duration: number;
  valve: number;
  maxWait: number | undefined;
}

interface Record_ {
  spec: JobSpec;
  enq: number;
  startEv: number;
  /** Event number of the store call that carried the job's batch (the last one its valve sent before the start). */
  sentEv: number;
  start: number;
  outcome: 'ok' | 'rejected' | 'pending';
  error?: unknown;
}

const ruleArb: fc.Arbitrary<Rule> = fc.oneof(
  fc.record({
    algorithm: fc.constant('gcra' as const),
    limit: fc.integer({ min: 1, max: 8 }),
    interval: fc.constantFrom(10, 30, 100, 250, 1000),
    burst: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 6 })),
  }),
  fc.record({
    algorithm: fc.constant('fixed-window' as const),
    limit: fc.integer({ min: 1, max: 8 }),
    interval: fc.constantFrom(10, 30, 100, 250, 1000),
  }),
  fc.record({
    algorithm: fc.constant('sliding-window' as const),
    limit: fc.integer({ min: 1, max: 8 }),
    interval: fc.constantFrom(10, 30, 100, 250, 1000),
  }),
);

const scenarioArb = fc
  .record({
    rules: fc.array(ruleArb, { minLength: 1, maxLength: 3 }),
    valves: fc.integer({ min: 1, max: 2 }),
    concurrency: fc.option(fc.integer({ min: 1, max: 4 }), { nil: undefined }),
    /** With a concurrency limit: shared by all valves through store leases. */
    globalScope: fc.boolean(),
    batch: fc.integer({ min: 1, max: 8 }),
    /** Shared pauses (pause(ms) or resume()) written by a random valve at a random time. */
    pauses: fc.array(
      fc.record({
        at: fc.integer({ min: 0, max: 2000 }),
        ms: fc.integer({ min: 1, max: 800 }),
        valve: fc.nat(1),
        resume: fc.boolean(),
      }),
      { maxLength: 3 },
    ),
    /** An asynchronous store: each answer arrives this many ms later (undefined: synchronous memory store). */
    asyncDelay: fc.option(fc.integer({ min: 0, max: 20 }), { nil: undefined }),
    lateness: fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 40 })), {
      minLength: 1,
      maxLength: 10,
    }),
    jobs: fc.array(
      fc.record({
        arrival: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2000 })),
        costSeed: fc.nat(),
        priority: fc.oneof(fc.constant(0), fc.integer({ min: -2, max: 2 })),
        duration: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 150 })),
        valve: fc.nat(1),
        maxWait: fc.oneof(
          { arbitrary: fc.constant(undefined), weight: 3 },
          { arbitrary: fc.integer({ min: 1, max: 3000 }), weight: 1 },
        ),
      }),
      { minLength: 1, maxLength: 80, size: 'large' },
    ),
  })
  .map((s) => {
    const maxCost = Math.min(...s.rules.map((r) => normalizeRule(r, 'rule').maxCost));
    const jobs: JobSpec[] = s.jobs.map((j) => ({
      arrival: j.arrival,
      cost: 1 + (j.costSeed % maxCost),
      priority: j.priority,
      duration: j.duration,
      valve: j.valve % s.valves,
      maxWait: j.maxWait,
    }));
    jobs.sort((a, b) => a.arrival - b.arrival);
    return { ...s, jobs };
  });

type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

interface PauseWrite {
  ev: number;
  at: number;
  end: number;
}

async function simulate(s: Scenario): Promise<{
  records: Record_[];
  clock: FakeClock;
  valves: Valve[];
  pauses: PauseWrite[];
  resumes: number[];
}> {
  const clock = new FakeClock(1_700_000_000_000);
  let li = 0;
  clock.lateness = () => s.lateness[li++ % s.lateness.length]!;
  const shared = memoryStore({ clock });
  let ev = 0;
  // Per valve: the first send of the current busy period (calls in flight without a break).
  // Jobs start while the valve processes an answer. With pipelining (two calls in flight,
  // same-cost jobs) grants are interchangeable and go to the front of the valve's line of jobs
  // in flight, so a job may start on another call's answer, and the line keeps jobs of any call
  // of the busy period until no call is left in flight. A job that starts was therefore sent in
  // a batch no earlier than this send; one that ranks ahead and arrived after it may wait ("a
  // batch already sent to the store can receive grants before a newly arrived higher-priority
  // job"). Without pipelining every busy period is one call, and this is that call's send.
  const answering: number[] = [];
  const periodStart: number[] = [];
  const outstanding: number[][] = [];
  const storeFor = (v: number): Store => {
    const delay = s.asyncDelay;
    return {
      ...shared,
      subscribe: shared.subscribe!.bind(shared),
      notifies: true,
      pause: shared.pause.bind(shared),
      resume: shared.resume.bind(shared),
      renew: shared.renew.bind(shared),
      release: shared.release.bind(shared),
      acquire(request) {
        const sent = ev++;
        const mine = outstanding[v] ?? [];
        outstanding[v] = mine;
        if (mine.length === 0) periodStart[v] = sent;
        if (delay === undefined) {
          answering[v] = periodStart[v]!;
          return shared.acquire(request);
        }
        mine.push(sent);
        // The store decides when the answer is computed (its clock), then the reply travels back at once.
        return new Promise((resolve, reject) => {
          clock.setTimeout(() => {
            answering[v] = periodStart[v]!;
            mine.splice(mine.indexOf(sent), 1);
            try {
              resolve(shared.acquire(request));
            } catch (err) {
              reject(err);
            }
          }, delay);
        });
      },
    };
  };
  const valves = Array.from({ length: s.valves }, (_, v) =>
    createValve({
      id: 'prop',
      rules: s.rules,
      store: storeFor(v),
      clock,
      batch: s.batch,
      ...(s.concurrency === undefined
        ? {}
        : s.globalScope
          ? { concurrency: { limit: s.concurrency, scope: 'global' as const, leaseTtl: 1000 } }
          : { concurrency: s.concurrency }),
    }),
  );
  const running = valves.map(() => 0);
  let runningTotal = 0;
  let peakLocal = 0;
  let peakTotal = 0;
  const records: Record_[] = [];
  const t0 = clock.now();
  const pauses: PauseWrite[] = [];
  const resumes: number[] = [];
  for (const p of s.pauses) {
    clock.setTimeout(() => {
      const valve = valves[p.valve % s.valves]!;
      if (p.resume) {
        resumes.push(ev++);
        void valve.resume();
      } else {
        // The memory store records the pause synchronously inside this call.
        pauses.push({ ev: ev++, at: clock.now(), end: clock.now() + p.ms });
        void valve.pause(p.ms);
      }
    }, p.at);
  }
  for (const spec of s.jobs) {
    const wait = t0 + spec.arrival - clock.now();
    if (wait > 0) await clock.tickAsync(wait);
    const rec: Record_ = { spec, enq: ev++, startEv: -1, sentEv: -1, start: Number.NaN, outcome: 'pending' };
    records.push(rec);
    valves[spec.valve]!.run(
      () => {
        rec.startEv = ev++;
        rec.sentEv = answering[spec.valve]!;
        rec.start = clock.now();
        running[spec.valve]!++;
        runningTotal++;
        peakLocal = Math.max(peakLocal, running[spec.valve]!);
        peakTotal = Math.max(peakTotal, runningTotal);
        const done = () => {
          running[spec.valve]!--;
          runningTotal--;
        };
        if (spec.duration === 0) return done();
        return new Promise<void>((resolve) =>
          clock.setTimeout(() => {
            done();
            resolve();
          }, spec.duration),
        );
      },
      {
        cost: spec.cost,
        priority: spec.priority,
        ...(spec.maxWait !== undefined ? { maxWait: spec.maxWait } : {}),
      },
    ).then(
      () => {
        rec.outcome = 'ok';
      },
      (error: unknown) => {
        rec.outcome = 'rejected';
        rec.error = error;
      },
    );
  }
  await clock.runAllAsync(24 * 3_600_000);
  // Concurrency counts jobs: per valve (local), or across every valve sharing the id (global).
  if (s.concurrency !== undefined) {
    if (s.globalScope && peakTotal > s.concurrency) {
      throw new Error(`global concurrency ${s.concurrency}: ${peakTotal} jobs ran at once`);
    }
    if (peakLocal > s.concurrency)
      throw new Error(`concurrency ${s.concurrency}: ${peakLocal} ran at once in one valve`);
  }
  return { records, clock, valves, pauses, resumes };
}

/** Asserts every bound of the Guarantees "Rate bounds" table for each rule, over all valves' starts. */
function checkRateBounds(rules: readonly Rule[], records: Record_[]): void {
  const started = records
    .filter((r) => r.startEv >= 0)
    .sort((a, b) => a.start - b.start || a.startEv - b.startEv);
  for (const raw of rules) {
    const rule = normalizeRule(raw, 'rule');
    const intervalMs = rule.intervalUs / 1000;
    if (rule.algorithm === 'gcra') {
      // At most limit + burst - 1 units in any half-open window of length interval
      // (the max over windows is reached by one that starts at a start).
      const cap = rule.limit + rule.burst - 1;
      for (let i = 0; i < started.length; i++) {
        let sum = 0;
        for (let j = i; j < started.length && started[j]!.start < started[i]!.start + intervalMs; j++) {
          sum += started[j]!.spec.cost;
        }
        if (sum > cap) {
          throw new Error(
            `GCRA ${rule.label}: ${sum} units in [${started[i]!.start}, +${intervalMs}) > ${cap}`,
          );
        }
      }
      if (rule.burst === 1) {
        // Unit costs (burst 1 admits nothing larger) spaced interval / limit apart.
        for (let i = 1; i < started.length; i++) {
          const gap = started[i]!.start - started[i - 1]!.start;
          if (gap < intervalMs / rule.limit - 1e-9) {
            throw new Error(`GCRA ${rule.label}: starts ${gap}ms apart < ${intervalMs / rule.limit}`);
          }
        }
      }
    } else if (rule.algorithm === 'sliding-window') {
      // At most limit units in any half-open window of length interval.
      for (let i = 0; i < started.length; i++) {
        let sum = 0;
        for (let j = i; j < started.length && started[j]!.start < started[i]!.start + intervalMs; j++) {
          sum += started[j]!.spec.cost;
        }
        if (sum > rule.limit) {
          throw new Error(
            `sliding window ${rule.label}: ${sum} units in [${started[i]!.start}, +${intervalMs}) > ${rule.limit}`,
          );
        }
      }
    } else {
      const perWindow = new Map<number, number>();
      for (const r of started) {
        const k = Math.floor(Math.round(r.start * 1000) / rule.intervalUs);
        perWindow.set(k, (perWindow.get(k) ?? 0) + r.spec.cost);
      }
      for (const [k, sum] of perWindow) {
        if (sum > rule.limit)
          throw new Error(`fixed window ${rule.label}: window ${k} has ${sum} > ${rule.limit}`);
      }
    }
  }
}

/** Among jobs of one valve waiting together, starts follow (priority desc, call order asc). */
function checkOrdering(records: Record_[], valves: number): void {
  for (let v = 0; v < valves; v++) {
    const mine = records.filter((r) => r.spec.valve === v);
    for (const b of mine) {
      if (b.startEv < 0) continue;
      for (const a of mine) {
        // a was not waiting when b's batch was sent (a batch in flight may be granted before a newer arrival)
        if (a === b || a.enq > b.sentEv) continue;
        const better =
          a.spec.priority > b.spec.priority || (a.spec.priority === b.spec.priority && a.enq < b.enq);
        if (!better) continue;
        // a was queued when b started and ranks ahead: it must have started first or have left the queue.
        const aLeftBefore = a.startEv >= 0 ? a.startEv < b.startEv : a.outcome === 'rejected';
        if (!aLeftBefore) {
          throw new Error(
            `ordering: job #${b.enq} (p${b.spec.priority}) started before waiting job #${a.enq} (p${a.spec.priority})`,
          );
        }
      }
    }
  }
}

/** After a pause is written, no job starts until it expires (unless a resume came in between). */
function checkPauses(records: Record_[], pauses: PauseWrite[], resumes: number[]): void {
  for (const p of pauses) {
    for (const r of records) {
      if (r.startEv < p.ev || r.start >= p.end) continue;
      if (resumes.some((e) => e > p.ev && e < r.startEv)) continue;
      throw new Error(`job #${r.enq} started at ${r.start} inside a pause written at ${p.at} until ${p.end}`);
    }
  }
}

function checkEveryJobEnds(records: Record_[]): void {
  for (const r of records) {
    if (r.outcome === 'pending') throw new Error(`job #${r.enq} never ended`);
    if (r.outcome === 'rejected') {
      if (!isValveError(r.error, 'MAX_WAIT'))
        throw new Error(`job #${r.enq} rejected with ${String(r.error)}`);
      if (r.spec.maxWait === undefined) throw new Error(`job #${r.enq} rejected MAX_WAIT without a maxWait`);
      if (r.startEv >= 0) throw new Error(`job #${r.enq} both started and rejected`);
    } else if (r.startEv < 0) throw new Error(`job #${r.enq} resolved without starting`);
  }
}

describe('engine properties (memory store, virtual clock, late timers)', () => {
  it('rate bounds, ordering, no catch-up and every job ends', async () => {
    await fc.assert(
      fc.asyncProperty(scenarioArb, async (s) => {
        const { records, clock, valves, pauses, resumes } = await simulate(s);
        checkPauses(records, pauses, resumes);
        checkEveryJobEnds(records);
        checkRateBounds(s.rules, records);
        checkOrdering(records, s.valves);
        for (const valve of valves) expect(valve.stats()).toMatchObject({ queued: 0, running: 0 });
        expect(clock.pending).toBe(0);
      }),
      { numRuns: 400 },
    );
  });

  it('a saturated GCRA burst-1 queue with late timers never starts closer than interval / limit (no catch-up)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 10 }),
        fc.constantFrom(100, 1000),
        fc.integer({ min: 0, max: 200 }),
        fc.integer({ min: 5, max: 40 }),
        async (limit, interval, late, n) => {
          const clock = new FakeClock();
          clock.lateness = late;
          const valve = createValve({ id: 'sat', rules: { limit, interval }, clock });
          const starts: number[] = [];
          const all = Array.from({ length: n }, () => valve.run(() => starts.push(clock.now())));
          await clock.runAllAsync(24 * 3_600_000);
          await Promise.all(all);
          // Compared in whole µs, the clock's resolution (epoch-ms floats differ by ~0.2 µs).
          const spacingUs = Math.ceil((interval * 1000) / limit);
          for (let i = 1; i < starts.length; i++) {
            const gapUs = Math.round((starts[i]! - starts[i - 1]!) * 1000);
            expect(gapUs).toBeGreaterThanOrEqual(spacingUs);
            // Each wait follows the actual previous start: late timers add up rather than catch up.
            expect(gapUs).toBeGreaterThanOrEqual(spacingUs + late * 1000);
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
