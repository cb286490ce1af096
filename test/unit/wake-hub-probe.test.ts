/**
 * The subscription probe (src/stores/redis/subscriber.ts) on a busy machine: a probe that comes
 * back after its wait ran out still proves that the server delivers the channel, and a timer
 * that fires after a long stall first reads what already arrived. Without this, a loaded
 * process resent the subscription with ever longer waits (1, 2, 4, 8 s…) and a valve polled
 * for many seconds although its wake-ups worked.
 */
import { EventEmitter } from 'node:events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WakeHub } from '../../src/stores/redis/subscriber.js';

/** Just enough of an ioredis subscriber: subscribe() resolves, 'message' delivers. */
class FakeSubscriber extends EventEmitter {
  status = 'ready';
  subscribes = 0;
  subscribe(_channel: string): Promise<number> {
    this.subscribes++;
    return Promise.resolve(1);
  }
  unsubscribe(_channel: string): Promise<number> {
    return Promise.resolve(0);
  }
}

describe('the subscription probe on a busy machine', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a probe that comes back after its wait ran out confirms the channel, and no longer wait starts', async () => {
    const sub = new FakeSubscriber();
    const hub = new WakeHub(sub, 'classic');
    const probes: string[] = [];
    const statuses: boolean[] = [];
    hub.subscribe(
      'v:{a}:wake',
      () => {},
      async (message) => {
        probes.push(message);
        return 1;
      },
      (s) => statuses.push(s.listening),
    );
    await vi.advanceTimersByTimeAsync(0);
    expect(sub.subscribes).toBe(1);
    expect(probes).toHaveLength(1);
    // The first probe is late: its wait (1 s) runs out, the subscription is sent again and a
    // second probe goes out.
    await vi.advanceTimersByTimeAsync(1001);
    expect(sub.subscribes).toBe(2);
    expect(probes).toHaveLength(2);
    expect(hub.listening('v:{a}:wake')).toBe(false);
    // Now the first probe arrives: the server does deliver the channel.
    sub.emit('message', 'v:{a}:wake', probes[0]);
    expect(hub.listening('v:{a}:wake')).toBe(true);
    expect(statuses).toEqual([true]);
    // Nothing is resent later (before the periodic recheck at 30 s): the pending wait was cancelled.
    await vi.advanceTimersByTimeAsync(25_000);
    expect(sub.subscribes).toBe(2);
  });

  it('after a stall, a probe already received when the wait fires is read before the subscription is resent', async () => {
    const sub = new FakeSubscriber();
    const hub = new WakeHub(sub, 'classic');
    const probes: string[] = [];
    hub.subscribe(
      'v:{b}:wake',
      () => {},
      async (message) => {
        probes.push(message);
        return 1;
      },
    );
    await vi.advanceTimersByTimeAsync(0);
    expect(probes).toHaveLength(1);
    // The wait's timer and the probe's arrival fall due in the same turn; the timer runs first.
    await vi.advanceTimersByTimeAsync(999);
    vi.advanceTimersToNextTimer(); // fires the wait's timer only (its decision is deferred)
    sub.emit('message', 'v:{b}:wake', probes[0]); // the I/O that was waiting in the socket
    await vi.advanceTimersByTimeAsync(0); // the deferred decision
    expect(hub.listening('v:{b}:wake')).toBe(true);
    expect(sub.subscribes).toBe(1);
  });

  it('a message that is not one of its probes confirms nothing', async () => {
    const sub = new FakeSubscriber();
    const hub = new WakeHub(sub, 'classic');
    hub.subscribe(
      'v:{c}:wake',
      () => {},
      async () => 1,
    );
    await vi.advanceTimersByTimeAsync(0);
    sub.emit('message', 'v:{c}:wake', 'probe:000000000000');
    expect(hub.listening('v:{c}:wake')).toBe(false);
  });

  it('a confirmed channel is probed again every 30 s: a subscription the server dropped is noticed and resent', async () => {
    const sub = new FakeSubscriber();
    const hub = new WakeHub(sub, 'classic');
    const probes: string[] = [];
    let delivering = true;
    const statuses: boolean[] = [];
    hub.subscribe(
      'v:{c}:wake',
      () => {},
      async (message) => {
        probes.push(message);
        if (delivering) queueMicrotask(() => sub.emit('message', 'v:{c}:wake', message));
        return 1;
      },
      (s) => statuses.push(s.listening),
    );
    await vi.advanceTimersByTimeAsync(0);
    expect(hub.listening('v:{c}:wake')).toBe(true);
    // Still delivered at the recheck: nothing changes.
    await vi.advanceTimersByTimeAsync(30_000);
    expect(probes).toHaveLength(2);
    expect(hub.listening('v:{c}:wake')).toBe(true);
    expect(sub.subscribes).toBe(1);
    // The server drops the subscription (a slot migration): the next recheck notices.
    delivering = false;
    await vi.advanceTimersByTimeAsync(30_000);
    expect(probes).toHaveLength(3);
    expect(hub.listening('v:{c}:wake')).toBe(true); // its probe's wait (1 s) has not run out
    await vi.advanceTimersByTimeAsync(1001);
    expect(hub.listening('v:{c}:wake')).toBe(false);
    expect(sub.subscribes).toBe(2); // resent
    // Delivered again: the next probe (after a doubled wait) confirms it.
    delivering = true;
    await vi.advanceTimersByTimeAsync(5000);
    expect(hub.listening('v:{c}:wake')).toBe(true);
    expect(statuses).toEqual([true, false, true]);
  });
});
