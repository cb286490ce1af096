/**
 * Other traffic on the benchmark's Redis: a client that sends `perSecond` single GET and SET
 * commands a second (alternating, over 1,000 small keys), as an application's cache traffic
 * would. A Redis in production rarely serves one limiter alone, and what a call costs the
 * server depends on what else it does between calls (an idle server wakes for each), so a
 * scenario can measure a peer's *marginal* cost: the server's CPU during the run minus the
 * background's own CPU over the same time, measured alone before and after the run.
 */
import { Redis } from 'ioredis';
import { nowMs } from './common.js';
import { type RedisCounters, readCounters } from './redis-server.js';

export interface Background {
  /** The background alone for `ms`: the server's CPU seconds and commands per ms. */
  alone(ms: number): Promise<{ cpuSecPerMs: number; commandsPerMs: number }>;
  /** Commands the background sent and saw answered with an error (should stay 0). */
  readonly errors: number;
  stop(): Promise<void>;
}

export async function startBackground(port: number, perSecond: number): Promise<Background> {
  if (!(perSecond > 0))
    throw new RangeError(`background: expected commands per second > 0, got ${perSecond}`);
  const client = new Redis({ port, host: '127.0.0.1', enableAutoPipelining: false });
  const admin = new Redis({ port, host: '127.0.0.1' });
  const value = 'x'.repeat(64);
  let sent = 0;
  let errors = 0;
  const onError = () => {
    errors++;
  };
  const t0 = nowMs();
  // One timer; each tick sends what is due by the clock, so a late tick sends more, as many
  // independent clients would.
  const timer = setInterval(() => {
    const due = Math.floor(((nowMs() - t0) * perSecond) / 1000) - sent;
    for (let i = 0; i < due; i++) {
      const key = `bg:${sent % 1000}`;
      const p = sent % 2 === 0 ? client.set(key, value) : client.get(key);
      p.catch(onError);
      sent++;
    }
  }, 1);
  await new Promise((r) => setTimeout(r, 500));
  return {
    get errors() {
      return errors;
    },
    async alone(ms) {
      const a: RedisCounters = await readCounters(admin);
      const ta = nowMs();
      await new Promise((r) => setTimeout(r, ms));
      const b = await readCounters(admin);
      const span = nowMs() - ta;
      // Each readCounters() sends INFO (not counted) and DBSIZE (counted): one between a and b.
      return {
        cpuSecPerMs: (b.cpuSec - a.cpuSec) / span,
        commandsPerMs: (b.commands - a.commands - 1) / span,
      };
    },
    async stop() {
      clearInterval(timer);
      await Promise.allSettled([client.quit(), admin.quit()]);
    },
  };
}
