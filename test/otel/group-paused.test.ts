/*
 * valve.paused and valve.pauses for a valve group whose key is dropped (idleTimeout) while its
 * pause lasts: the key still counts as paused until the pause ends, and its next valve does not
 * count the same pause again as another process's ('remote').
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createValveGroup } from '../../src/group.js';
import { instrument } from '../../src/otel.js';
import { memoryStore } from '../../src/stores/memory.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { collect, meterSetup } from './reader.js';

let cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.reverse()) await fn();
  cleanup = [];
});

function setup(includeId: boolean) {
  const { reader, provider, meter } = meterSetup();
  const clock = new FakeClock();
  const group = createValveGroup({ clock, store: memoryStore({ clock }), idleTimeout: '1s' });
  instrument(group, { meter, includeId });
  cleanup.push(
    () => provider.shutdown(),
    () => group.close(),
  );
  return { reader, clock, group };
}

describe('instrument(group): a key dropped while paused', () => {
  it('valve.paused counts it until its pause ends', async () => {
    const { reader, clock, group } = setup(false);
    await group.run('k', () => 1);
    await group.valve('k').pause('1m');
    await clock.tickAsync(5000);
    expect(group.size).toBe(0);
    const m1 = await collect(reader);
    expect(m1.value('valve.paused', { 'valve.pause.source': 'manual' })).toBe(1);
    await clock.tickAsync(60_000);
    const m2 = await collect(reader);
    expect(m2.value('valve.paused', { 'valve.pause.source': 'manual' })).toBe(0);
  });

  it('with includeId, in its own series; its next valve counts it once, and one pause in valve.pauses', async () => {
    const { reader, clock, group } = setup(true);
    await group.run('k', () => 1);
    await group.run('other', () => 1);
    await group.valve('k').pause('1m');
    await clock.tickAsync(5000);
    const attributes = { 'valve.id': 'k', 'valve.pause.source': 'manual' };
    const m1 = await collect(reader);
    expect(m1.value('valve.paused', attributes)).toBe(1);
    expect(m1.points('valve.paused')).toHaveLength(1);
    const job = group.run('k', () => 2);
    await clock.tickAsync(100);
    const m2 = await collect(reader);
    expect(m2.value('valve.paused', attributes)).toBe(1);
    expect(m2.points('valve.paused')).toHaveLength(1);
    expect(m2.points('valve.pauses').map((p) => [p.attributes, p.value])).toEqual([
      [{ 'valve.id': 'k', 'valve.pause.source': 'manual' }, 1],
    ]);
    await clock.tickAsync(60_000);
    await job;
    expect((await collect(reader)).value('valve.paused', attributes)).toBe(0);
  });
});
