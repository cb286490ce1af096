/**
 * anySignal (src/any-signal.ts): the signal wrapFetch() and valve/octokit give each attempt,
 * aborted by the caller's signal or the attempt's own, as AbortSignal.any would, with one
 * listener per source however many attempts share it (see test/feedback/long-signal-heap.test.ts
 * for the memory).
 */
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { anySignal, onAbort } from '../../src/any-signal.js';

describe('anySignal', () => {
  it('is the first signal when there is no second', () => {
    const a = new AbortController().signal;
    expect(anySignal(a, undefined)).toBe(a);
  });

  it('aborts with the reason of whichever source aborts first, once', () => {
    const a = new AbortController();
    const b = new AbortController();
    const combined = anySignal(a.signal, b.signal);
    let events = 0;
    combined.addEventListener('abort', () => events++);
    b.abort('caller');
    a.abort('valve');
    expect(combined.aborted).toBe(true);
    expect(combined.reason).toBe('caller');
    expect(events).toBe(1);

    const c = new AbortController();
    const d = new AbortController();
    const other = anySignal(c.signal, d.signal);
    c.abort('valve');
    expect(other.reason).toBe('valve');
  });

  it('is aborted at once when a source already is (the second one first)', () => {
    const a = new AbortController();
    const b = new AbortController();
    a.abort('a');
    expect(anySignal(a.signal, b.signal).reason).toBe('a');
    b.abort('b');
    expect(anySignal(a.signal, b.signal).reason).toBe('b');
  });

  it('one listener on a source shared by many combined signals; none once they are all aborted', () => {
    const long = new AbortController();
    const attempts = Array.from({ length: 50 }, () => new AbortController());
    const combined = attempts.map((a) => anySignal(a.signal, long.signal));
    expect(getEventListeners(long.signal, 'abort')).toHaveLength(1);
    for (const a of attempts) a.abort('done');
    expect(combined.every((s) => s.aborted && s.reason === 'done')).toBe(true);
    expect(getEventListeners(long.signal, 'abort')).toHaveLength(0);
    // The long signal still works for the next ones.
    const next = anySignal(new AbortController().signal, long.signal);
    long.abort('shutdown');
    expect(next.reason).toBe('shutdown');
    expect(getEventListeners(long.signal, 'abort')).toHaveLength(0);
  });

  it('a listener that combines again while a source aborts is handled', () => {
    const long = new AbortController();
    const first = anySignal(new AbortController().signal, long.signal);
    let again: AbortSignal | undefined;
    first.addEventListener('abort', () => {
      again = anySignal(new AbortController().signal, long.signal);
    });
    long.abort('stop');
    expect(first.reason).toBe('stop');
    expect(again?.aborted).toBe(true);
    expect(again?.reason).toBe('stop');
  });

  it('onAbort shares the one listener with the combined signals, and each call stops on its own', () => {
    const long = new AbortController();
    const heard: unknown[] = [];
    const fn = (reason: unknown) => heard.push(reason);
    const offs = [onAbort(long.signal, fn), onAbort(long.signal, fn)];
    const combined = anySignal(new AbortController().signal, long.signal);
    expect(getEventListeners(long.signal, 'abort')).toHaveLength(1);
    offs[0]!();
    offs[0]!();
    long.abort('stop');
    expect(heard).toEqual(['stop']);
    expect(combined.reason).toBe('stop');
    expect(getEventListeners(long.signal, 'abort')).toHaveLength(0);
    const other = new AbortController();
    const off = onAbort(other.signal, fn);
    off();
    expect(getEventListeners(other.signal, 'abort')).toHaveLength(0);
  });
});
