/**
 * Experiment (not part of `npm run bench`): where a saturated GCRA burst-1 valve loses its
 * slots. One valve over the memory store, `limit`/s, 3 s; the valve's clock is systemClock
 * wrapped to log when each timer fires, the store wrapped to log each grant's store time. Per
 * start: wake lateness (timer fired − the slot the previous grant opened), wake-to-grant time
 * (grant − timer fired) and grant-to-check-phase time (the grant's own work, the job and what it
 * queued, until the event loop reaches its check phase, just before it sleeps), as means in µs.
 * Under GCRA with burst 1 every µs of the first two is lost for good; the third delays the
 * moment the loop goes to sleep, from which Node counts the next timer's whole milliseconds.
 *
 *   npx tsx bench/experiments/loss.ts [limit] [timer|spin]
 */
import { loadValve } from '../lib/valve-module.js';

const limit = Number(process.argv[2] ?? 1000);
const precision = (process.argv[3] ?? 'timer') as 'timer' | 'spin';
const mod = (await loadValve()) as unknown as {
  createValve(o: unknown): { run(fn: () => unknown): Promise<unknown>; close(o: unknown): Promise<void> };
  memoryStore(): { acquire(r: unknown): { granted: number; now: number; retryAfter: number } };
  systemClock: {
    now(): number;
    setTimeout(fn: () => void, ms: number): unknown;
    setPreciseTimeout(fn: () => void, ms: number): unknown;
    clearTimeout(h: unknown): void;
  };
};
const sys = mod.systemClock;
const fires: number[] = [];
/** `fn`, logging when it runs (the moment a timer fired). */
const logged = (fn: () => void) => (): void => {
  fires.push(sys.now());
  fn();
};
const clock = {
  now: sys.now,
  setTimeout: (fn: () => void, ms: number) => sys.setTimeout(logged(fn), ms),
  setPreciseTimeout: (fn: () => void, ms: number) => sys.setPreciseTimeout(logged(fn), ms),
  clearTimeout: sys.clearTimeout,
};
const inner = mod.memoryStore();
const grants: number[] = [];
let toCheck = 0;
let checks = 0;
const store = new Proxy(inner as object, {
  get(t, k) {
    if (k === 'acquire')
      return (r: unknown) => {
        const a = inner.acquire(r);
        for (let i = 0; i < a.granted; i++) grants.push(a.now);
        if (a.granted > 0) {
          const g = a.now;
          setImmediate(() => {
            toCheck += sys.now() - g;
            checks++;
          });
        }
        return a;
      };
    const v = Reflect.get(t, k, t);
    return typeof v === 'function' ? v.bind(t) : v;
  },
});
const valve = mod.createValve({ id: 'x', rules: [{ limit, interval: 1000 }], store, clock, precision });
const T = 1000 / limit;
const duration = 3000;
let stop = false;
const job = (): void => {};
const next = (): void => {
  if (!stop) valve.run(job).then(next, () => {});
};
const cpu0 = process.cpuUsage();
for (let i = 0; i < 1000; i++) next();
await new Promise((r) => setTimeout(r, duration));
stop = true;
const cpu = process.cpuUsage(cpu0);
await valve.close({ drain: false }).catch(() => {});
// Pair each grant (after the first) with the last timer fire before it.
let f = 0;
let wakeLate = 0;
let toGrant = 0;
let n = 0;
let loss = 0;
for (let i = 1; i < grants.length; i++) {
  const slot = grants[i - 1]! + T;
  while (f + 1 < fires.length && fires[f + 1]! <= grants[i]!) f++;
  const fire = fires[f]!;
  if (fire < grants[i - 1]! || fire > grants[i]!) continue;
  n++;
  wakeLate += fire - slot;
  toGrant += grants[i]! - fire;
  loss += grants[i]! - slot;
}
const span = grants[grants.length - 1]! - grants[0]!;
console.log(
  `${precision} ${limit}/s: utilisation ${((((grants.length - 1) * T) / span) * 100).toFixed(1)}% ` +
    `fires/start ${(fires.length / grants.length).toFixed(2)} wake late ${((wakeLate / n) * 1000).toFixed(0)} µs, ` +
    `wake→grant ${((toGrant / n) * 1000).toFixed(0)} µs, loss ${((loss / n) * 1000).toFixed(0)} µs per start; grant→check phase ${((toCheck / checks) * 1000).toFixed(0)} µs; ` +
    `CPU ${(((cpu.user + cpu.system) / 1000 / duration) * 100).toFixed(1)}%`,
);
process.exit(0);
