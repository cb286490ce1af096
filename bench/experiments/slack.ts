/**
 * Experiment (not part of `npm run bench`): how late this thread's sleeps end with Linux's
 * default timer slack (50 µs) and with 1 µs (what a valve under a burst-1 rule sets, see
 * src/clock.ts, sharpenWakeups). Per setting, twice, interleaved: `setTimeout(1)`,
 * `setTimeout(5)` (each measured from the call) and `Atomics.wait` for 0.3 ms, lateness
 * percentiles and mean in ms. Linux only (it writes /proc/self/timerslack_ns).
 *
 *   npx tsx bench/experiments/slack.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';

const now = (): number => performance.now();
const pct = (a: number[], p: number): number =>
  [...a].sort((x, y) => x - y)[Math.floor((a.length * p) / 100)]!;
const mean = (a: number[]): number => a.reduce((x, y) => x + y, 0) / a.length;
const show = (name: string, a: number[]): void =>
  console.log(
    `${name.padEnd(30)} p10 ${pct(a, 10).toFixed(3)} p50 ${pct(a, 50).toFixed(3)} p90 ${pct(a, 90).toFixed(3)} ` +
      `p99 ${pct(a, 99).toFixed(3)} mean ${mean(a).toFixed(3)}`,
  );

function timers(ms: number, n: number): Promise<number[]> {
  return new Promise((resolve) => {
    const late: number[] = [];
    const go = (): void => {
      const t = now();
      setTimeout(() => {
        late.push(now() - t - ms);
        if (late.length < n) go();
        else resolve(late);
      }, ms);
    };
    go();
  });
}

function waits(ms: number, n: number): number[] {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const late: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = now();
    Atomics.wait(cell, 0, 0, ms);
    late.push(now() - t - ms);
  }
  return late;
}

const file = '/proc/self/timerslack_ns';
const original = readFileSync(file, 'utf8').trim();
for (const slack of ['50000', '1000', '50000', '1000']) {
  writeFileSync(file, slack);
  show(`slack ${slack} ns: setTimeout(1)`, await timers(1, 2000));
  show(`slack ${slack} ns: setTimeout(5)`, await timers(5, 400));
  show(`slack ${slack} ns: Atomics.wait(0.3)`, waits(0.3, 2000));
}
writeFileSync(file, original);
