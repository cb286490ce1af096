import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { closedForGood, Leftovers } from '../../src/stores/redis/leftovers.js';

describe('Leftovers (unanswered unsubscriptions)', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('sends a failed unsubscription again on its retry timer until it is answered', async () => {
    let fail = true;
    const sent: string[] = [];
    const left = new Leftovers(
      (name) => {
        sent.push(name);
        return fail ? Promise.reject(new Error('offline')) : Promise.resolve(1);
      },
      () => false,
      () => true,
    );
    left.send('ch');
    await vi.advanceTimersByTimeAsync(0);
    expect(left.size).toBe(1);
    await vi.advanceTimersByTimeAsync(1000);
    expect(sent).toEqual(['ch', 'ch']);
    fail = false;
    await vi.advanceTimersByTimeAsync(2000);
    expect(sent).toEqual(['ch', 'ch', 'ch']);
    expect(left.size).toBe(0);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(sent.length).toBe(3);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('stops retrying, and lets go of its channels, once the client is closed for good', async () => {
    let closed = false;
    const sent: string[] = [];
    const left = new Leftovers(
      (name) => {
        sent.push(name);
        return Promise.reject(new Error('The client is closed'));
      },
      () => false,
      () => true,
      () => closed,
    );
    left.send('a');
    left.send('b');
    await vi.advanceTimersByTimeAsync(1000);
    expect(sent).toEqual(['a', 'b', 'a', 'b']);
    closed = true;
    await vi.advanceTimersByTimeAsync(2000);
    expect(left.size).toBe(0);
    expect(sent.length).toBe(4);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(sent.length).toBe(4);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('tells a client closed for good from one that is reconnecting', () => {
    expect(closedForGood({ status: 'end' }, true)).toBe(true);
    expect(closedForGood({ status: 'reconnecting' }, true)).toBe(false);
    expect(closedForGood({ status: 'ready' }, true)).toBe(false);
    expect(closedForGood({ isOpen: false, isReady: false }, false)).toBe(true);
    expect(closedForGood({ isOpen: true, isReady: false }, false)).toBe(false);
    expect(closedForGood({}, false)).toBe(false);
  });
});
