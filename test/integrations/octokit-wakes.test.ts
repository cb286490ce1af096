/**
 * valve/octokit: the requests waiting, outside the valves, for the pauses of their lanes
 * (Pauses.sleep()). Many budgets whose pauses end at different times: each timer wakes the
 * requests due then, without looking at every waiting request (2,000 requests over 500 budgets
 * looked at each pause about 2,000 × 1,000 times), in the order they began to wait.
 */
import { describe, expect, it } from 'vitest';
import type { ValveInternals } from '../../src/feedback-port.js';
import type { Lanes } from '../../src/integrations/octokit/lanes.js';
import type { Settings } from '../../src/integrations/octokit/options.js';
import { Pauses } from '../../src/integrations/octokit/pauses.js';
import { ResourcePauses } from '../../src/integrations/octokit/resources.js';
import { Cut } from '../../src/integrations/octokit/waiting.js';
import { FakeClock } from '../helpers/fake-clock.js';

/** A lane's valve as the waits see it: its known pause end, its resume waiters; counts the looks. */
function lane(clock: FakeClock, end: number, looks: { n: number }) {
  const v = {
    clock,
    end,
    pauseWaiters: new Set<() => void>(),
    knownPauseEnd: () => {
      looks.n++;
      return v.end;
    },
  };
  return v;
}

function pausesOf(cut = new Cut()) {
  return new Pauses({} as Settings, {}, {} as Lanes, cut);
}

describe('requests waiting for pauses', () => {
  it('2,000 requests over 500 budgets whose pauses end at different times: each pause looked at a few times per request, woken in order', async () => {
    const clock = new FakeClock();
    const looks = { n: 0 };
    const start = clock.now();
    const valves = Array.from({ length: 500 }, (_, i) => lane(clock, start + 1000 + i * 7, looks));
    const pauses = pausesOf();
    const woken: number[] = [];
    const waits: Promise<void>[] = [];
    for (let r = 0; r < 2000; r++) {
      const v = valves[r % 500]!;
      waits.push(
        pauses.sleep([v as unknown as ValveInternals], Number.POSITIVE_INFINITY, undefined).then(() => {
          woken.push(r);
          expect(clock.now()).toBeGreaterThanOrEqual(v.end);
        }),
      );
    }
    await clock.runAllAsync();
    await Promise.all(waits);
    expect(woken).toHaveLength(2000);
    // Each budget's requests in the order they began to wait; budgets in the order their pauses end.
    expect(woken).toEqual([...woken].sort((a, b) => (a % 500) - (b % 500) || a - b));
    expect(looks.n).toBeLessThan(10 * 2000);
  });

  it('a pause extended while requests wait: they wait again, and still wake in the order they began to wait', async () => {
    const clock = new FakeClock();
    const looks = { n: 0 };
    const a = lane(clock, clock.now() + 100, looks);
    const b = lane(clock, clock.now() + 150, looks);
    const pauses = pausesOf();
    const woken: string[] = [];
    const sleep = (name: string, v: typeof a) =>
      pauses.sleep([v as unknown as ValveInternals], Number.POSITIVE_INFINITY, undefined).then(() => {
        woken.push(name);
      });
    const waits = [sleep('a1', a), sleep('b1', b), sleep('a2', a)];
    await clock.tickAsync(50);
    a.end = clock.now() + 120; // extended: a's requests now wake after b's
    waits.push(sleep('a3', a));
    await clock.runAllAsync();
    await Promise.all(waits);
    expect(woken).toEqual(['b1', 'a1', 'a2', 'a3']);
  });

  it('a resume() wakes the requests of that pause at once; the others wait on', async () => {
    const clock = new FakeClock();
    const looks = { n: 0 };
    const a = lane(clock, clock.now() + 60_000, looks);
    const b = lane(clock, clock.now() + 60_000, looks);
    const pauses = pausesOf();
    const woken: string[] = [];
    const waits = ['a', 'b'].map((name) =>
      pauses
        .sleep([(name === 'a' ? a : b) as unknown as ValveInternals], Number.POSITIVE_INFINITY, undefined)
        .then(() => {
          woken.push(name);
        }),
    );
    await clock.tickAsync(10);
    a.end = 0;
    for (const wake of [...a.pauseWaiters]) wake();
    await clock.tickAsync(0);
    expect(woken).toEqual(['a']);
    await clock.runAllAsync();
    await Promise.all(waits);
    expect(woken).toEqual(['a', 'b']);
  });

  it('maxWait and close() end a wait; nothing is left waiting (no timer left)', async () => {
    const clock = new FakeClock();
    const looks = { n: 0 };
    const a = lane(clock, clock.now() + 60_000, looks);
    const cut = new Cut();
    const pauses = pausesOf(cut);
    const valves = [a as unknown as ValveInternals];
    const timedOut = pauses.sleep(valves, clock.now() + 100, undefined);
    const closed = pauses.sleep(valves, Number.POSITIVE_INFINITY, undefined);
    const timedOutErr = timedOut.catch((e: unknown) => e);
    const closedErr = closed.catch((e: unknown) => e);
    await clock.tickAsync(100);
    expect(await timedOutErr).toMatchObject({ code: 'MAX_WAIT' });
    cut.close();
    expect(await closedErr).toMatchObject({ code: 'CLOSED' });
    expect(clock.nextAt()).toBeUndefined();
  });
});

describe('requests waiting for a spent resource valve has no lane for', () => {
  it('wait for its end, on their route only; maxWait, the signal and close() end a wait; no timer left', async () => {
    const clock = new FakeClock();
    const cut = new Cut();
    const spent = new ResourcePauses();
    const route = 'POST /repos/{owner}/{repo}/code-scanning/sarifs';
    const start = clock.now();
    spent.pause('b', route, 'code_scanning_upload', start + 1000, start);
    expect(spent.end('b', route)).toBe(start + 1000);
    expect(spent.end('b', 'GET /repos/{owner}/{repo}/issues')).toBe(0);
    expect(spent.end('other', route)).toBe(0);
    const woken: number[] = [];
    const sleep = (deadline: number, signal?: AbortSignal) =>
      spent.sleep('b', route, clock, deadline, signal, cut).then(() => {
        woken.push(clock.now() - start);
      });
    const waits = [sleep(Number.POSITIVE_INFINITY)];
    const timedOut = sleep(start + 100).catch((e: unknown) => e);
    const c = new AbortController();
    const aborted = sleep(Number.POSITIVE_INFINITY, c.signal).catch((e: unknown) => e);
    await clock.tickAsync(100);
    expect(await timedOut).toMatchObject({ code: 'MAX_WAIT' });
    c.abort(new Error('mine'));
    expect(await aborted).toMatchObject({ message: 'mine' });
    // Spent again meanwhile: the wait goes on to the later end (a pause is never shortened).
    spent.pause('b', route, 'code_scanning_upload', start + 1500, clock.now());
    spent.pause('b', route, 'code_scanning_upload', start + 500, clock.now());
    await clock.runAllAsync();
    await Promise.all(waits);
    expect(woken).toEqual([1500]);
    // Ended: a wait returns at once.
    await expect(sleep(Number.POSITIVE_INFINITY)).resolves.toBeUndefined();
    spent.pause('b', route, 'code_scanning_upload', clock.now() + 1000, clock.now());
    const closedErr = sleep(Number.POSITIVE_INFINITY).catch((e: unknown) => e);
    await clock.tickAsync(10);
    cut.close();
    expect(await closedErr).toMatchObject({ code: 'CLOSED' });
    expect(clock.nextAt()).toBeUndefined();
  });
});
