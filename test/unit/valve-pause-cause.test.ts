/**
 * What produced a pause: the 'pause' event and stats().pausedBy name the source and, for a pause
 * read from a response, the header and the model it was read with.
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks, setup } from './harness.js';

describe('what produced a pause', () => {
  it('a manual pause: source manual, no header or model', async () => {
    const { valve, clock } = setup({ rules: [] });
    await valve.pause(1000);
    expect(valve.stats().pausedBy).toEqual({ source: 'manual', header: undefined, model: undefined });
    await clock.tickAsync(1000);
    expect(valve.stats().pausedBy).toBeNull();
  });

  it('a pause read from headers: the event and stats() name the header and its model', async () => {
    const { valve } = setup({ rules: [] });
    const events: unknown[] = [];
    valve.on('pause', (e) => events.push(e));
    valve.observe({ status: 429, headers: { 'retry-after-ms': '150', 'retry-after': '1' } });
    await flushMicrotasks();
    expect(events).toMatchObject([{ source: 'retry-after', header: 'retry-after-ms', model: 'wait' }]);
    expect(valve.stats().pausedBy).toEqual({
      source: 'retry-after',
      header: 'retry-after-ms',
      model: 'wait',
    });
  });

  it('a token-bucket header names its model', async () => {
    const { valve } = setup({ rules: [] });
    valve.observe({
      status: 200,
      headers: {
        'x-ratelimit-limit-requests': '500',
        'x-ratelimit-remaining-requests': '0',
        'x-ratelimit-reset-requests': '59.88s',
      },
    });
    await flushMicrotasks();
    expect(valve.stats().pausedBy).toMatchObject({ source: 'ratelimit-header', model: 'token-bucket' });
  });

  it('a longer pause another valve wrote is remote; resume() clears the cause', async () => {
    const clock = new FakeClock();
    const store = memoryStore({ clock });
    const a = createValve({ id: 'shared', rules: [], clock, store });
    const b = createValve({ id: 'shared', rules: [], clock, store });
    await a.pause(500);
    await b.pause(2000);
    // a learns b's longer pause from the store at its next acquisition, once its own has ended.
    const job = a.run(() => 'ran');
    await clock.tickAsync(600);
    expect(a.stats().pausedBy).toEqual({ source: 'remote', header: undefined, model: undefined });
    expect(b.stats().pausedBy).toEqual({ source: 'manual', header: undefined, model: undefined });
    await a.resume();
    expect(a.stats().pausedBy).toBeNull();
    await clock.tickAsync(1);
    await expect(job).resolves.toBe('ran');
    await a.close();
    await b.close();
  });
});
