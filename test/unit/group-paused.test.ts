/*
 * A key whose valve a group drops (idleTimeout) while its pause lasts: the pause still counts
 * (group.stats().paused), and the key's next valve takes it over as its own (no 'remote' pause).
 */
import { describe, expect, it } from 'vitest';
import type { PauseEvent } from '../../src/events.js';
import { createValveGroup } from '../../src/group.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

function pausedGroup() {
  const clock = new FakeClock();
  const store = memoryStore({ clock });
  const group = createValveGroup({ clock, store, idleTimeout: '1s' });
  const pauses: [string, PauseEvent['source'], number][] = [];
  group.on('pause', (e, key) => pauses.push([key, e.source, e.until]));
  return { clock, store, group, pauses };
}

describe('a valve group: a key dropped while paused', () => {
  it('still counts in stats().paused while its pause lasts, then no longer', async () => {
    const { clock, group } = pausedGroup();
    await group.run('k', () => 1);
    await group.valve('k').pause('1m');
    await clock.tickAsync(5000);
    expect(group.size).toBe(0);
    expect(group.stats()).toMatchObject({ evicted: 1, paused: 1 });
    expect(clock.pending).toBe(1); // the group's one timer looks at the record every idleTimeout
    await clock.tickAsync(56_000); // the pause ended
    expect(group.stats().paused).toBe(0);
    await clock.tickAsync(1000); // and the record is forgotten: no timer left
    expect(clock.pending).toBe(0);
    await group.close();
  });

  it("one pause() of a key, evicted and used again while it lasts, is one 'manual' pause (no 'remote' one)", async () => {
    const { clock, group, pauses } = pausedGroup();
    await group.run('k', () => 1);
    await group.valve('k').pause('1m');
    const pausedAt = clock.now();
    await clock.tickAsync(5000);
    expect(group.size).toBe(0);
    const job = track(group.run('k', () => 2));
    await clock.tickAsync(100);
    expect(job.done).toBe(false); // the store still holds the pause
    expect(pauses.map(([key, source]) => [key, source])).toEqual([['k', 'manual']]);
    expect(group.valve('k').stats().pausedBy?.source).toBe('manual');
    expect(group.stats().paused).toBe(1);
    await clock.tickAsync(pausedAt + 60_000 - clock.now() + 100);
    expect(job.ok).toBe(true);
    expect(pauses).toHaveLength(1);
    await group.close();
  });

  it("a pause read from a response keeps its source ('retry-after') across the eviction", async () => {
    const { clock, group, pauses } = pausedGroup();
    await group.run('k', () => 1);
    group.valve('k').observe({ status: 429, headers: { 'retry-after': '3600' } });
    await flushMicrotasks();
    await clock.tickAsync(5000);
    expect(group.size).toBe(0);
    expect(group.stats().paused).toBe(1);
    const job = track(group.run('k', () => 2));
    await clock.tickAsync(100);
    expect(job.done).toBe(false);
    expect(group.valve('k').stats().pausedBy?.source).toBe('retry-after');
    expect(pauses.map(([, source]) => source)).toEqual(['retry-after']);
    await group.close();
    expect(job.ok).toBe(false); // closed before the pause ended
  });

  it("a longer pause another process wrote meanwhile is that process's ('remote')", async () => {
    const { clock, store, group, pauses } = pausedGroup();
    const other = createValve({ id: 'k', clock, store });
    await group.run('k', () => 1);
    await group.valve('k').pause('10s');
    await clock.tickAsync(5000);
    expect(group.size).toBe(0);
    await other.pause('1m');
    const job = track(group.run('k', () => 2));
    await clock.tickAsync(100);
    expect(job.done).toBe(false);
    expect(pauses.map(([, source]) => source)).toEqual(['manual', 'remote']);
    expect(group.valve('k').stats().pausedBy?.source).toBe('remote');
    await Promise.all([group.close(), other.close()]);
  });

  it('a pause resumed by another process meanwhile ends with the next valve’s first store call', async () => {
    const { clock, store, group } = pausedGroup();
    const other = createValve({ id: 'k', clock, store });
    await group.run('k', () => 1);
    await group.valve('k').pause('1m');
    await clock.tickAsync(5000);
    await other.resume();
    // The group cannot know until the key is used again: it counts the pause it knew.
    expect(group.stats().paused).toBe(1);
    const job = track(group.run('k', () => 2));
    await clock.tickAsync(100);
    expect(job.ok).toBe(true);
    expect(group.stats().paused).toBe(0);
    await Promise.all([group.close(), other.close()]);
  });

  it('10,000 keys paused and dropped: counted while paused, forgotten once the pauses ended; close() forgets them', async () => {
    const { clock, group } = pausedGroup();
    const n = 10_000;
    for (let i = 0; i < n; i++) {
      await group.run(`k${i}`, () => i);
      await group.valve(`k${i}`).pause(30_000 + i);
    }
    await clock.tickAsync(5000);
    expect(group.size).toBe(0);
    expect(group.stats().paused).toBe(n);
    expect(clock.pending).toBe(1); // one timer for the group, not one per key
    await clock.tickAsync(40_000);
    expect(group.stats().paused).toBe(0);
    expect(clock.pending).toBe(0);
    await group.run('k1', () => 1); // a new valve, not paused
    expect(group.valve('k1').stats().pausedBy).toBe(null);
    for (let i = 0; i < 3; i++) await group.valve(`p${i}`).pause('1h');
    await clock.tickAsync(5000);
    expect(group.stats().paused).toBe(3);
    await group.close();
    expect(group.stats().paused).toBe(0);
  });
});
