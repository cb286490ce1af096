/**
 * Experiment (not part of `npm run bench`): what one Redis round trip costs the server, by how
 * many calls a client keeps in flight. A client sends PINGs (each standing for a batch of 32
 * jobs) with 1, 2, 4 and 32 in flight; the server's used_cpu_user + used_cpu_sys delta per call
 * is its fixed cost per round trip (event-loop wake-up, read, write). With one call in flight
 * every call pays the whole wake-up; with more, one wake-up serves several.
 *
 *   node --import tsx bench/experiments/round-trip-cost.ts [durationMs=1500] [rounds=3]
 */
import { Redis } from 'ioredis';
import { diffCounters, readCounters, startRedis } from '../lib/redis-server.js';

const duration = Number(process.argv[2] ?? 1500);
const rounds = Number(process.argv[3] ?? 3);
const server = await startRedis();
const client = new Redis({ port: server.port, host: '127.0.0.1' });
const admin = new Redis({ port: server.port, host: '127.0.0.1' });
try {
  for (let r = 0; r < rounds; r++) {
    for (const inFlight of [1, 2, 4, 32]) {
      let calls = 0;
      const end = performance.now() + duration;
      const before = await readCounters(admin);
      await Promise.all(
        Array.from({ length: inFlight }, async () => {
          while (performance.now() < end) {
            await client.ping();
            calls++;
          }
        }),
      );
      const d = diffCounters(before, await readCounters(admin), 0);
      process.stdout.write(
        `${String(inFlight).padStart(2)} in flight: ${Math.round((calls / duration) * 1000)} calls/s, ` +
          `Redis CPU ${((d.cpuSec * 1e6) / calls).toFixed(1)} µs per call (${((d.cpuSec * 1e6) / calls / 32).toFixed(2)} µs per job at 32 jobs per call)\n`,
      );
    }
  }
} finally {
  client.disconnect();
  admin.disconnect();
  await server.stop();
}
