/**
 * A group's `options(key)` calling the group back: for the key it is asked about (refused with a
 * TypeError, so one key never has two live valves), for another key (allowed), and closing the
 * group (the call that asked rejects CLOSED; no valve is left running after the close).
 */
import { describe, expect, it } from 'vitest';
import { isValveError } from '../../src/errors.js';
import { createValveGroup, type ValveGroup, type ValveGroupOptions } from '../../src/group.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

const T = 1000;

function group(options: Omit<ValveGroupOptions, 'clock'>, clock = new FakeClock()) {
  const g = createValveGroup({ rules: [], idleTimeout: T, clock, ...options });
  return { clock, group: g };
}

describe('createValveGroup: options(key) calling the group for the same key', () => {
  it('that call throws a TypeError naming the key; the key keeps one valve, and concurrency 1 holds across eviction', async () => {
    let g!: ValveGroup;
    const refused: unknown[] = [];
    let peeks = 0;
    const clock = new FakeClock();
    ({ group: g } = group(
      {
        concurrency: 1,
        options: (key) => {
          // e.g. a logging helper that peeks at the key's valve (once)
          if (peeks++ > 0) return undefined;
          try {
            g.valve(key).stats();
          } catch (err) {
            refused.push(err);
          }
          return undefined;
        },
      },
      clock,
    ));
    let running = 0;
    let peak = 0;
    const job = () =>
      new Promise<void>((resolve) => {
        running++;
        peak = Math.max(peak, running);
        clock.setTimeout(() => {
          running--;
          resolve();
        }, 10 * T);
      });
    const first = track(g.run('k', job));
    await flushMicrotasks();
    expect(running).toBe(1);
    // Past idleTimeout: the busy valve is kept, and it is the key's only one.
    clock.advance(T + 1);
    await flushMicrotasks();
    const second = track(g.run('k', job));
    await flushMicrotasks();
    clock.advance(1);
    await flushMicrotasks();
    expect({ peak, running, created: g.stats().created, size: g.size }).toEqual({
      peak: 1,
      running: 1,
      created: 1,
      size: 1,
    });
    await clock.tickAsync(20 * T);
    expect([first.ok, second.ok]).toEqual([true, true]);
    expect(peak).toBe(1);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toBeInstanceOf(TypeError);
    expect((refused[0] as Error).message).toContain('options("k")');
    await g.close();
  });

  it('left uncaught, the TypeError is what valve(), run() and a wrapped fetch of the key give; no valve is created', async () => {
    let g!: ValveGroup;
    let asked = 0;
    ({ group: g } = group({
      options: (key) => {
        asked++;
        g.valve(key);
        return undefined;
      },
    }));
    expect(() => g.valve('k')).toThrow(TypeError);
    expect(() => g.valve('k')).toThrow(/`options\("k"\)` called the group for the key it is asked about/);
    await expect(g.run('k', () => 1)).rejects.toThrow(TypeError);
    const f = g.wrapFetch(async (_url: string) => new Response(''), { key: () => 'k' });
    await expect(f('https://x.test/')).rejects.toThrow(TypeError);
    // Once per call (no recursion), and nothing registered.
    expect(asked).toBe(4);
    expect(g.stats()).toMatchObject({ size: 0, created: 0 });
    await g.close();
  });

  it('run() and a wrapped fetch of the same key from options(key) reject it too', async () => {
    let g!: ValveGroup;
    const inner: Promise<unknown>[] = [];
    let f!: (url: string) => Promise<Response>;
    ({ group: g } = group({
      options: (key) => {
        inner.push(
          g.run(key, () => 1),
          f(`https://x.test/${key}`),
        );
        return undefined;
      },
    }));
    f = g.wrapFetch(async (_url: string) => new Response(''), { key: (url) => url.split('/')[3]! });
    await expect(g.run('k', () => 'outer')).resolves.toBe('outer');
    for (const p of inner) await expect(p).rejects.toThrow(/`options\("k"\)` called the group/);
    expect(g.stats()).toMatchObject({ size: 1, created: 1 });
    await g.close();
  });

  it('options(key) may use the valve of another key', async () => {
    let g!: ValveGroup;
    ({ group: g } = group({
      options: (key) => {
        if (key !== 'shared') g.valve('shared');
        return undefined;
      },
    }));
    const a = g.valve('a');
    expect(g.valve('a')).toBe(a);
    expect(g.size).toBe(2);
    expect(g.stats().created).toBe(2);
    await g.close();
  });
});

describe('createValveGroup: options(key) closing the group', () => {
  it('the call that asked rejects (throws) CLOSED; no valve is created, no job runs', async () => {
    let g!: ValveGroup;
    const clock = new FakeClock();
    let closed: Promise<void> | undefined;
    ({ group: g } = group(
      {
        rules: { limit: 10, interval: '1s' },
        options: () => {
          closed = g.close();
          return undefined;
        },
      },
      clock,
    ));
    let ran = false;
    const run = track(
      g.run('k', () => {
        ran = true;
        return 1;
      }),
    );
    await flushMicrotasks();
    clock.advance(10);
    await flushMicrotasks();
    expect(ran).toBe(false);
    expect(run.done).toBe(true);
    expect(isValveError(run.error, 'CLOSED')).toBe(true);
    await closed;
    expect(g.stats()).toMatchObject({ size: 0, created: 0, started: 0, closed: true });
    expect(clock.pending).toBe(0);
  });

  it('valve(key) throws CLOSED', async () => {
    let g!: ValveGroup;
    ({ group: g } = group({
      options: () => {
        void g.close();
        return undefined;
      },
    }));
    let err: unknown;
    try {
      g.valve('k');
    } catch (e) {
      err = e;
    }
    expect(isValveError(err, 'CLOSED')).toBe(true);
    expect(g.size).toBe(0);
    await g.close();
  });
});
