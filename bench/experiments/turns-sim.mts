import { normalizeRule } from '../../src/rules/rule.js';
import { memoryStore } from '../../src/stores/memory.js';
import { FakeClock } from '../../test/helpers/fake-clock.js';
import { simulateFleet } from '../../test/helpers/fleet-sim.js';

let seed = 42;
const rnd = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
for (const burst of [1, 20])
  for (const callers of [4, 16])
    for (const late of [0.05, 0.3, 1.5])
      for (const turns of [false, true]) {
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
          turns,
        });
        const util = (r.grants.length / (2000 * 3)) * 100;
        console.log(
          `burst ${burst} callers ${callers} late ${late} turns ${turns}: util ${util.toFixed(1)}% calls/grant ${(r.calls / r.grants.length).toFixed(2)} empty ${((r.emptyCalls / r.calls) * 100).toFixed(0)}%`,
        );
      }
