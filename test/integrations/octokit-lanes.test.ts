/**
 * valve/octokit: what GitHub actually receives when requests wait (a pause, a concurrency slot,
 * several lanes), maxWait as one deadline, and the checks of `limits`, `id` and `key`. Real
 * @octokit/core against a node:http server on loopback, whose answers each test scripts.
 */
import { getEventListeners } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Octokit } from '@octokit/core';
import { afterEach, describe, expect, it } from 'vitest';
import { FeedbackState } from '../../src/feedback/state.js';
import { createValve } from '../../src/index.js';
import { githubLimits, throttling } from '../../src/integrations/octokit/index.js';
import { memoryStore } from '../../src/stores/memory.js';

const ThrottledOctokit = Octokit.plugin(throttling);
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

interface Arrival {
  t: number;
  method: string;
  url: string;
}

/** Answers each request with `answer(req, res, n)` (n: its arrival number); logs arrivals. */
async function serve(answer: (req: IncomingMessage, res: ServerResponse, n: number) => void) {
  let n = 0;
  const log: Arrival[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      log.push({ t: Date.now(), method: req.method ?? '', url: req.url ?? '' });
      answer(req, res, n++);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  servers.push(close);
  return { url, log };
}

const servers: (() => Promise<void>)[] = [];
const clients: { throttle: { close(): Promise<void> } }[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.throttle.close()));
  await Promise.all(servers.splice(0).map((close) => close()));
});

function ok(res: ServerResponse, status = 200): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end('{}');
}

function client(url: string, throttle: Record<string, unknown>) {
  const octokit = new ThrottledOctokit({
    baseUrl: url,
    log: quiet,
    throttle: {
      onRateLimit: () => false,
      onSecondaryRateLimit: () => false,
      store: memoryStore(),
      ...throttle,
    },
  });
  clients.push(octokit);
  return octokit;
}

/** The most arrivals in any window of `ms` (from an arrival on). */
function most(times: readonly number[], ms: number): number {
  let worst = 0;
  for (const a of times) worst = Math.max(worst, times.filter((b) => b >= a && b < a + ms).length);
  return worst;
}

// The rules are sliding windows of 1 s; arrivals are counted in windows of 500 ms, so that a
// grant-to-arrival delay that varies (a new connection, a busy machine stalling the event loop
// for 200 ms: 5 arrivals in 800 ms were seen once under load) cannot make a false alarm, while
// requests released together (what these tests are about) still land in one window.
const WINDOW = 500;

describe('what GitHub receives after waiting', () => {
  it('after a secondary-limit pause, the requests queued meanwhile go out at the rules’ rate, not at once', async () => {
    const github = await serve((_req, res, n) => {
      if (n === 0) {
        res.writeHead(403, { 'content-type': 'application/json', 'retry-after': '1' });
        res.end(JSON.stringify({ message: 'You have exceeded a secondary rate limit' }));
        return;
      }
      ok(res);
    });
    const octokit = client(github.url, {
      limits: { rest: { limit: 4, interval: '1s', algorithm: 'sliding-window' } },
    });
    await expect(octokit.request('GET /first')).rejects.toMatchObject({ status: 403 });
    // The budget is paused for 1 s: these wait for it, and then for the rest rule.
    await Promise.all(Array.from({ length: 12 }, (_, i) => octokit.request(`GET /r${i}`)));
    const after = github.log.slice(1).map((e) => e.t);
    expect(after).toHaveLength(12);
    expect(after[0]!).toBeGreaterThanOrEqual(github.log[0]!.t + 900);
    expect(most(after, WINDOW)).toBeLessThanOrEqual(4);
  });

  it('a POST queued during a core pause takes its content grant only when it can be sent', async () => {
    const reset = () => String(Math.ceil(Date.now() / 1000) + 2);
    const github = await serve((_req, res, n) => {
      if (n === 0) {
        res.writeHead(403, {
          'content-type': 'application/json',
          'x-ratelimit-remaining': '0',
          'x-ratelimit-reset': reset(),
          'x-ratelimit-resource': 'core',
        });
        res.end(JSON.stringify({ message: 'API rate limit exceeded' }));
        return;
      }
      ok(res, 201);
    });
    const octokit = client(github.url, {
      limits: { content: { limit: 2, interval: '1s', algorithm: 'sliding-window' } },
    });
    await expect(octokit.request('GET /first')).rejects.toMatchObject({ status: 403 });
    // Core is paused until the reset (2 to 3 s): the content lane grants nothing meanwhile.
    await Promise.all(
      Array.from({ length: 6 }, (_, i) => octokit.request('POST /repos/o/r/issues', { title: `#${i}` })),
    );
    const posts = github.log.filter((e) => e.method === 'POST').map((e) => e.t);
    expect(posts).toHaveLength(6);
    expect(posts[0]!).toBeGreaterThanOrEqual(github.log[0]!.t + 900);
    expect(most(posts, WINDOW)).toBeLessThanOrEqual(2);
  });

  it('requests waiting for a concurrency slot hold no grant: when answers speed up, the rule still holds', async () => {
    // The first two answers take 1.5 s, the others none: the requests queued behind the two
    // slots meanwhile must not go out at once when the slots free.
    const github = await serve((_req, res, n) => {
      if (n < 2) setTimeout(() => ok(res), 1500);
      else ok(res);
    });
    const octokit = client(github.url, {
      limits: { concurrency: 2, rest: { limit: 4, interval: '1s', algorithm: 'sliding-window' } },
    });
    await Promise.all(Array.from({ length: 14 }, (_, i) => octokit.request(`GET /c${i}`)));
    const times = github.log.map((e) => e.t);
    expect(times).toHaveLength(14);
    expect(most(times, WINDOW)).toBeLessThanOrEqual(4);
  });

  it('an abort while the request holds a slot and waits for a grant frees the slot at once', async () => {
    const github = await serve((_req, res) => ok(res));
    const octokit = client(github.url, {
      limits: { concurrency: 1, core: { limit: 1, interval: '1h', algorithm: 'fixed-window' } },
    });
    await octokit.request('GET /a');
    // Holds the one slot while it waits for the spent core budget.
    const c = new AbortController();
    const waiting = octokit.request('GET /b', { request: { signal: c.signal } });
    await new Promise((r) => setTimeout(r, 50));
    // Search does not spend core: it waits only for the slot.
    const search = octokit.request('GET /search/issues', { q: 'x' });
    await new Promise((r) => setTimeout(r, 50));
    const reason = new Error('gave up');
    c.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    await search;
    expect(github.log.map((e) => e.url.split('?')[0])).toEqual(['/a', '/search/issues']);
  });

  it('close() ends requests waiting for a pause with CLOSED; close({ drain: true }) sends them first', async () => {
    const github = await serve((req, res) => {
      if (req.url === '/limit') {
        res.writeHead(403, {
          'content-type': 'application/json',
          'x-ratelimit-remaining': '0',
          'x-ratelimit-reset': String(Math.ceil(Date.now() / 1000) + 1),
          'x-ratelimit-resource': 'core',
        });
        res.end(JSON.stringify({ message: 'API rate limit exceeded' }));
        return;
      }
      ok(res);
    });
    const octokit = client(github.url, {});
    await expect(octokit.request('GET /limit')).rejects.toMatchObject({ status: 403 });
    const cut = octokit.request('GET /cut');
    await new Promise((r) => setTimeout(r, 20));
    await octokit.throttle.close();
    await expect(cut).rejects.toMatchObject({ name: 'ValveError', code: 'CLOSED' });

    // Two clients of one budget: `drained` learns the pause `pauser` read from the store.
    const store = memoryStore();
    const pauser = client(github.url, { store });
    const drained = client(github.url, { store });
    await expect(pauser.request('GET /limit')).rejects.toMatchObject({ status: 403 });
    const later = drained.request('GET /drained');
    await new Promise((r) => setTimeout(r, 20));
    await drained.throttle.close({ drain: true });
    await expect(later).resolves.toMatchObject({ status: 200 });
    await expect(drained.request('GET /after')).rejects.toMatchObject({ code: 'CLOSED' });
    const limit = github.log.filter((e) => e.url === '/limit')[1]!;
    const sent = github.log.find((e) => e.url === '/drained')!;
    expect(sent.t).toBeGreaterThan(limit.t);
    expect(github.log.map((e) => e.url)).toEqual(['/limit', '/limit', '/drained']);
  });
});

describe('a lane spent by its rules keeps no other lane waiting', () => {
  /** Resolves with what `promise` settled with, or 'pending' after `ms`. */
  const within = <T>(promise: Promise<T>, ms: number) =>
    Promise.race([
      promise.then(
        (value) => ({ settled: 'fulfilled' as const, value }),
        (error: unknown) => ({ settled: 'rejected' as const, error }),
      ),
      new Promise<{ settled: 'pending' }>((r) => setTimeout(() => r({ settled: 'pending' }), ms)),
    ]);

  it('with githubLimits, while `core` is spent for the hour, GraphQL and search requests go out at once', async () => {
    const github = await serve((_req, res) => ok(res));
    const store = memoryStore();
    // Another part of the app (or another process) spent this hour's 5,000 core requests.
    const side = createValve({ id: 'github:core', store, rules: githubLimits.core });
    await side.run(() => undefined, { cost: 5000 });
    const octokit = client(github.url, { store }); // every limit at its default: 100 slots
    const stop = new AbortController();
    // More core requests than slots wait for core's next hour (or for the abort below).
    const waiting = Array.from({ length: 120 }, (_, i) =>
      octokit.request(`GET /repos/o/r/issues/${i}`, { request: { signal: stop.signal } }).catch((e) => e),
    );
    await new Promise((r) => setTimeout(r, 300));
    const graphql = octokit.request('POST /graphql', { query: '{ viewer { login } }' });
    const search = octokit.request('GET /search/issues', { q: 'x' });
    // Before: both waited for a slot until core's window ended (up to an hour).
    const sent = await within(Promise.all([graphql, search]), 10_000);
    stop.abort(new Error('stop'));
    await Promise.all(waiting);
    await side.close();
    expect(sent.settled).toBe('fulfilled');
    // (The core requests go out only if core's hour ended during the test.)
    const others = github.log.map((e) => e.url.split('?')[0]).filter((url) => !url!.startsWith('/repos/'));
    expect(others.sort()).toEqual(['/graphql', '/search/issues']);
  });

  it('POSTs waiting for a spent `core` hold no `content` grant: GitHub sees the content rule kept', async () => {
    const github = await serve((_req, res) => ok(res, 201));
    const octokit = client(github.url, {
      limits: {
        // Scaled-down githubLimits: core a fixed window (as the default), content a sliding window.
        core: { limit: 4, interval: '4s', algorithm: 'fixed-window' },
        content: { limit: 3, interval: '2s', algorithm: 'sliding-window' },
      },
    });
    for (let i = 0; i < 4; i++) await octokit.request(`GET /spend/${i}`);
    // Core is spent until its window turns: before, each POST took its content grant meanwhile
    // and all of them went out together at the turn.
    await Promise.all(
      Array.from({ length: 8 }, (_, i) => octokit.request('POST /repos/o/r/issues', { title: `#${i}` })),
    );
    const posts = github.log.filter((e) => e.method === 'POST').map((e) => e.t);
    expect(posts).toHaveLength(8);
    // 3 per 2 s, counted in windows of 1.9 s (a few ms of delay between grant and arrival).
    expect(most(posts, 1900)).toBeLessThanOrEqual(3);
  });

  it('requests of every kind sharing one slot all go out (no two wait for each other)', async () => {
    const github = await serve((_req, res) => ok(res));
    const octokit = client(github.url, {
      limits: {
        concurrency: 1,
        // Tight enough that requests wait for several lanes' rules while others wait for theirs.
        rest: { limit: 10, interval: '300ms', algorithm: 'sliding-window' },
        content: { limit: 2, interval: '300ms', algorithm: 'sliding-window' },
        graphql: { limit: 6, interval: '300ms', algorithm: 'sliding-window' },
        search: { limit: 2, interval: '300ms', algorithm: 'sliding-window' },
      },
    });
    const kinds = [
      () => octokit.request('GET /repos/o/r'),
      () => octokit.request('POST /repos/o/r/issues', { title: 'x' }),
      () => octokit.request('GET /search/issues', { q: 'x' }),
      () => octokit.request('POST /graphql', { query: '{ viewer { login } }' }),
      () =>
        octokit.request('POST /graphql', { query: 'mutation { addStar(input: {}) { clientMutationId } }' }),
    ];
    const all = within(Promise.all(Array.from({ length: 30 }, (_, i) => kinds[i % kinds.length]!())), 20_000);
    const result = await all;
    expect(result).toMatchObject({ settled: 'fulfilled' });
    expect(github.log).toHaveLength(30);
  });
});

describe('maxWait', () => {
  it('is one deadline for the whole wait of a request, over every lane it passes', async () => {
    // Each wait alone is shorter than maxWait: core (700 ms) and then the one slot (held by a
    // request GitHub answers in 1.5 s). Together they are longer.
    const github = await serve((_req, res) => setTimeout(() => ok(res), 1500));
    const octokit = client(github.url, {
      maxWait: 1000,
      limits: { concurrency: 1, core: { limit: 1, interval: '700ms', algorithm: 'sliding-window' } },
    });
    const first = octokit.request('GET /one');
    const second = octokit.request('GET /two');
    await expect(second).rejects.toMatchObject({ name: 'ValveError', code: 'MAX_WAIT' });
    await first;
    expect(github.log.map((e) => e.url)).toEqual(['/one']);
  });

  it('counts the wait for a pause of a lane', async () => {
    const github = await serve((_req, res, n) => {
      if (n === 0) {
        res.writeHead(403, {
          'content-type': 'application/json',
          'x-ratelimit-remaining': '0',
          'x-ratelimit-reset': String(Math.ceil(Date.now() / 1000) + 30),
          'x-ratelimit-resource': 'core',
        });
        res.end(JSON.stringify({ message: 'API rate limit exceeded' }));
        return;
      }
      ok(res);
    });
    const octokit = client(github.url, { maxWait: 200 });
    await expect(octokit.request('GET /first')).rejects.toMatchObject({ status: 403 });
    const started = Date.now();
    await expect(octokit.request('GET /paused')).rejects.toMatchObject({ code: 'MAX_WAIT' });
    expect(Date.now() - started).toBeLessThan(10_000);
    // Search is not paused.
    await octokit.request('GET /search/issues', { q: 'x' });
    expect(github.log).toHaveLength(2);
  });
});

describe('options checked', () => {
  const handlers = { onRateLimit: () => true, onSecondaryRateLimit: () => true };
  const make = (throttle: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    new ThrottledOctokit({ log: quiet, throttle: { ...handlers, ...throttle }, ...extra });

  it('an unknown lane in `limits` is a TypeError listing the lanes, at construction', () => {
    expect(() => make({ limits: { coer: { limit: 1, interval: '1h' } } })).toThrow(
      /Unknown lane `coer` in `throttle.limits`; it takes `core`, `rest`, `graphql`, `search`, `codeSearch`, `content`, `concurrency`/,
    );
    expect(() => make({ limits: { code_search: { limit: 1, interval: '1m' } } })).toThrow(
      /Unknown lane `code_search` in `throttle.limits` \(GitHub's resource name; the lane is `codeSearch`\)/,
    );
    expect(() => make({ limits: [] })).toThrow(TypeError);
    expect(() => make({ limits: [] })).toThrow(/`throttle.limits` to be an object/);
    expect(() =>
      make({ limits: { codeSearch: { limit: 1, interval: '1m' }, concurrency: 3 } }),
    ).not.toThrow();
  });

  it('what a `limits` function returns is checked when it is used: the request rejects naming it', async () => {
    const github = await serve((_req, res) => ok(res));
    const typo = client(github.url, { limits: () => ({ cor: { limit: 1, interval: '1h' } }) });
    await expect(typo.request('GET /x')).rejects.toThrow(
      /Unknown lane `cor` in the result of `throttle.limits`\("github"\); it takes `core`/,
    );
    const notAnObject = client(github.url, { id: 'b', limits: () => 'x' });
    await expect(notAnObject.request('GET /x')).rejects.toThrow(
      /Expected the result of `throttle.limits`\("b"\) to be an object.*got "x"/,
    );
    const fine = client(github.url, { id: 'c', limits: () => undefined });
    await expect(fine.request('GET /x')).resolves.toMatchObject({ status: 200 });
    expect(github.log).toHaveLength(1);
  });

  it('the budget id `<id>:<key>` is checked: at construction for the installation, per request for `key`', async () => {
    const github = await serve((_req, res) => ok(res));
    // 188 characters: the longest id, alone.
    const long = 'x'.repeat(188);
    expect(() => make({ id: long })).not.toThrow();
    // With the installation it was made for, the budget is too long: said at construction.
    expect(() =>
      make({ id: long }, { auth: { installationId: 42 }, authStrategy: () => ({ hook: () => undefined }) }),
    ).toThrow(/budget id `<throttle.id>:<key>` to be at most 188 characters long.*got 204 characters/);
    // A key from `throttle.key` is known only per request: the request rejects, naming it.
    const keyed = client(github.url, { id: long, key: () => 'installation:42' });
    await expect(keyed.request('GET /x')).rejects.toThrow(
      /budget id `<throttle.id>:<key>` to be at most 188 characters long.*got 204 characters.*`throttle.key` "installation:42"/,
    );
    const braces = client(github.url, { key: () => 'a{b}' });
    await expect(braces.request('GET /x')).rejects.toThrow(TypeError);
    expect(github.log).toHaveLength(0);
  });
});

describe("a caller's signal shared by many requests", () => {
  it('gets one abort listener whatever the number of requests waiting on it (no MaxListenersExceededWarning)', async () => {
    const { url } = await serve((_req, res) => ok(res, 201));
    const octokit = client(url, {
      limits: { content: { limit: 2, interval: '1h', algorithm: 'fixed-window' } },
    });
    const listeners = async (n: number) => {
      const controller = new AbortController();
      const posts = Array.from({ length: n }, (_, i) =>
        octokit
          .request('POST /repos/o/r/issues', { title: `#${i}`, request: { signal: controller.signal } })
          .catch(() => undefined),
      );
      await new Promise((r) => setTimeout(r, 300));
      const count = getEventListeners(controller.signal, 'abort').length;
      controller.abort(new Error('stop'));
      await Promise.all(posts);
      return { count, after: getEventListeners(controller.signal, 'abort').length };
    };
    // The content budget (2 per hour) is spent by the first run's first two requests.
    const twelve = await listeners(12);
    const thirty = await listeners(30);
    // One for valve/octokit's waits, one for valve's own queue: not one per request.
    expect(thirty.count).toBe(twelve.count);
    expect(twelve.count).toBeLessThanOrEqual(2);
    expect(twelve.after).toBe(0);
    expect(thirty.after).toBe(0);
  });
});

describe('requests in flight', () => {
  // The audit's suspicion: a job that settles LEASE_LOST after it was sent never ended its
  // in-flight record, so later answers would count a phantom request in flight. An attempt
  // counts only the requests started after it (ahead()): one left behind, started earlier,
  // is never among them. (The record is now ended on that path too.)
  it('a request left in flight does not count for the answers of later requests', () => {
    const state = new FeedbackState();
    const phantom = state.begin();
    const later = state.begin();
    expect(phantom).toBe(0);
    expect(state.ahead(later)).toBe(0);
    const third = state.begin();
    expect(state.ahead(later)).toBe(1);
    state.end(later);
    expect(state.ahead(third)).toBe(0);
  });
});
