/**
 * Test-side half of the fault suite: spawns workers (./worker.ts) as real processes, reads
 * their JSON-line logs as they come, and checks the logs (concurrency from start/end
 * intervals, maxWait, store errors, unhandled rejections). The checkers know nothing of the
 * engine: they read only what the workers logged.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Rule } from '../../src/rules/rule.js';
import { checkBounds } from '../helpers/bounds.js';
import type { WorkerConfig, WorkerEvent } from './worker.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'worker.ts');

/** CLOCK_MONOTONIC ms, the clock the workers log with. */
export const mono = (): number => Number(process.hrtime.bigint()) / 1e6;
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

type EventOf<K extends WorkerEvent['e']> = Extract<WorkerEvent, { e: K }>;

export interface Worker {
  readonly name: string;
  readonly config: WorkerConfig;
  readonly child: ChildProcess;
  readonly events: WorkerEvent[];
  /** Resolves with the exit code (or the signal's name). */
  readonly exited: Promise<number | string>;
  /** Resolves with the first event (already logged or future) that matches, or rejects after `timeoutMs`. */
  waitFor<K extends WorkerEvent['e']>(
    kind: K,
    match?: (event: EventOf<K>) => boolean,
    timeoutMs?: number,
  ): Promise<EventOf<K>>;
  of<K extends WorkerEvent['e']>(kind: K): EventOf<K>[];
  kill(signal: NodeJS.Signals): void;
  /** Lets a worker started with `waitForGo` submit its jobs. */
  go(): void;
  stderr(): string;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export function startWorker(config: WorkerConfig): Worker {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER, JSON.stringify(config)], {
    stdio: [config.waitForGo ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    cwd: path.resolve(path.dirname(WORKER), '../..'),
  });
  live.add(child);
  const events: WorkerEvent[] = [];
  const waiters = new Set<(event: WorkerEvent) => void>();
  let buffer = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString('utf8');
    let nl = buffer.indexOf('\n');
    while (nl >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      nl = buffer.indexOf('\n');
      if (!line.trim()) continue;
      let event: WorkerEvent;
      try {
        event = JSON.parse(line) as WorkerEvent;
      } catch {
        stderr += `[stdout] ${line}\n`;
        continue;
      }
      events.push(event);
      for (const w of [...waiters]) w(event);
    }
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
    if (stderr.length > 20_000) stderr = stderr.slice(-20_000);
  });
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(code ?? signal ?? -1);
    });
  });
  const worker: Worker = {
    name: config.name,
    config,
    child,
    events,
    exited,
    waitFor(kind, match, timeoutMs = 20_000) {
      type E = EventOf<typeof kind>;
      const test = (e: WorkerEvent): e is E => e.e === kind && (match === undefined || match(e as E));
      const found = events.find(test);
      if (found) return Promise.resolve(found);
      return new Promise<E>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(onEvent);
          reject(new Error(`${config.name}: no '${kind}' event within ${timeoutMs} ms. stderr:\n${stderr}`));
        }, timeoutMs);
        const onEvent = (e: WorkerEvent) => {
          if (!test(e)) return;
          clearTimeout(timer);
          waiters.delete(onEvent);
          resolve(e);
        };
        waiters.add(onEvent);
        void exited.then(() => {
          if (!waiters.has(onEvent)) return;
          clearTimeout(timer);
          waiters.delete(onEvent);
          reject(new Error(`${config.name} exited before a '${kind}' event. stderr:\n${stderr}`));
        });
      });
    },
    of(kind) {
      return events.filter((e) => e.e === kind) as never;
    },
    kill(signal) {
      child.kill(signal);
    },
    go() {
      if (!child.stdin) throw new Error(`${config.name} was not started with waitForGo`);
      child.stdin.end(`go ${Date.now()}\n`);
    },
    stderr: () => stderr,
  };
  return worker;
}

/** Kills what is still running (SIGCONT first, so a stopped worker can die). */
export async function stopWorkers(workers: readonly Worker[]): Promise<void> {
  for (const w of workers) {
    if (w.child.exitCode === null && w.child.signalCode === null) {
      w.child.kill('SIGCONT');
      w.child.kill('SIGKILL');
    }
  }
  await Promise.all(workers.map((w) => w.exited));
}

/** Waits for every worker to exit; fails with the worker's stderr if one exits non-zero. */
export async function expectCleanExit(workers: readonly Worker[], timeoutMs = 60_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // Say which workers, and how far each got (its last events), so a hang can be told apart
      // from a slow run.
      const running = workers
        .filter((w) => w.child.exitCode === null && w.child.signalCode === null)
        .map((w) => {
          const last = w.events.slice(-3).map((e) => JSON.stringify(e).slice(0, 200));
          // A last event long before now with no 'lag' after it: the worker's event loop is blocked
          // (its lag probe cannot log); 'done' without an exit: something keeps the process alive.
          return `${w.name} (now ${mono().toFixed(0)}; done: ${w.of('done').length > 0}; last events: ${last.join(' ')})\n${w.stderr().slice(-2000)}`;
        });
      reject(new Error(`workers still running after ${timeoutMs} ms: ${running.join('\n')}`));
    }, timeoutMs);
  });
  try {
    const codes = await Promise.race([Promise.all(workers.map((w) => w.exited)), timeout]);
    const bad = workers
      .map((w, i) => ({ w, code: codes[i] }))
      .filter(({ code }) => code !== 0)
      .map(
        ({ w, code }) =>
          `${w.name} exited with ${code}; unhandled: ${JSON.stringify(w.of('unhandled'))}; ` +
          `lingered after closing: ${JSON.stringify(w.of('linger'))}\n${w.stderr()}`,
      );
    if (bad.length > 0) throw new Error(bad.join('\n'));
  } finally {
    clearTimeout(timer);
  }
}

/** Every unhandled rejection / uncaught exception the workers logged. */
export function unhandled(workers: readonly Worker[]): string[] {
  return workers.flatMap((w) => w.of('unhandled').map((u) => `${w.name}: ${u.kind}: ${u.reason}`));
}

// ------------------------------------------------------------------------------ checkers

/** One job's run, from its start to its callback's settle (monotonic ms), across processes. */
export interface Interval {
  worker: string;
  job: number;
  start: number;
  end: number;
  /** The monotonic time this job's lease loss was logged ('abort' with LEASE_LOST), if it was. */
  lostAt: number | null;
  /**
   * Until when the job surely owned its slot on the store: its end; for a job whose lease was
   * lost, the earliest its lease can have expired there: the send time of the last call that
   * granted or renewed it (the server ran it no earlier) + leaseTtl, if that is before its end.
   * Overlap past this point is what a lost lease allows; overlap before it is a violation.
   */
  ownedUntil: number;
}

/** The run intervals of every started job; a job still running at the end counts until `openEnd`. */
export function intervals(workers: readonly Worker[], openEnd = Number.POSITIVE_INFINITY): Interval[] {
  const out: Interval[] = [];
  for (const w of workers) {
    const ends = new Map(w.of('cb-end').map((e) => [e.job, e.t]));
    const lost = new Map(
      w
        .of('abort')
        .filter((e) => e.code === 'LEASE_LOST')
        .map((e) => [e.job, e.t]),
    );
    const c = w.config.concurrency;
    const ttl = typeof c === 'object' && c.scope === 'global' ? Number(c.leaseTtl ?? 30_000) : 0;
    // token → send time of the last renewal that found it held.
    const renewed = new Map<string, number>();
    for (const call of w.of('call')) {
      if (call.op !== 'renew' || !call.ok || !call.tokens || !call.held) continue;
      call.tokens.forEach((token, i) => {
        if (call.held![i]) renewed.set(token, Math.max(renewed.get(token) ?? 0, call.t0));
      });
    }
    // A job starts synchronously on its acquisition's answer: the last granting call before it.
    const acquisitions = w.of('call').filter((c) => c.op === 'acquire' && c.ok && (c.granted ?? 0) > 0);
    const grantSent = (t: number): number => {
      let sent = t;
      for (const c of acquisitions) if (c.t1 <= t) sent = c.t0;
      return sent;
    };
    for (const s of w.of('start')) {
      const end = ends.get(s.job) ?? openEnd;
      const lostAt = lost.get(s.job) ?? null;
      const held = Math.max(grantSent(s.t), (s.token && renewed.get(s.token)) || 0);
      out.push({
        worker: w.name,
        job: s.job,
        start: s.t,
        end,
        lostAt,
        ownedUntil: lostAt === null ? end : Math.min(end, held + ttl),
      });
    }
  }
  return out;
}

export interface ConcurrencyReport {
  /** Most jobs running at one instant. */
  max: number;
  /** Instants (start events) at which more than `limit` ran, with the jobs running then. */
  over: { at: number; running: Interval[] }[];
  /** Of `over`, those not explained by lost leases (fewer than `count - limit` lost-lease jobs running). */
  unexplained: { at: number; running: Interval[] }[];
}

/**
 * Sweeps start/end events in time order (an end before a start at the same instant: a slot
 * released and reused). A job counts from its start until its callback settles. Where more
 * than `limit` run at once, at least `count - limit` of them must be jobs whose lease was
 * lost (logged LEASE_LOST): the only way the seeds allow overlap.
 */
export function concurrency(
  all: readonly Interval[],
  limit: number,
  /** Count each job until this time instead of its end (e.g. `(iv) => iv.ownedUntil`). */
  until: (iv: Interval) => number = (iv) => iv.end,
): ConcurrencyReport {
  const points: { t: number; kind: 0 | 1; iv: Interval }[] = [];
  for (const iv of all) {
    points.push({ t: iv.start, kind: 1, iv });
    points.push({ t: Math.max(iv.start, until(iv)), kind: 0, iv });
  }
  points.sort((a, b) => a.t - b.t || a.kind - b.kind);
  const running = new Set<Interval>();
  let max = 0;
  const over: ConcurrencyReport['over'] = [];
  const unexplained: ConcurrencyReport['unexplained'] = [];
  for (const p of points) {
    if (p.kind === 0) {
      running.delete(p.iv);
      continue;
    }
    running.add(p.iv);
    if (running.size > max) max = running.size;
    if (running.size > limit) {
      const snapshot = [...running];
      over.push({ at: p.t, running: snapshot });
      const lost = snapshot.filter((iv) => iv.lostAt !== null).length;
      if (lost < snapshot.length - limit) unexplained.push({ at: p.t, running: snapshot });
    }
  }
  return { max, over, unexplained };
}

/** The store's grants from the logged acquire answers (superset of the starts: includes cancelled grants). */
export function grants(workers: readonly Worker[]): { t: number; cost: number }[] {
  const out: { t: number; cost: number }[] = [];
  for (const w of workers) {
    for (const c of w.of('call')) {
      if (c.op !== 'acquire' || !c.ok || !c.granted || c.now === undefined) continue;
      for (let i = 0; i < c.granted; i++) out.push({ t: c.now, cost: c.costs?.[i] ?? 1 });
    }
  }
  return out;
}

/** Logged starts as grants on the store's clock (jobs started without the store are left out). */
export function startGrants(workers: readonly Worker[]): { t: number; cost: number }[] {
  return workers.flatMap((w) =>
    w
      .of('start')
      .filter((s) => s.grantAt !== null)
      .map((s) => ({ t: s.grantAt!, cost: 1 })),
  );
}

export interface Outcome {
  worker: string;
  job: number;
  submit: number;
  start: number | null;
  settled: number | null;
  ok: boolean | null;
  code: string | null;
  cause: string | null;
}

/** Per submitted job: when it started and how it settled (null: never, i.e. lost). */
export function outcomes(workers: readonly Worker[]): Outcome[] {
  const out: Outcome[] = [];
  for (const w of workers) {
    const starts = new Map(w.of('start').map((e) => [e.job, e.t]));
    const settled = new Map(w.of('settled').map((e) => [e.job, e]));
    for (const s of w.of('submit')) {
      const done = settled.get(s.job);
      out.push({
        worker: w.name,
        job: s.job,
        submit: s.t,
        start: starts.get(s.job) ?? null,
        settled: done?.t ?? null,
        ok: done?.ok ?? null,
        code: done?.code ?? null,
        cause: done?.cause ?? null,
      });
    }
  }
  return out;
}

/** ms of measured event-loop stall of `w` (its 'lag' events) overlapping [from, to]. */
export function stalledDuring(w: Worker | undefined, from: number, to: number): number {
  if (!w) return 0;
  let total = 0;
  for (const l of w.of('lag')) {
    const overlap = Math.min(to, l.t) - Math.max(from, l.t - l.ms);
    if (overlap > 0) total += overlap;
  }
  return total;
}

/**
 * maxWait check: a job that started did so within maxWait + tolerance of its submission; one
 * that never started settled (rejected) within maxWait + tolerance. A worker whose process
 * was measurably stalled (by the OS, on a loaded machine) between the job's deadline and its
 * settlement is allowed that stall on top. Returns the offenders.
 */
export function lateJobs(
  all: readonly Outcome[],
  maxWait: number,
  tolerance: number,
  workers: readonly Worker[] = [],
): Outcome[] {
  return all.filter((o) => {
    const end = o.start ?? o.settled;
    if (end === null) return true;
    const late = end - o.submit - maxWait;
    if (late <= tolerance) return false;
    const w = workers.find((x) => x.name === o.worker);
    return late > tolerance + stalledDuring(w, o.submit + maxWait, end);
  });
}

/**
 * What every fault run is judged on, from the workers' logs: outcomes (lost, past maxWait,
 * per code), concurrency (by start/end and by lease ownership), the rate bound on observed
 * starts and on the store's grant times, and every store call.
 */
export function summarize(
  workers: readonly Worker[],
  options: { maxWait: number; tolerance: number; limit: number; rule: Rule },
) {
  const all = outcomes(workers);
  const ivs = intervals(workers);
  const codes = new Map<string, number>();
  for (const o of all) {
    const key = o.ok ? 'ok' : (o.code ?? 'error');
    codes.set(key, (codes.get(key) ?? 0) + 1);
  }
  return {
    all,
    lost: all.filter((o) => o.settled === null),
    late: lateJobs(all, options.maxWait, options.tolerance, workers),
    ivs,
    report: concurrency(ivs, options.limit),
    owned: concurrency(ivs, options.limit, (iv) => iv.ownedUntil),
    startViolations: checkBounds(startGrants(workers), options.rule),
    grantViolations: checkBounds(grants(workers), options.rule),
    calls: workers.flatMap((w) => w.of('call')),
    codes,
    leaseLost: workers.flatMap((w) => w.of('lease-lost')),
  };
}

/** The longest measured stall of each worker, for the reports. */
export function worstStall(workers: readonly Worker[]): number {
  return Math.max(0, ...workers.flatMap((w) => w.of('lag').map((l) => l.ms)));
}

/** Store calls that failed, and 'store-error' events, per worker: they must match one to one. */
export function storeErrorAccounting(w: Worker): { failedCalls: number; events: number } {
  return {
    failedCalls: w.of('call').filter((c) => !c.ok).length,
    events: w.of('store-error').length,
  };
}

export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Every grant with its fence, ordered as the store granted them: by store time, then batch order. */
export function fenceOrder(all: readonly Worker[]): { now: number; fence: number; worker: string }[] {
  const out: { now: number; fence: number; worker: string; i: number }[] = [];
  for (const w of all) {
    for (const c of w.of('call')) {
      if (c.op !== 'acquire' || !c.ok || !c.fences) continue;
      c.fences.forEach((fence, i) => {
        out.push({ now: c.now!, fence, worker: w.name, i });
      });
    }
  }
  return out.sort((a, b) => a.now - b.now || a.i - b.i);
}

/** Pairs of consecutive grants (distinct store times) whose fences do not strictly grow. */
export function fenceViolations(order: readonly { now: number; fence: number }[]): string[] {
  const bad: string[] = [];
  const seen = new Set<number>();
  for (let k = 0; k < order.length; k++) {
    const g = order[k]!;
    if (seen.has(g.fence)) bad.push(`fence ${g.fence} handed out twice`);
    seen.add(g.fence);
    const prev = order[k - 1];
    if (prev && g.fence <= prev.fence) {
      bad.push(`fence ${g.fence} at ${g.now} follows fence ${prev.fence} at ${prev.now}`);
    }
  }
  return bad;
}
