/**
 * The suite's own deadlines and checks, on stores that hang, answer what valve rejects, or fail
 * in ways a custom-store author must be told plainly about: every store call settles within
 * `callTimeout`, every case within `caseTimeout`, cleanups and deferred work always run, and
 * the process ends after a failing run. The cases are collected through a minimal runner, as in
 * store-contract-fails.test.ts, or run under node:test in a child process.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import type { AcquireRequest, AcquireResult, Store, WakeEvent } from '../../src/stores/store.js';
import { storeContract } from '../../src/testing.js';
import { checkBounds } from '../helpers/bounds.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { type Collected, collect } from './collect.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');

const find = (cases: Collected[], pattern: RegExp): Collected => {
  const found = cases.find((c) => pattern.test(c.name));
  if (!found) throw new Error(`no case matches ${pattern}`);
  return found;
};

const errorOf = async (c: Collected): Promise<Error> => {
  const error = await c.run().then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof Error)) throw new Error(`the case ${c.name} did not fail with an Error`);
  return error;
};

/** A memory store (on a fake clock when `clock`) with some methods replaced. */
function wrapped(patch: (inner: Store) => Partial<Store>, clock?: FakeClock): Store {
  const inner = clock ? memoryStore({ clock }) : memoryStore();
  return {
    acquire: (r) => inner.acquire(r),
    pause: (id, ms) => inner.pause(id, ms),
    resume: (id) => inner.resume(id),
    renew: (id, tokens, ttl) => inner.renew(id, tokens, ttl),
    release: (id, tokens) => inner.release(id, tokens),
    subscribe: (id, onWake) => inner.subscribe!(id, onWake),
    ...patch(inner),
  };
}

const never = <T>(): Promise<T> => new Promise<T>(() => {});

describe('a store call that never settles fails its case by the deadline, and the cleanups run', () => {
  it('store.acquire() that never answers: the case fails naming the call; its cleanup ran', async () => {
    let cleanups = 0;
    const cases = collect(
      () => ({
        store: wrapped(() => ({ acquire: () => never() })),
        cleanup: () => {
          cleanups++;
        },
      }),
      { callTimeout: 200, wakeUps: false, window: false },
    );
    const error = await errorOf(find(cases, /grants everything when there are no rules/));
    expect(error.message).toMatch(/^store\.acquire\(\) did not settle within 200 ms/);
    expect(cleanups).toBe(1);
    // Every method the suite awaits has the deadline, on the second store of a shared case too.
    const paused = collect(() => ({ store: wrapped(() => ({ pause: () => never() })) }), {
      callTimeout: 200,
      wakeUps: false,
      window: false,
      shared: true,
    });
    await expect(find(paused, /a pause, a budget and leases/).run()).rejects.toThrow(
      /^store\.pause\(\) did not settle within 200 ms/,
    );
    const renew = collect(() => ({ store: wrapped(() => ({ renew: () => never() })) }), {
      callTimeout: 200,
      wakeUps: false,
      window: false,
    });
    await expect(find(renew, /release frees only the given tokens/).run()).rejects.toThrow(
      /^store\.renew\(\) did not settle within 200 ms/,
    );
  });

  it('makeStore(), advance() and a cleanup that never settle fail by the deadline, naming them', async () => {
    const slowMake = collect(() => never(), { callTimeout: 200, wakeUps: false });
    await expect(slowMake[0]!.run()).rejects.toThrow(/^makeStore\(\) did not settle within 200 ms/);
    const clock = new FakeClock();
    const stuckClock = collect(() => ({ store: memoryStore({ clock }), advance: () => never() }), {
      callTimeout: 200,
      controlledClock: true,
      wakeUps: false,
    });
    await expect(stuckClock[0]!.run()).rejects.toThrow(/^advance\(1000\) did not settle within 200 ms/);
    let second = 0;
    const stuckCleanup = collect(() => ({ store: memoryStore(), cleanup: () => never<void>() }), {
      callTimeout: 200,
      wakeUps: false,
      shared: true,
    });
    await expect(find(stuckCleanup, /grants everything when there are no rules/).run()).rejects.toThrow(
      /^cleanup\(\) did not settle within 200 ms/,
    );
    // A stuck cleanup does not keep the next one from running.
    let made = 0;
    const one = memoryStore();
    const both = collect(
      () =>
        made++ % 2 === 0
          ? { store: one, cleanup: () => never<void>() }
          : {
              store: one,
              cleanup: () => {
                second++;
              },
            },
      { callTimeout: 200, wakeUps: false, window: false, shared: true },
    );
    await expect(find(both, /a pause, a budget and leases/).run()).rejects.toThrow(/cleanup\(\)/);
    expect(second).toBe(1);
  });

  it('a case slower than `caseTimeout` fails naming the call in flight, after its cleanup ran', async () => {
    let cleanups = 0;
    const cases = collect(
      () => ({
        store: wrapped((inner) => ({
          // Each call answers, but slowly: no call reaches `callTimeout`, the case runs out of time.
          acquire: async (r: AcquireRequest) => {
            await new Promise((resolve) => setTimeout(resolve, 150));
            return inner.acquire(r);
          },
        })),
        cleanup: () => {
          cleanups++;
        },
      }),
      { callTimeout: 5000, caseTimeout: 400, wakeUps: false, window: false },
    );
    const error = await errorOf(find(cases, /spends atomically: a refused job spends nothing on any rule/));
    expect(error.message).toMatch(
      /^storeContract\("probe"\): the case did not finish within 400 ms \(the suite's `caseTimeout`.*\): still waiting for store\.acquire\(\) \(called [\d.]+ m?s ago\)$/,
    );
    expect(cleanups).toBe(1);
  });

  it('checks `callTimeout` and `caseTimeout`: a TypeError naming the option', () => {
    const run = { describe: () => {}, it: () => {} };
    const make = () => ({ store: memoryStore() });
    for (const bad of [0, -1, Number.NaN, '5000', 2 ** 31]) {
      expect(() => storeContract('x', make, { ...run, callTimeout: bad as number })).toThrow(
        /Expected `callTimeout` to be a number of ms/,
      );
      expect(() => storeContract('x', make, { ...run, caseTimeout: bad as number })).toThrow(
        /Expected `caseTimeout` to be a number of ms/,
      );
    }
    expect(() => storeContract('x', make, { ...run, callTimeout: 100, caseTimeout: 1000 })).not.toThrow();
  });

  const nodeTest = (env: Record<string, string>) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', '--test', '--test-reporter=tap', 'test/contract/fixtures/never-answers.nt.ts'],
        { cwd: root, env: { ...process.env, ...env }, timeout: 60_000 },
        (error, stdout, stderr) => {
          resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr });
        },
      );
    });

  it('under node:test: the run fails naming the call and the process ends, every connection closed', async () => {
    const { code, stdout } = await nodeTest({ RUNNER_TIMEOUT: '' });
    expect(stdout).toMatch(/store\.acquire\(\) did not settle within 5 s/);
    expect(stdout).toMatch(/^# fail 1$/m);
    expect(stdout).toMatch(/# fixture exit: 0 connection\(s\) open, (\d+) cleanup\(s\) ran/);
    expect(code).toBe(1);
  }, 60_000);

  it("under node:test with a runner timeout shorter than the suite's: the cleanup still runs and the process ends", async () => {
    const { code, stdout } = await nodeTest({ RUNNER_TIMEOUT: '1000' });
    // (Cases that wait longer than 1 s time out too: only the hanging one matters here.)
    expect(stdout).toMatch(
      /not ok \d+ - grants everything when there are no rules\n[\s\S]*?error: 'test timed out after 1000ms'/,
    );
    expect(stdout).toMatch(/# fixture exit: 0 connection\(s\) open/);
    expect(code).toBe(1);
  }, 60_000);
});

describe('a failing wake-up case ends its subscriptions and says what it waited for', () => {
  it('a store that never reports a pause: the case names the missing wake-up; no subscription is left', async () => {
    let live = 0;
    const cases = collect(
      () => ({
        store: wrapped((inner) => ({
          subscribe: (id, onWake) => {
            const poll = setInterval(() => {}, 100); // a polling subscription: a timer
            live++;
            const stop = inner.subscribe!(id, (e: WakeEvent) => {
              if (e.type !== 'pause') onWake(e);
            });
            let done = false;
            return () => {
              if (done) return;
              done = true;
              clearInterval(poll);
              live--;
              stop();
            };
          },
        })),
      }),
      { window: false },
    );
    const error = await errorOf(find(cases, /subscribers hear pause, resume and release/));
    expect(error.message).toMatch(
      /^timed out after 2 s waiting for a 'pause' wake-up after pause\(id\) \(heard so far: \[\]\)/,
    );
    expect(live).toBe(0);
  }, 20_000);
});

describe('answers valve would reject fail the cases that read them, with valve’s message', () => {
  const withTurnNull = (clock?: FakeClock) =>
    wrapped(
      (inner) => ({
        acquire: async (r: AcquireRequest) =>
          ({ ...(await inner.acquire(r)), turn: null }) as unknown as AcquireResult,
      }),
      clock,
    );

  it('`turn: null` on every answer (e.g. a nil from a database driver): the cases fail', async () => {
    const cases = collect(() => ({ store: withTurnNull() }), { wakeUps: false, window: false });
    const error = await errorOf(find(cases, /grants everything with blocked null/));
    expect(error.name).toBe('AssertionError');
    expect(error.message).toMatch(
      /^store\.acquire\(\) returned an invalid result: turn null, not absent or an integer ≥ 0 .*\(to a call for 3 job\(s\)\): valve treats such an answer as a failed call/,
    );
    const failed: string[] = [];
    for (const c of cases)
      if (
        await c.run().then(
          () => false,
          () => true,
        )
      )
        failed.push(c.name);
    // Every case that acquires fails; a store valve would use is one that passes.
    expect(failed.length).toBeGreaterThan(25);
    const clock = new FakeClock();
    const clocked = collect(() => ({ store: withTurnNull(clock), advance: (ms) => clock.advance(ms) }), {
      controlledClock: true,
      wakeUps: false,
      window: false,
    });
    await expect(clocked[0]!.run()).rejects.toThrow(/returned an invalid result: turn null/);
  });

  it('a non-finite retryAfter or now, a granted count beyond the call: the same', async () => {
    const answering = (change: () => object) =>
      collect(
        () => ({
          store: wrapped((inner) => ({
            acquire: async (r: AcquireRequest) => ({ ...(await inner.acquire(r)), ...change() }) as never,
          })),
        }),
        { wakeUps: false, window: false },
      );
    const first = /grants the longest prefix that fits/;
    await expect(
      find(
        answering(() => ({ retryAfter: Number.NaN })),
        first,
      ).run(),
    ).rejects.toThrow(/returned an invalid result: retryAfter NaN with 3 of 5 granted/);
    await expect(
      find(
        answering(() => ({ now: undefined })),
        first,
      ).run(),
    ).rejects.toThrow(/returned an invalid result: now undefined, not a finite epoch time/);
    await expect(
      find(
        answering(() => ({ granted: 6 })),
        first,
      ).run(),
    ).rejects.toThrow(/returned an invalid result: granted 6, not an integer from 0 to 5/);
  });
});

describe('the cost and turn cases say what the store did', () => {
  const costCase = /rejects costs that are not positive integers/;

  it('a store that grants a cost of 0.5: "nothing was thrown (granted 2)"', async () => {
    const cases = collect(
      () => ({
        store: wrapped((inner) => ({
          acquire: (r: AcquireRequest) =>
            inner.acquire({ ...r, costs: r.costs.map((c) => (Number.isSafeInteger(c) && c > 0 ? c : 1)) }),
        })),
      }),
      { wakeUps: false, window: false },
    );
    await expect(find(cases, costCase).run()).rejects.toThrow(
      'a cost of 0.5 must be refused with a RangeError (spending nothing), but acquire() nothing was thrown (granted 2)',
    );
  });

  it('a store that throws a TypeError: "threw TypeError: <its message>"', async () => {
    const cases = collect(
      () => ({
        store: wrapped((inner) => ({
          acquire: (r: AcquireRequest) => {
            if (r.costs.some((c) => !Number.isSafeInteger(c) || c < 1)) throw new TypeError('bad cost');
            return inner.acquire(r);
          },
        })),
      }),
      { wakeUps: false, window: false },
    );
    await expect(find(cases, costCase).run()).rejects.toThrow(
      'a cost of 0.5 must be refused with a RangeError (spending nothing), but acquire() threw TypeError: bad cost',
    );
  });

  it('a store that answers a bad turn (here with `turn: null`): "nothing was thrown", not passed', async () => {
    const clock = new FakeClock();
    const cases = collect(
      () => ({
        store: wrapped(
          (inner) => ({
            acquire: async (r: AcquireRequest) =>
              ({ ...(await inner.acquire({ ...r, turn: undefined })), turn: null }) as never,
          }),
          clock,
        ),
        advance: (ms) => clock.advance(ms),
      }),
      { controlledClock: true, turns: true, wakeUps: false, window: false },
    );
    await expect(find(cases, /rejects a turn that is not a ticket/).run()).rejects.toThrow(
      'a turn of -1 must be refused with a TypeError, but acquire() nothing was thrown (granted 1)',
    );
  });
});

describe('setup mistakes that registered nothing silently', () => {
  it('`turns: true` without `controlledClock`: a TypeError naming both options', () => {
    const run = { describe: () => {}, it: () => {} };
    const make = () => ({ store: memoryStore() });
    expect(() => storeContract('x', make, { ...run, turns: true })).toThrow(TypeError);
    expect(() => storeContract('x', make, { ...run, turns: true })).toThrow(
      /`controlledClock: true` with `turns: true`/,
    );
    expect(() => storeContract('x', make, { ...run, turns: true, controlledClock: true })).not.toThrow();
    expect(() => storeContract('x', make, { ...run, turns: false })).not.toThrow();
  });
});

describe('checkBounds (test/helpers/bounds.ts) refuses times that are not finite numbers', () => {
  const fixed = { limit: 10, interval: 1000, algorithm: 'fixed-window' } as const;
  const gcra = { limit: 10, interval: 1000 } as const;

  it('NaN, ±Infinity, a missing or a string time: a RangeError, for every algorithm (no endless loop)', () => {
    for (const rule of [fixed, gcra, { ...gcra, algorithm: 'sliding-window' as const }]) {
      for (const t of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, undefined, '0']) {
        expect(() =>
          checkBounds(
            [
              { t: 0, cost: 1 },
              { t: t as number, cost: 1 },
            ],
            rule,
          ),
        ).toThrow(RangeError);
      }
    }
    expect(() => checkBounds([{ t: Number.NaN, cost: 1 }], fixed)).toThrow(
      /times are finite epoch ms, got NaN/,
    );
    // Finite times are checked as before.
    expect(
      checkBounds(
        [0, 100, 200].map((t) => ({ t, cost: 1 })),
        gcra,
      ),
    ).toEqual([]);
    expect(
      checkBounds(
        [0, 99].map((t) => ({ t, cost: 1 })),
        gcra,
      ).map((v) => v.bound),
    ).toEqual(['spacing']);
  });
});

describe('the docs and examples say what the suite does', () => {
  const docs = readFileSync(join(root, 'docs/testing.md'), 'utf8');

  it('the real-time cases: as many, and as long, as docs/testing.md and the JSDoc of storeContract say', async () => {
    // On a controlled clock, the cases any store runs move the clock only where they wait
    // (s.pass): the real-time cases of a store without one, and (the sum of the moves) how long
    // each waits in real time.
    const moved = new Map<string, number>();
    let current = '';
    const clock = new FakeClock();
    const cases = collect(
      () => ({
        store: memoryStore({ clock }),
        advance: (ms) => {
          moved.set(current, (moved.get(current) ?? 0) + ms);
          clock.advance(ms);
        },
      }),
      { controlledClock: true, wakeUps: false, window: false },
    );
    const anyStore = new Set(
      collect(() => ({ store: memoryStore() }), { wakeUps: false }).map((c) => c.name),
    );
    for (const c of cases) {
      if (!anyStore.has(c.name)) continue;
      current = c.name;
      await c.run();
    }
    const words = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight'];
    const count = words[moved.size]!;
    expect(docs).toMatch(new RegExp(`without a controlled clock, ${count} wait real time`, 'i'));
    const jsdoc = readFileSync(join(root, 'src/testing.ts'), 'utf8');
    expect(jsdoc).toMatch(new RegExp(`without a controlled clock ${count} wait real time`, 'i'));

    /**
     * The durations a text gives from `start` on: each `"<case name or its start>" <n> s` is that
     * case's wait, and `<word> others under <n> s` are the rest, each shorter.
     */
    const durations = (text: string, start: RegExp): void => {
      const from = text.search(start);
      expect(from).toBeGreaterThanOrEqual(0);
      const part = text.slice(from, from + 900).replace(/\n\s*(\* ?)?/g, ' ');
      const named = new Set<string>();
      for (const [, quoted, seconds] of part.matchAll(/"([^"]+)" (\d+(?:\.\d+)?) s\b/g)) {
        const name = [...moved.keys()].find((n) => n.split(' › ').at(-1)!.startsWith(quoted!));
        expect(name, `"${quoted}" names a real-time case`).toBeDefined();
        named.add(name!);
        expect(Number(seconds) * 1000, `the seconds given for "${quoted}"`).toBeCloseTo(moved.get(name!)!, 6);
      }
      const others = /(\w+) others under (\d+(?:\.\d+)?) s/.exec(part);
      expect(others, 'the cases under a bound').not.toBeNull();
      const rest = [...moved.keys()].filter((n) => !named.has(n));
      expect(words[rest.length]).toBe(others![1]);
      for (const n of rest) expect(moved.get(n)!, n).toBeLessThan(Number(others![2]) * 1000);
    };
    durations(docs, /without a controlled clock, \w+ wait real time/i);
    durations(jsdoc, /without a controlled clock \w+ wait real time/i);
  });

  it('the node:test example runs only itself; both examples give each case 10 s', () => {
    const nodeExample = readFileSync(join(root, 'examples/store-contract/node-test.mjs'), 'utf8');
    const command = /`(node --test [^`]+)`/.exec(nodeExample)?.[1];
    expect(command).toBe('node --test examples/store-contract/node-test.mjs');
    // The page gives the same command, after the build it imports.
    expect(docs).toMatch(/`npm run build` and then\s+`node --test examples\/store-contract\/node-test\.mjs`/);
    expect(nodeExample).toMatch(/it\(name, \{ timeout: 10_000 \}, body\)/);
    const vitestExample = readFileSync(join(root, 'examples/store-contract/vitest.test.mjs'), 'utf8');
    expect(vitestExample).toMatch(/it\(name, body, 10_000\)/);
  });
});
