/**
 * A valve that knows a pause while it does not listen for wake-ups (idle, or before its first
 * job) cannot hear another valve's resume(): when it gets work and subscribes, it asks the store
 * once, instead of holding its jobs on what it cached (up to PAUSE_TRUST, 30 s, before; a pause
 * heard of less than a second before: to its end, see valve-remote-resume.test.ts). On a
 * controlled clock.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createValve, memoryStore, type Valve } from '../../src/index.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { track } from '../helpers/track.js';

const valves: Valve[] = [];
afterEach(async () => {
  await Promise.all(valves.splice(0).map((v) => v.close()));
});

function setup() {
  const clock = new FakeClock();
  const store = memoryStore({ clock });
  const valve = () => {
    const v = createValve({ id: 'gap', clock, store, rules: { limit: 100, interval: '1s' } });
    valves.push(v);
    return v;
  };
  return { clock, valve };
}

describe('a pause known while not listening', () => {
  it("another valve's resume() while this one was idle: its next job asks the store and starts", async () => {
    const { clock, valve } = setup();
    const a = valve();
    const b = valve();
    await a.pause(60_000);
    expect(a.stats().pausedUntil).not.toBeNull();
    await b.resume(); // a does not listen: it has no work
    await clock.tickAsync(1000); // idle for a second
    const resumes: string[] = [];
    a.on('resume', (e) => resumes.push(e.source));
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(10);
    expect(job).toEqual({ done: true, value: 'ran' });
    expect(resumes).toEqual(['remote']);
    expect(a.stats().pausedUntil).toBeNull();
  });

  it('a pause that still holds is kept: the job waits until resume()', async () => {
    const { clock, valve } = setup();
    const a = valve();
    await a.pause(60_000);
    await clock.tickAsync(1000);
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(29_000);
    expect(job.done).toBe(false);
    expect(a.stats().pausedUntil).not.toBeNull();
    await a.resume();
    await clock.tickAsync(10);
    expect(job).toEqual({ done: true, value: 'ran' });
  });
});
