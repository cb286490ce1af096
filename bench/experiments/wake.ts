/**
 * Experiment (not part of `npm run bench`): how precisely can a Node process wake up for a GCRA
 * burst-1 schedule at 1000/s? Each strategy runs a saturated loop where the next start is the
 * actual previous start + 1 ms (GCRA without tolerance: lateness is never caught up), for 3 s.
 * Reports utilisation (starts / ideal) and the process CPU time used per second.
 *
 *   node --import tsx bench/experiments/wake.ts [spacingMs]
 *
 * Strategies:
 *   timeout-ceil   setTimeout(ceil(target - now)): what a plain one-timer scheduler does
 *   timeout-frac   setTimeout(target - now) without rounding (Node still has 1 ms timer granularity)
 *   hybrid-spin    setTimeout for all but the last 2 ms, then setImmediate turns until the target
 *   worker-timer   a worker thread sleeps with Atomics.wait (fractional ms) and posts a message
 */
import { isMainThread, Worker } from 'node:worker_threads';

const now = (): number => performance.timeOrigin + performance.now();

/** The worker timer's code, plain JavaScript (eval'd: no loader needed in the worker). */
const workerSource = `
const { parentPort, workerData } = require('node:worker_threads');
const now = () => performance.timeOrigin + performance.now();
const control = new Int32Array(workerData.sab, 0, 2);
const target = new Float64Array(workerData.sab, 8, 1);
let seen = 0;
for (;;) {
  Atomics.wait(control, 0, seen);
  seen = Atomics.load(control, 0);
  for (;;) {
    const remaining = target[0] - now();
    if (remaining <= 0) break;
    if (Atomics.wait(control, 0, seen, remaining) !== 'timed-out') seen = Atomics.load(control, 0);
  }
  parentPort.postMessage(0);
}
`;

type Strategy = (at: number, fn: () => void) => void;

const timeoutCeil: Strategy = (at, fn) => {
  setTimeout(fn, Math.max(0, Math.ceil(at - now())));
};
const timeoutFrac: Strategy = (at, fn) => {
  setTimeout(fn, Math.max(0, at - now()));
};
const hybridSpin: Strategy = (at, fn) => {
  const spin = (): void => {
    if (now() >= at) fn();
    else setImmediate(spin);
  };
  const d = at - now() - 2;
  if (d > 0) setTimeout(spin, d);
  else spin();
};

function workerTimer(): { strategy: Strategy; stop: () => void } {
  const sab = new SharedArrayBuffer(16);
  const control = new Int32Array(sab, 0, 2);
  const target = new Float64Array(sab, 8, 1);
  const worker = new Worker(workerSource, { eval: true, workerData: { sab } });
  let pending: (() => void) | null = null;
  worker.on('message', () => {
    const fn = pending;
    pending = null;
    fn?.();
  });
  return {
    strategy: (at, fn) => {
      pending = fn;
      target[0] = at;
      Atomics.add(control, 0, 1);
      Atomics.notify(control, 0);
    },
    stop: () => void worker.terminate(),
  };
}

async function run(name: string, strategy: Strategy, spacingMs: number, durationMs: number): Promise<void> {
  await new Promise((r) => setTimeout(r, 200));
  const cpu0 = process.cpuUsage();
  const t0 = now();
  let starts = 0;
  let late = 0;
  await new Promise<void>((resolve) => {
    let next = t0;
    const tick = (): void => {
      const t = now();
      if (t >= t0 + durationMs) {
        resolve();
        return;
      }
      starts++;
      late += t - next;
      next = t + spacingMs; // GCRA burst 1: the next start follows the actual one
      strategy(next, tick);
    };
    tick();
  });
  const cpu = process.cpuUsage(cpu0);
  const ideal = durationMs / spacingMs;
  process.stdout.write(
    `${name.padEnd(14)} utilisation ${((starts / ideal) * 100).toFixed(1).padStart(5)}%  mean lateness ${(late / starts).toFixed(3)} ms  CPU ${(((cpu.user + cpu.system) / 1000 / durationMs) * 100).toFixed(0)}% of a core\n`,
  );
}

if (isMainThread) {
  const spacing = Number(process.argv[2] ?? 1);
  const duration = 3000;
  await run('timeout-ceil', timeoutCeil, spacing, duration);
  await run('timeout-frac', timeoutFrac, spacing, duration);
  await run('hybrid-spin', hybridSpin, spacing, duration);
  const w = workerTimer();
  await new Promise((r) => setTimeout(r, 300));
  await run('worker-timer', w.strategy, spacing, duration);
  w.stop();
}
