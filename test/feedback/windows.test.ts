/**
 * Feedback across responses: a remaining count that the requests still in flight will spend
 * pauses, and a coarse window reset is tightened by the earlier responses of the same window
 * (src/feedback/windows.ts). Pure: headers as express-rate-limit (draft 8) and
 * @fastify/rate-limit send them, on a given `now`.
 */
import { describe, expect, it } from 'vitest';
import { readBag } from '../../src/feedback/headers.js';
import { toHeaderBag } from '../../src/feedback/input.js';
import { WindowBounds } from '../../src/feedback/windows.js';

const MAX = 3_600_000;
/** A realistic epoch: a reset of `1` is then read as one second from now, as it is sent. */
const T = 1_800_000_000_000;

/** express-rate-limit draft 8: `"20-in-1sec";r=<remaining>;t=<seconds>`. */
const express = (remaining: number, t: number) =>
  toHeaderBag({
    status: 200,
    headers: { ratelimit: `"20-in-1sec";r=${remaining};t=${t}`, 'ratelimit-policy': '"20-in-1sec";q=20;w=1' },
  });
/** @fastify/rate-limit: x-ratelimit-remaining and a reset in delta seconds. */
const fastify = (remaining: number, t: number) =>
  toHeaderBag({
    status: 200,
    headers: {
      'x-ratelimit-limit': '20',
      'x-ratelimit-remaining': String(remaining),
      'x-ratelimit-reset': String(t),
    },
  });

describe('WindowBounds', () => {
  it('intersects the upper bounds of one window: the earliest response bounds the reset', () => {
    const w = new WindowBounds();
    expect(w.tighten('k', 19, 1000, 10_000, 1000)).toBe(1000);
    expect(w.tighten('k', 10, 1000, 10_400, 1000)).toBe(600);
    expect(w.tighten('k', 0, 1000, 10_950, 1000)).toBe(50);
  });

  it('a higher remaining count, or a response after the bound, opens a new window', () => {
    const w = new WindowBounds();
    w.tighten('k', 1, 1000, 0, 1000);
    expect(w.tighten('k', 19, 1000, 500, 1000)).toBe(1000);
    w.tighten('k', 0, 1000, 600, 1000);
    // After the window's upper bound (1500) the count is a new window's, whatever it says.
    expect(w.tighten('k', 0, 1000, 1600, 1000)).toBe(1000);
  });

  it('a late answer of an older window read as the current one only lengthens the pause', () => {
    const w = new WindowBounds();
    w.tighten('k', 0, 1000, 0, 1000);
    w.tighten('k', 19, 1000, 1000, 1000);
    // Not shortened below the current window's own bound (2000).
    expect(w.tighten('k', 0, 1000, 1001, 1000)).toBe(999);
  });

  it('a reset that cannot lie in the held window (another limit sending the same headers) starts its own bound', () => {
    const w = new WindowBounds();
    // GitHub's search (29 left, reset ≤ 2 s) then core (0 left, reset ≤ 1 h) on x-ratelimit-*.
    w.tighten('k', 29, 2000, 0, 1000);
    expect(w.tighten('k', 0, 3_600_000, 1000, 1000)).toBe(3_600_000);
    // Within a precision and the slack of the held bound: the same window, tightened.
    w.tighten('k', 5, 1000, 10_000_000, 1000);
    expect(w.tighten('k', 0, 2900, 10_000_100, 1000)).toBe(900);
  });

  it('keys are independent', () => {
    const w = new WindowBounds();
    w.tighten('a', 5, 1000, 0, 1000);
    expect(w.tighten('b', 4, 1000, 900, 1000)).toBe(1000);
  });
});

describe('readBag with the requests in flight and the window bounds', () => {
  for (const [name, bag, header] of [
    ['express draft 8', express, 'ratelimit'],
    ['fastify', fastify, 'x-ratelimit-reset'],
  ] as const) {
    it(`${name}: a remaining count no larger than the requests in flight after it pauses until the reset`, () => {
      const spent = readBag(bag(3, 1), { now: T, maxPause: MAX, ahead: 3 });
      expect(spent.reading).toMatchObject({ header, model: 'window', waitMs: 1000 });
      expect(readBag(bag(4, 1), { now: T, maxPause: MAX, ahead: 3 }).reading).toBeUndefined();
      // Without requests in flight, only a spent count pauses (as before).
      expect(readBag(bag(3, 1), { now: T, maxPause: MAX }).reading).toBeUndefined();
    });

    it(`${name}: the pause ends at the tightest bound the window's responses gave, not at the last rounded reset`, () => {
      const windows = new WindowBounds();
      // The window opened just before 10 000: its first response says t=1 (reset ≤ 11 000).
      expect(readBag(bag(19, 1), { now: T + 10_000, maxPause: MAX, windows }).reading).toBeUndefined();
      const last = readBag(bag(0, 1), { now: T + 10_950, maxPause: MAX, windows }).reading;
      expect(last).toMatchObject({ header, waitMs: 50, until: T + 11_000, coarse: true });
      // After the bound, the next window's answers bound its own reset.
      readBag(bag(19, 1), { now: T + 11_010, maxPause: MAX, windows });
      expect(readBag(bag(0, 1), { now: T + 11_900, maxPause: MAX, windows }).reading).toMatchObject({
        until: T + 12_010,
      });
    });
  }

  it("the fleet's record gets each response's own bound, not one tightened by this process's earlier answers", () => {
    // This process saw a window's answer early (reset ≤ T + 1000) and one with 3 left. The
    // provider's window reset at T + 500 (other processes spent it); the next one opened then.
    const windows = new WindowBounds();
    readBag(express(5, 1), { now: T, maxPause: MAX, windows });
    readBag(express(3, 1), { now: T + 100, maxPause: MAX, windows });
    // An answer of the next window, whose count (2) is no higher than the lowest seen here and
    // which came before the earlier bound: read here as the same window, its reset would be
    // T + 1000, before the true one (T + 1500 at most, from this answer itself).
    const next = readBag(express(2, 1), { now: T + 600, maxPause: MAX, windows });
    expect(next.window).toMatchObject({ remaining: 2, waitMs: 1000 });
    // The spent count of that window: the fleet gets this answer's bound (T + 1900 at most).
    const spent = readBag(express(0, 1), { now: T + 900, maxPause: MAX, windows });
    expect(spent.window).toMatchObject({ remaining: 0, waitMs: 1000 });
  });

  it("a 429's Retry-After: 1 stating the same rounded reset as the window's header takes the window's tighter bound", () => {
    const windows = new WindowBounds();
    readBag(fastify(19, 1), { now: T, maxPause: MAX, windows });
    const limited = toHeaderBag({
      status: 429,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1', 'retry-after': '1' },
    });
    expect(readBag(limited, { now: T + 700, maxPause: MAX, windows }).reading).toMatchObject({
      header: 'x-ratelimit-reset',
      until: T + 1000,
    });
    // Without the window's earlier answers, the Retry-After (the longest) still wins.
    expect(readBag(limited, { now: T + 700, maxPause: MAX }).reading).toMatchObject({
      header: 'retry-after',
      until: T + 1700,
    });
  });

  it('a token bucket waits for the units the requests in flight take, at the refill rate', () => {
    // OpenAI: 2 left of 10, refilled in 8 s (1 s a unit); 4 requests in flight need 2 more, the next one a third.
    const bag = toHeaderBag({
      status: 200,
      headers: {
        'x-ratelimit-limit-requests': '10',
        'x-ratelimit-remaining-requests': '2',
        'x-ratelimit-reset-requests': '8s',
      },
    });
    expect(readBag(bag, { now: T, maxPause: MAX, ahead: 4 }).reading).toMatchObject({
      model: 'token-bucket',
      waitMs: 3000,
    });
  });
});
