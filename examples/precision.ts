/**
 * How a tight rule wakes up: the default (one Node timer per wait), `precision: 'spin'`, and a
 * burst that absorbs the timers' lateness. Run it with `npx tsx examples/precision.ts` to see
 * what each gets of 1000 starts per second, and the CPU it costs, on your machine.
 */
import { pathToFileURL } from 'node:url';
import { createValve } from '../src/index.js';

export function tightValves() {
  // #region precision
  // The default, precision: 'timer': one Node timer per wait, no CPU while waiting.
  const cheap = createValve({ id: 'api:key-1', rules: { limit: 1000, interval: '1s' } });

  // The last few percent of a burst-1 rule, for up to a CPU core while the queue is full.
  const exact = createValve({
    id: 'api:key-2',
    rules: { limit: 1000, interval: '1s' },
    precision: 'spin',
  });

  // Or, where the provider allows a burst, let the rule absorb the timers' lateness.
  const bursty = createValve({ id: 'api:key-3', rules: { limit: 1000, interval: '1s', burst: 3 } });
  // #endregion precision
  return { cheap, exact, bursty };
}

/** Keeps `valve` saturated for `ms`, then closes it; returns the starts (and per second) and the CPU used, in % of a core. */
export async function saturate(valve: ReturnType<typeof createValve>, ms: number) {
  let started = 0;
  let stop = false;
  const next = (): void => {
    if (!stop) valve.run(() => started++).then(next, () => {});
  };
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < 100; i++) next();
  await new Promise((resolve) => setTimeout(resolve, ms));
  stop = true;
  const cpu = process.cpuUsage(cpu0);
  const elapsed = performance.now() - t0;
  await valve.close();
  return {
    started,
    elapsed,
    perSecond: (started / elapsed) * 1000,
    cpuPct: ((cpu.user + cpu.system) / 1000 / elapsed) * 100,
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const valves = tightValves();
  for (const [name, valve] of Object.entries(valves)) {
    const { perSecond, cpuPct } = await saturate(valve, 3000);
    console.log(
      `${name.padEnd(6)} ${perSecond.toFixed(0)} starts/s of 1000, CPU ${cpuPct.toFixed(0)} % of a core`,
    );
  }
}
