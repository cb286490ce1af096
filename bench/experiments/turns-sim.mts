/**
 * The line of turns on a virtual clock (test/helpers/fleet-sim.ts): 2000/s shared by 4 or 16
 * callers for 3 s, 100 µs round trips, each wake-up late by a uniform 0–L ms. Per burst, callers
 * and L: the fleet racing (no line), and the line with the valve's ways of calling: one call at
 * a time; pipelined with both calls in flight carrying the ticket (valves before 0.x: two
 * refusals take two tickets); pipelined with at most one call in flight carrying it; the same
 * asking at a turn for all the turn may grant (valves now).
 * Run: `npx tsx bench/experiments/turns-sim.mts [burst ...]`.
 */
import { normalizeRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import { FakeClock } from '../../test/helpers/fake-clock.js';
import { type FleetSimOptions, simulateFleet } from '../../test/helpers/fleet-sim.js';

type Variant = Pick<FleetSimOptions, 'turns' | 'pipeline' | 'pipelineLined' | 'turnAsk'>;
const variants: Record<string, Variant> = {
  'no line': { turns: false, pipeline: true },
  'line, one call at a time': { turns: true },
  'line, pipelined, both calls lined': { turns: true, pipeline: true, pipelineLined: 'every' },
  'line, pipelined, one call lined': { turns: true, pipeline: true, pipelineLined: 'one' },
  'line, one call lined, turn ask': { turns: true, pipeline: true, pipelineLined: 'one', turnAsk: true },
};

const bursts = process.argv.slice(2).map(Number);
let seed = 42;
const rnd = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
for (const burst of bursts.length > 0 ? bursts : [1, 20])
  for (const callers of [4, 16])
    for (const late of [0.05, 0.3, 1.5])
      for (const [name, variant] of Object.entries(variants)) {
        const clock = new FakeClock();
        const store = memoryStore({ clock });
        const rule = normalizeRule({ limit: 2000, interval: 1000, burst }, 'rule');
        const r = await simulateFleet({
          store,
          now: () => clock.now(),
          advanceTo: (ms) => clock.advance(ms - clock.now()),
          id: 'x',
          rules: [rule],
          callers,
          durationMs: 3000,
          lateness: () => rnd() * late,
          rttMs: 0.1,
          ...variant,
        });
        const util = (r.grants.length / (2000 * 3)) * 100;
        console.log(
          `burst ${burst} callers ${callers} late ${late} ${name}: used ${util.toFixed(1)} % calls/granted job ${(r.calls / r.grants.length).toFixed(2)} empty ${((r.emptyCalls / r.calls) * 100).toFixed(0)} %`,
        );
      }
