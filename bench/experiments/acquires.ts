/**
 * Experiment: how a saturated valve over the memory store spends its wake-ups (default 1000/s
 * burst 1, 3 s): store calls, calls that granted nothing (woke too early), jobs per granting call,
 * and how late each call came after the moment the store said the next job would fit.
 *
 *   node --import tsx bench/experiments/acquires.ts [limit] [burst]
 */
import { nowMs } from '../lib/common.js';
import { loadValve } from '../lib/valve-module.js';

const limit = Number(process.argv[2] ?? 1000);
const burst = Number(process.argv[3] ?? 1);
const mod = await loadValve();
const inner = mod.memoryStore() as {
  acquire(r: unknown): { granted: number; retryAfter: number; now: number };
};
let calls = 0;
let empty = 0;
let granted = 0;
let expectedAt = 0;
const late: number[] = [];
/** For calls that granted nothing: the store's hint (ms), and the time until the next call (ms). */
const emptyHints: number[] = [];
const afterEmpty: number[] = [];
let lastEmptyAt = 0;
const store = new Proxy(inner, {
  get(target, key) {
    if (key === 'acquire') {
      return (request: unknown) => {
        const r = target.acquire(request);
        calls++;
        if (lastEmptyAt > 0) {
          afterEmpty.push(r.now - lastEmptyAt);
          lastEmptyAt = 0;
        }
        if (r.granted === 0) {
          empty++;
          emptyHints.push(r.retryAfter);
          lastEmptyAt = r.now;
        }
        granted += r.granted;
        if (expectedAt > 0) late.push(r.now - expectedAt);
        expectedAt = r.retryAfter > 0 ? r.now + r.retryAfter : 0;
        return r;
      };
    }
    const v = Reflect.get(target, key, target) as unknown;
    return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
  },
});
const valve = mod.createValve({ id: 'exp', rules: [{ limit, interval: 1000, burst }], store });
let stop = false;
const job = (): void => {};
const next = (): void => {
  if (!stop) valve.run(job).then(next, () => {});
};
for (let i = 0; i < 1000; i++) next();
const t0 = nowMs();
await new Promise((r) => setTimeout(r, 3000));
stop = true;
const elapsed = nowMs() - t0;
late.sort((a, b) => a - b);
const q = (p: number) => late[Math.min(late.length - 1, Math.floor(p * late.length))]!.toFixed(3);
process.stdout.write(
  `${limit}/s burst ${burst}: ${granted} grants in ${(elapsed / 1000).toFixed(1)} s (${((granted / ((limit * elapsed) / 1000)) * 100).toFixed(1)}%), ` +
    `${calls} store calls, ${empty} granted nothing, ${(granted / Math.max(1, calls - empty)).toFixed(2)} jobs per granting call\n` +
    `  call time after the hinted moment (ms): p10 ${q(0.1)}  p50 ${q(0.5)}  p90 ${q(0.9)}  p99 ${q(0.99)}\n`,
);
const median = (xs: number[]) => xs.sort((a, b) => a - b)[xs.length >> 1] ?? Number.NaN;
process.stdout.write(
  `  calls that granted nothing: median hint ${median(emptyHints).toFixed(4)} ms, median time to the next call ${median(afterEmpty).toFixed(3)} ms\n`,
);
await valve.close({ drain: false }).catch(() => {});
process.exit(0);
