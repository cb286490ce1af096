/**
 * Another process's resume() over Redis, while this valve is idle (so not listening): what this
 * valve's next job waits for, and the backoff pause ending with the pause it learns is gone.
 *
 * - With a subscriber: the next job asks the store at once (the subscription is not confirmed
 *   yet, and on confirmation the store is asked once more), so it starts at once.
 * - Without one: the cached pause is trusted until its end, or until PAUSE_TRUST (30 s) after
 *   the valve last heard of it, whichever comes first; the next store call (then) finds it gone.
 *
 * In both, the next header-less 429 after the valve learnt it is the next backoff step, not the
 * deleted pause's remainder written again. Both valves share one FakeClock where the store's
 * clock is the test's (unsafeTestClock); Redis answers over the network, so positive outcomes
 * are awaited (vi.waitFor) and negative ones checked by the store calls made.
 */
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createValve, type Valve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { countingAcquires } from '../helpers/spy-store.js';
import { track } from '../helpers/track.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) {
    try {
      await fn();
    } catch {
      // best effort
    }
  }
});

const RULES = { limit: 10, interval: '1s', burst: 10 } as const;
const BARE_429 = { status: 429, headers: {} };

function connection(): Redis {
  const c = new Redis(sharedRedis().url);
  c.on('error', () => {});
  cleanups.push(() => c.disconnect());
  return c;
}

/** Valves A and B of one id, each with its own store client (and subscriber when asked). */
function pair(options: { subscriber: boolean; clock?: FakeClock; backoffInitial?: string }) {
  const prefix = uniquePrefix('rresume');
  const { clock } = options;
  const store = () =>
    redisStore({
      client: connection(),
      prefix,
      ...(options.subscriber ? { subscriber: connection() } : {}),
      ...(clock ? { unsafeTestClock: clock } : {}),
    });
  const a = countingAcquires(store());
  const make = (s: Store): Valve => {
    const v = createValve({
      id: 'rr',
      rules: RULES,
      store: s,
      ...(clock ? { clock } : {}),
      feedback: { backoffInitial: options.backoffInitial ?? '20s', backoffMax: '5m' },
    });
    cleanups.push(() => v.close());
    return v;
  };
  return { a: make(a.store), b: make(store()), acquires: a.acquires };
}

/** A's header-less 429, once its background write reached the store. */
async function backoff(a: Valve): Promise<void> {
  const written = new Promise<void>((resolve) => a.once('pause', () => resolve()));
  expect(a.observe(BARE_429)).toMatchObject({ attempt: 1 });
  await written;
}

describe('with a subscriber: A idle, B resumes, A queues a job', () => {
  it('after a backoff pause: the job starts, and the next header-less 429 is the next step', async () => {
    const { a, b } = pair({ subscriber: true });
    await backoff(a);
    await b.resume();
    await expect(a.run(() => 'ran', { maxWait: 10_000 })).resolves.toBe('ran');
    // Before: attempt 1 and the deleted pause's remainder (about 19.9 s), written again.
    expect(a.observe(BARE_429)).toMatchObject({ waitMs: 40_000, attempt: 2 });
  });

  it('after its own pause(): the job starts', async () => {
    const { a, b } = pair({ subscriber: true });
    await a.pause('16s');
    await b.resume();
    await expect(a.run(() => 'ran', { maxWait: 10_000 })).resolves.toBe('ran');
    expect(a.stats().pausedUntil).toBeNull();
  });
});

describe('without a subscriber (controlled clock): the next store call finds the pause gone', () => {
  it('a 16 s pause: the job waits for its end without asking the store, then starts', async () => {
    const clock = new FakeClock();
    const { a, b, acquires } = pair({ subscriber: false, clock });
    await a.pause('16s');
    await b.resume();
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(15_990);
    expect(acquires()).toBe(0);
    expect(job.done).toBe(false);
    await clock.tickAsync(10);
    await vi.waitFor(() => expect(job).toEqual({ done: true, value: 'ran' }));
    expect(acquires()).toBe(1);
  });

  it('a 60 s pause: checked with the store 30 s after A last heard of it (PAUSE_TRUST); the job starts then', async () => {
    const clock = new FakeClock();
    const { a, b, acquires } = pair({ subscriber: false, clock });
    const resumes: string[] = [];
    a.on('resume', (e) => resumes.push(e.source));
    await a.pause('60s');
    await b.resume();
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(29_990);
    expect(acquires()).toBe(0);
    expect(job.done).toBe(false);
    await clock.tickAsync(10);
    await vi.waitFor(() => expect(job).toEqual({ done: true, value: 'ran' }));
    expect(resumes).toEqual(['remote']);
  });

  it('a 60 s backoff pause: once the store call at 30 s found it gone, the next header-less 429 is the next step', async () => {
    const clock = new FakeClock();
    const { a, b } = pair({ subscriber: false, clock, backoffInitial: '60s' });
    await backoff(a);
    await b.resume();
    const job = track(a.run(() => 'ran'));
    await clock.tickAsync(30_000);
    await vi.waitFor(() => expect(job).toEqual({ done: true, value: 'ran' }));
    // Before: { waitMs: 30_000, attempt: 1 } (the deleted pause's remainder, written again).
    expect(a.observe(BARE_429)).toMatchObject({ waitMs: 120_000, attempt: 2 });
  });
});
