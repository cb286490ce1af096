/**
 * A valve that knows a pause while it does not listen for wake-ups (idle, or before its first
 * job) cannot hear another valve's resume(): when it gets work and subscribes, it asks the store
 * once if it last heard of the pause a second ago or more, instead of holding its jobs on what
 * it cached (up to PAUSE_TRUST, 30 s, before).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createValve, memoryStore, type Valve } from '../../src/index.js';

const valves: Valve[] = [];
afterEach(async () => {
  await Promise.all(valves.splice(0).map((v) => v.close()));
});

function valve(store: ReturnType<typeof memoryStore>): Valve {
  const v = createValve({ id: 'gap', store, rules: { limit: 100, interval: '1s' } });
  valves.push(v);
  return v;
}

/** Resolves with the job's result, or 'held' if it has not started within `ms`. */
function within<T>(p: Promise<T>, ms: number): Promise<T | 'held'> {
  return Promise.race([p, new Promise<'held'>((r) => setTimeout(() => r('held'), ms).unref())]);
}

describe('a pause known while not listening', () => {
  it("another valve's resume() while this one was idle: its next job asks the store and starts", async () => {
    const store = memoryStore();
    const a = valve(store);
    const b = valve(store);
    await a.pause(60_000);
    expect(a.stats().pausedUntil).not.toBeNull();
    await b.resume(); // a does not listen: it has no work
    await new Promise((r) => setTimeout(r, 1100)); // idle for a while (a pause heard of just now is trusted)
    const resumes: string[] = [];
    a.on('resume', (e) => resumes.push(e.source));
    expect(
      await within(
        a.run(() => 'ran'),
        3000,
      ),
    ).toBe('ran');
    expect(resumes).toEqual(['remote']);
    expect(a.stats().pausedUntil).toBeNull();
  });

  it('a pause that still holds is kept: one store call, the job waits', async () => {
    const store = memoryStore();
    const a = valve(store);
    await a.pause(60_000);
    const job = a.run(() => 'ran');
    expect(await within(job, 300)).toBe('held');
    expect(a.stats().pausedUntil).not.toBeNull();
    await a.resume();
    expect(await job).toBe('ran');
  });
});
