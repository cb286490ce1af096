/**
 * valve/octokit with the real @octokit/core, @octokit/rest and @octokit/auth-app against a fake
 * GitHub (test/helpers/fake-github.ts). The first block holds @octokit/plugin-throttling's own
 * behavioural expectations for a drop-in replacement; the rest is what valve adds.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createAppAuth } from '@octokit/auth-app';
import { Octokit } from '@octokit/core';
import { Octokit as RestOctokit } from '@octokit/rest';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type ThrottleControl, throttling } from '../../src/integrations/octokit/index.js';
import { classify, LANE_ORDER } from '../../src/integrations/octokit/limits.js';
import { memoryStore } from '../../src/stores/memory.js';
import {
  type FakeGitHub,
  type FakeGitHubOptions,
  type ScriptedAnswer,
  startFakeGitHub,
} from '../helpers/fake-github.js';

const ThrottledOctokit = Octokit.plugin(throttling);
let key: string | undefined;
/** An RSA key for @octokit/auth-app's JWT (nothing checks it). */
function appKey(): string {
  key ??= generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  }).privateKey;
  return key;
}
const SECONDARY = 'You have exceeded a secondary rate limit';
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

let github: FakeGitHub;
beforeAll(async () => {
  github = await startFakeGitHub();
});
afterAll(() => github.stop());
/** True once a test replaced the fake GitHub with other limits: the next test gets the default one back. */
let customized = false;
afterEach(async () => {
  if (!customized) return github.reset();
  await github.stop();
  github = await startFakeGitHub();
  customized = false;
});

/** Replaces the fake GitHub by one with other limits, for this test only. */
async function restartGitHub(options: FakeGitHubOptions): Promise<void> {
  await github.stop();
  github = await startFakeGitHub(options);
  customized = true;
}

/** A fresh id per test, so budgets and pauses never carry over. */
let n = 0;
const freshId = () => `t${++n}-${Math.random().toString(36).slice(2, 8)}`;

interface Call {
  retryAfter: number;
  method: string;
  url: string;
  retryCountOption: unknown;
  retryCount: number;
  same: boolean;
}

function octokitWith(throttleOptions: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const {
    onRateLimit = () => true,
    onSecondaryRateLimit = () => true,
    ...throttle
  } = throttleOptions as {
    onRateLimit?: (retryCount: number) => unknown;
    onSecondaryRateLimit?: (retryCount: number) => unknown;
  };
  const calls: { primary: Call[]; secondary: Call[] } = { primary: [], secondary: [] };
  const record =
    (into: Call[], answer: (retryCount: number) => unknown) =>
    (
      retryAfter: number,
      options: { method: string; url: string; request?: { retryCount?: number } },
      o: unknown,
      retryCount: number,
    ) => {
      into.push({
        retryAfter,
        method: options.method,
        url: options.url,
        retryCountOption: options.request?.retryCount,
        retryCount,
        same: o === octokit,
      });
      return answer(retryCount);
    };
  const octokit = new ThrottledOctokit({
    baseUrl: github.url,
    log: quiet,
    throttle: {
      id: freshId(),
      onRateLimit: record(calls.primary, onRateLimit),
      onSecondaryRateLimit: record(calls.secondary, onSecondaryRateLimit),
      ...throttle,
    },
    ...extra,
  });
  return { octokit, calls };
}

const secondaryAnswer = (status: number, retryAfter: string): ScriptedAnswer => ({
  status,
  headers: { 'retry-after': retryAfter },
  body: { message: SECONDARY },
});

describe('drop-in for @octokit/plugin-throttling', () => {
  it('requires both handlers (the same Error), unless disabled', () => {
    const message = 'You must pass the onSecondaryRateLimit and onRateLimit error handlers';
    expect(() => new ThrottledOctokit()).toThrow(message);
    expect(() => new ThrottledOctokit({ throttle: {} as never })).toThrow(message);
    expect(() => new ThrottledOctokit({ throttle: { onRateLimit: () => true } as never })).toThrow(message);
    expect(
      () => new ThrottledOctokit({ throttle: { onSecondaryRateLimit: 5, onRateLimit: () => 1 } as never }),
    ).toThrow(message);
    expect(() => new ThrottledOctokit({ throttle: { enabled: false } })).not.toThrow();
  });

  it('names the replacement of a Bottleneck-only option, and rejects unknown ones', () => {
    const handlers = { onRateLimit: () => true, onSecondaryRateLimit: () => true };
    expect(() => new ThrottledOctokit({ throttle: { ...handlers, connection: {} } as never })).toThrow(
      /`throttle.connection`.*store: redisStore/,
    );
    expect(() => new ThrottledOctokit({ throttle: { ...handlers, write: {} } as never })).toThrow(
      /limits.content/,
    );
    expect(() => new ThrottledOctokit({ throttle: { ...handlers, retryAfterBaseValue: -1 } })).toThrow(
      RangeError,
    );
    expect(() => new ThrottledOctokit({ throttle: { ...handlers, limit: 1 } as never })).toThrow(TypeError);
    // A bad rule is named at construction.
    expect(
      () =>
        new ThrottledOctokit({ throttle: { ...handlers, limits: { core: { limit: 0, interval: '1h' } } } }),
    ).toThrow(RangeError);
    // plugin-throttling's Redis TTL is accepted (and has nothing to do).
    expect(() => new ThrottledOctokit({ throttle: { ...handlers, timeout: 1000 } })).not.toThrow();
    // The id is checked at construction, naming `throttle.id`, with room for the lanes' suffixes.
    const withId = (id: unknown) => () => new ThrottledOctokit({ throttle: { ...handlers, id } as never });
    expect(withId('')).toThrow(/`throttle.id` to be 1 to 200 characters long, got 0/);
    expect(withId('a{b}')).toThrow(/`throttle.id` to contain no '\{' or '\}'/);
    expect(withId(null)).toThrow(/`throttle.id`.*got null/);
    expect(withId('x'.repeat(189))).toThrow(/`throttle.id` to be at most 188 characters long.*got 189/);
    expect(withId('x'.repeat(188))).not.toThrow();
  });

  it('enabled: false sends requests as they come, and never retries', async () => {
    const octokit = new ThrottledOctokit({ baseUrl: github.url, log: quiet, throttle: { enabled: false } });
    github.script(secondaryAnswer(403, '1'));
    await expect(octokit.request('GET /route')).rejects.toMatchObject({ status: 403 });
    expect(github.log).toHaveLength(1);
  });

  for (const status of [403, 429]) {
    it(`retries a secondary limit (${status}) and succeeds, after retryAfter × retryAfterBaseValue`, async () => {
      const { octokit, calls } = octokitWith({ fallbackSecondaryRateRetryAfter: 0, retryAfterBaseValue: 50 });
      github.script(secondaryAnswer(status, '1'));
      const res = await octokit.request('GET /route');
      expect(res.status).toBe(200);
      expect(calls.secondary).toEqual([
        { retryAfter: 1, method: 'GET', url: '/route', retryCountOption: 0, retryCount: 0, same: true },
      ]);
      expect(calls.primary).toEqual([]);
      expect(github.log.map((e) => e.status)).toEqual([status, 200]);
      // The retry waited for the pause (1 × 50 ms).
      expect(github.log[1]!.t - github.log[0]!.t).toBeGreaterThanOrEqual(45);
    });

    it(`retries a secondary limit (${status}) twice and then fails with the final error`, async () => {
      const { octokit, calls } = octokitWith({ fallbackSecondaryRateRetryAfter: 0, retryAfterBaseValue: 50 });
      github.script(secondaryAnswer(status, '1'), secondaryAnswer(status, '2'), {
        status: 404,
        headers: { 'retry-after': '3' },
        body: { message: 'Nope!' },
      });
      await expect(octokit.request('GET /route')).rejects.toMatchObject({ status: 404, message: 'Nope!' });
      expect(calls.secondary.map((c) => [c.retryAfter, c.retryCountOption, c.retryCount])).toEqual([
        [1, 0, 0],
        [2, 1, 1],
      ]);
      expect(github.log).toHaveLength(3);
      expect(github.log[2]!.t - github.log[1]!.t).toBeGreaterThanOrEqual(95);
    });

    it(`retries a primary limit (${status} with remaining 0)`, async () => {
      const { octokit, calls } = octokitWith({});
      github.script({
        status,
        headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '123' },
        body: {},
      });
      const res = await octokit.request('GET /route');
      expect(res.status).toBe(200);
      // A reset in the past: retryAfter 0, retried at once.
      expect(calls.primary.map((c) => [c.retryAfter, c.retryCount])).toEqual([[0, 0]]);
      expect(calls.secondary).toEqual([]);
    });
  }

  it('passes retryAfter one second past x-ratelimit-reset to onRateLimit', async () => {
    const { octokit, calls } = octokitWith({ onRateLimit: () => false });
    const reset = Math.round(Date.now() / 1000) + 30;
    github.script({
      status: 403,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(reset) },
    });
    await expect(octokit.request('GET /route')).rejects.toMatchObject({ status: 403 });
    expect(calls.primary).toHaveLength(1);
    expect(calls.primary[0]!.retryAfter).toBeGreaterThanOrEqual(29);
    expect(calls.primary[0]!.retryAfter).toBeLessThanOrEqual(32);
  });

  it('uses fallbackSecondaryRateRetryAfter when a secondary limit has no retry-after', async () => {
    const { octokit, calls } = octokitWith({ fallbackSecondaryRateRetryAfter: 2, retryAfterBaseValue: 10 });
    github.script({ status: 403, body: { message: SECONDARY } });
    await octokit.request('GET /route');
    expect(calls.secondary.map((c) => c.retryAfter)).toEqual([2]);
  });

  it('does not treat a 403 without any rate-limit sign as a limit', async () => {
    const { octokit, calls } = octokitWith({});
    github.script({ status: 403, body: { message: 'Resource not accessible by integration' } });
    await expect(octokit.request('GET /route')).rejects.toMatchObject({ status: 403 });
    expect(calls.primary.length + calls.secondary.length).toBe(0);
    expect(github.log).toHaveLength(1);
  });

  it('hands the final error to the caller when the handler declines', async () => {
    const { octokit, calls } = octokitWith({ onSecondaryRateLimit: () => false });
    github.script(secondaryAnswer(429, '1'));
    await expect(octokit.request('GET /route')).rejects.toMatchObject({ status: 429 });
    expect(github.log).toHaveLength(1);
    void calls;
  });

  it('retries a GraphQL RATE_LIMITED error in a 200 body (whatever the headers)', async () => {
    const { octokit, calls } = octokitWith({});
    github.script({
      status: 200,
      headers: { 'x-ratelimit-remaining': '1', 'x-ratelimit-reset': '123' },
      body: { errors: [{ type: 'RATE_LIMITED' }] },
    });
    const res = await octokit.request('POST /graphql', { query: '{ viewer { login } }' });
    expect(res.data).toMatchObject({ data: { viewer: { login: 'anonymous' } } });
    expect(calls.primary.map((c) => [c.method, c.url, c.retryCount])).toEqual([['POST', '/graphql', 0]]);
    expect(github.log).toHaveLength(2);
  });

  it('throws "GraphQL Rate Limit Exceeded" when onRateLimit declines a GraphQL RATE_LIMITED', async () => {
    const { octokit } = octokitWith({ onRateLimit: () => false });
    github.script({ status: 200, body: { errors: [{ type: 'RATE_LIMITED' }] } });
    await expect(octokit.request('POST /graphql', { query: '{ viewer { login } }' })).rejects.toThrow(
      'GraphQL Rate Limit Exceeded',
    );
  });

  it('does not retry other GraphQL errors, nor a 401', async () => {
    const { octokit, calls } = octokitWith({});
    github.script({
      status: 200,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '123' },
      body: { errors: [{ type: 'HELLO_WORLD' }] },
    });
    const res = await octokit.request('POST /graphql', { query: '{ viewer { login } }' });
    expect(res.data).toEqual({ errors: [{ type: 'HELLO_WORLD' }] });
    github.script({
      status: 401,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '123' },
      body: { message: 'Bad credentials' },
    });
    await expect(octokit.request('POST /graphql', { query: '{ viewer { login } }' })).rejects.toMatchObject({
      status: 401,
    });
    expect(calls.primary.length + calls.secondary.length).toBe(0);
    expect(github.log).toHaveLength(2);
  });

  it('retries a secondary limit on GraphQL (403)', async () => {
    const { octokit, calls } = octokitWith({ retryAfterBaseValue: 20 });
    github.script(secondaryAnswer(403, '1'));
    const res = await octokit.request('POST /graphql', { query: '{ viewer { login } }' });
    expect(res.status).toBe(200);
    expect(calls.secondary).toHaveLength(1);
  });

  it('does not leak retryCount between requests', async () => {
    const { octokit, calls } = octokitWith({ retryAfterBaseValue: 5 });
    for (let i = 0; i < 3; i++) {
      github.script(secondaryAnswer(403, '1'), secondaryAnswer(403, '1'));
      await octokit.request('GET /nope-nope-ok');
    }
    expect(calls.secondary.map((c) => c.retryCount)).toEqual([0, 1, 0, 1, 0, 1]);
  });

  it('does not deadlock when @octokit/auth-app fetches an installation token while requests queue', async () => {
    const privateKey = appKey();
    const octokit = new ThrottledOctokit({
      baseUrl: github.url,
      log: quiet,
      authStrategy: createAppAuth,
      auth: { appId: 123, privateKey, installationId: 456 },
      // One request at a time: the token request must not wait behind the requests that need it.
      throttle: {
        id: freshId(),
        limits: { concurrency: 1 },
        onRateLimit: () => true,
        onSecondaryRateLimit: () => true,
      },
    });
    const routes = Array.from({ length: 10 }, (_, i) => `/route${String(i).padStart(2, '0')}`);
    await Promise.all(routes.map((route) => octokit.request(`GET ${route}`)));
    expect(github.log.map((e) => `${e.method} ${e.path}`)).toEqual([
      'POST /app/installations/456/access_tokens',
      ...routes.map((r) => `GET ${r}`),
    ]);
    expect(github.log.slice(1).every((e) => e.token === 'ghs_456')).toBe(true);
  });
});

describe('what valve adds', () => {
  it('an aborted call rejects promptly and never reaches the server', async () => {
    const { octokit } = octokitWith({
      limits: { core: { limit: 1, interval: '1h', algorithm: 'fixed-window' } },
    });
    await octokit.request('GET /first');
    const controller = new AbortController();
    const queued = octokit.request('GET /queued', { request: { signal: controller.signal } });
    const reason = new Error('caller gave up');
    setTimeout(() => controller.abort(reason), 20);
    const started = Date.now();
    await expect(queued).rejects.toBe(reason);
    expect(Date.now() - started).toBeLessThan(5_000);
    // Already aborted: rejects at once too.
    await expect(
      octokit.request('GET /never', { request: { signal: AbortSignal.abort(reason) } }),
    ).rejects.toBe(reason);
    expect(github.log.map((e) => e.path)).toEqual(['/first']);
  });

  it('maxWait bounds the wait for a start: MAX_WAIT, and the request is never sent', async () => {
    const { octokit } = octokitWith({
      maxWait: 50,
      limits: { core: { limit: 1, interval: '1h', algorithm: 'fixed-window' } },
    });
    await octokit.request('GET /one');
    await expect(octokit.request('GET /two')).rejects.toMatchObject({ name: 'ValveError', code: 'MAX_WAIT' });
    expect(github.log.map((e) => e.path)).toEqual(['/one']);
  });

  it('octokit.throttle.close() ends queued requests with CLOSED, and later ones', async () => {
    const { octokit } = octokitWith({
      limits: { core: { limit: 1, interval: '1h', algorithm: 'fixed-window' } },
    });
    await octokit.request('GET /one');
    const queued = octokit.request('GET /two');
    await octokit.throttle.close();
    await expect(queued).rejects.toMatchObject({ name: 'ValveError', code: 'CLOSED' });
    await expect(octokit.request('GET /three')).rejects.toMatchObject({ code: 'CLOSED' });
    expect(github.log.map((e) => e.path)).toEqual(['/one']);
  });

  it('keeps GitHub limits as rules: content creation, REST points and concurrency', async () => {
    const { octokit } = octokitWith({
      limits: {
        content: { limit: 2, interval: '1h', algorithm: 'fixed-window' },
        rest: { limit: 100, interval: '1h', algorithm: 'fixed-window' },
      },
    });
    const controller = new AbortController();
    const posts = [1, 2, 3].map((i) =>
      octokit.request('POST /repos/o/r/issues', { title: `#${i}`, request: { signal: controller.signal } }),
    );
    await Promise.all([posts[0], posts[1], octokit.request('GET /repos/o/r')]);
    // The third issue waits for the content budget; reads do not.
    await octokit.request('GET /repos/o/r/issues');
    controller.abort(new Error('stop'));
    await expect(posts[2]).rejects.toThrow('stop');
    expect(github.log.filter((e) => e.method === 'POST')).toHaveLength(2);

    // POST costs 5 points, GET 1: 10 points leave room for one POST and 5 GETs.
    const points = octokitWith({
      limits: { rest: { limit: 10, interval: '1h', algorithm: 'fixed-window' } },
    }).octokit;
    github.reset();
    await points.request('POST /repos/o/r/issues', { title: 'x' });
    await Promise.all(Array.from({ length: 5 }, () => points.request('GET /a')));
    const late = new AbortController();
    const sixth = points.request('GET /b', { request: { signal: late.signal } });
    await new Promise((r) => setTimeout(r, 100));
    late.abort(new Error('out of points'));
    await expect(sixth).rejects.toThrow('out of points');
    expect(github.log).toHaveLength(6);
  });

  it('retries at the original queue position: ahead of requests that came after it', async () => {
    const { octokit, calls } = octokitWith({ retryAfterBaseValue: 20, limits: { concurrency: 1 } });
    github.script(secondaryAnswer(403, '1'));
    await Promise.all(['/a', '/b', '/c'].map((path) => octokit.request(`GET ${path}`)));
    expect(calls.secondary).toHaveLength(1);
    expect(github.log.map((e) => `${e.path} ${e.status}`)).toEqual(['/a 403', '/a 200', '/b 200', '/c 200']);
  });

  it('a spent resource pauses its own lane; a secondary limit pauses the whole budget, whatever the handler decides', async () => {
    const { octokit } = octokitWith({ onRateLimit: () => false, onSecondaryRateLimit: () => false });
    const reset = String(Math.ceil(Date.now() / 1000) + 30);
    github.script({
      status: 403,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': reset, 'x-ratelimit-resource': 'search' },
      body: { message: 'API rate limit exceeded' },
    });
    await expect(octokit.request('GET /search/issues', { q: 'x' })).rejects.toMatchObject({ status: 403 });
    // Search waits for its reset; the core budget does not.
    const c = new AbortController();
    const search = octokit.request('GET /search/issues', { q: 'y', request: { signal: c.signal } });
    await octokit.request('GET /repos/o/r');
    c.abort(new Error('search still paused'));
    await expect(search).rejects.toThrow('search still paused');
    expect(github.log.map((e) => e.path)).toEqual(['/search/issues', '/repos/o/r']);

    github.script(secondaryAnswer(403, '30'));
    await expect(octokit.request('GET /repos/o/r/issues')).rejects.toMatchObject({ status: 403 });
    const d = new AbortController();
    const next = octokit.request('GET /repos/o/r', { request: { signal: d.signal } });
    setTimeout(() => d.abort(new Error('budget still paused')), 150);
    await expect(next).rejects.toThrow('budget still paused');
    expect(github.log).toHaveLength(3);
  });

  describe('a resource valve has no lane for (code_scanning_upload, dependency_snapshots…)', () => {
    // Typed as string: the tests send only the parameters the limits need.
    const SARIFS: string = 'POST /repos/{owner}/{repo}/code-scanning/sarifs';
    const spent = (status: number, resource: string): ScriptedAnswer => ({
      status,
      headers: {
        'x-ratelimit-remaining': '0',
        'x-ratelimit-reset': String(Math.ceil(Date.now() / 1000) + 30),
        'x-ratelimit-resource': resource,
      },
      body: status === 200 ? {} : { message: 'API rate limit exceeded' },
    });

    it('a 403 for it pauses no lane: the other requests go at once; requests to its route wait for its reset', async () => {
      const { octokit, calls } = octokitWith({
        onRateLimit: () => false,
        onSecondaryRateLimit: () => false,
        maxWait: '1s',
      });
      github.script(spent(403, 'code_scanning_upload'));
      await expect(octokit.request(SARIFS, { owner: 'o', repo: 'r', sarif: 'x' })).rejects.toMatchObject({
        status: 403,
      });
      expect(calls.primary.map((c) => c.retryAfter)).toEqual([expect.any(Number)]);
      expect(calls.primary[0]!.retryAfter).toBeGreaterThan(25);
      // `core` is not spent: REST reads and writes go out (within maxWait: they would wait 30 s).
      await octokit.request('GET /repos/{owner}/{repo}/issues', { owner: 'o', repo: 'r' });
      await octokit.request('POST /repos/{owner}/{repo}/issues', { owner: 'o', repo: 'r', title: 't' });
      // The route that met the limit (in another repository too) waits for the reset: never sent.
      await expect(octokit.request(SARIFS, { owner: 'o', repo: 's', sarif: 'y' })).rejects.toMatchObject({
        code: 'MAX_WAIT',
      });
      expect(github.log.map((e) => `${e.method} ${e.path} ${e.status}`)).toEqual([
        'POST /repos/o/r/code-scanning/sarifs 403',
        'GET /repos/o/r/issues 200',
        'POST /repos/o/r/issues 201',
      ]);
    });

    it('a retried 429 waits retryAfter × retryAfterBaseValue, as do later requests to its route; the rest go first', async () => {
      const { octokit, calls } = octokitWith({
        onRateLimit: (retryCount: number) => retryCount < 1,
        retryAfterBaseValue: 20,
      });
      github.script(spent(429, 'code_scanning_upload'));
      const first = octokit.request(SARIFS, { owner: 'o', repo: 'r', sarif: 'x' });
      while (calls.primary.length === 0) await new Promise((r) => setTimeout(r, 5));
      const later = octokit.request(SARIFS, { owner: 'o', repo: 'r', sarif: 'y' });
      const issues = octokit.request('GET /repos/{owner}/{repo}/issues', { owner: 'o', repo: 'r' });
      await Promise.all([first, later, issues]);
      const wait = calls.primary[0]!.retryAfter * 20;
      const [met, ...rest] = github.log;
      expect(rest.map((e) => `${e.method} ${e.path} ${e.status}`)).toEqual([
        'GET /repos/o/r/issues 200',
        'POST /repos/o/r/code-scanning/sarifs 201',
        'POST /repos/o/r/code-scanning/sarifs 201',
      ]);
      for (const e of rest.slice(1)) expect(e.t).toBeGreaterThanOrEqual(met!.t + wait);
      expect(calls.primary).toHaveLength(1);
    });

    it('a 200 that spends it pauses its route the same way, and no lane', async () => {
      const { octokit } = octokitWith({ maxWait: '1s' });
      const snapshots: string = 'POST /repos/{owner}/{repo}/dependency-graph/snapshots';
      github.script(spent(200, 'dependency_snapshots'));
      await octokit.request(snapshots, { owner: 'o', repo: 'r' });
      await octokit.request('POST /repos/{owner}/{repo}/issues', { owner: 'o', repo: 'r', title: 't' });
      await expect(octokit.request(snapshots, { owner: 'o', repo: 'r' })).rejects.toMatchObject({
        code: 'MAX_WAIT',
      });
      expect(github.log.map((e) => `${e.method} ${e.path}`)).toEqual([
        'POST /repos/o/r/dependency-graph/snapshots',
        'POST /repos/o/r/issues',
      ]);
    });
  });

  it('a 200 with remaining 0 and a reset a year away pauses its lane an hour, with one warning', async () => {
    const warnings: string[] = [];
    const store = memoryStore();
    const id = freshId();
    const octokit = new ThrottledOctokit({
      baseUrl: github.url,
      log: { ...quiet, warn: (m: string) => warnings.push(String(m)) },
      throttle: { id, store, onRateLimit: () => false, onSecondaryRateLimit: () => false },
    });
    const year = Math.ceil(Date.now() / 1000) + 365 * 86_400;
    github.script({
      status: 200,
      headers: {
        'x-ratelimit-remaining': '0',
        'x-ratelimit-reset': String(year),
        'x-ratelimit-resource': 'core',
      },
    });
    await octokit.request('GET /repos/o/r');
    let answer = { pausedUntil: null as number | null };
    for (let i = 0; i < 50 && answer.pausedUntil === null; i++) {
      await new Promise((r) => setTimeout(r, 5));
      answer = store.acquire({ id: `${id}:core`, rules: [], costs: [1], count: 1 }) as typeof answer;
    }
    await (octokit as unknown as { throttle: ThrottleControl }).throttle.close();
    const paused = (answer.pausedUntil ?? 0) - Date.now();
    expect(paused).toBeGreaterThan(3_590_000);
    expect(paused).toBeLessThanOrEqual(3_600_000);
    expect(warnings.filter((w) => w.includes('valve/octokit'))).toEqual([
      expect.stringMatching(
        /asked for a 3153\d{7} ms wait \(x-ratelimit-reset\); the core lane pauses for 3600000 ms/,
      ),
    ]);
  });

  it('a secondary limit asking for a year, or for 1e12 s, pauses at most an hour, with a warning', async () => {
    const warnings: string[] = [];
    const paused = async (retryAfter: string) => {
      const store = memoryStore();
      const id = freshId();
      const octokit = new ThrottledOctokit({
        baseUrl: github.url,
        log: { ...quiet, warn: (m: string) => warnings.push(String(m)) },
        throttle: { id, store, onRateLimit: () => false, onSecondaryRateLimit: () => false },
      });
      github.script(secondaryAnswer(403, retryAfter));
      await expect(octokit.request('GET /repos/o/r')).rejects.toMatchObject({ status: 403 });
      // The pause is written in the background: the store holds it once that write is done.
      let answer = { pausedUntil: null as number | null };
      for (let i = 0; i < 50 && answer.pausedUntil === null; i++) {
        await new Promise((r) => setTimeout(r, 5));
        answer = store.acquire({ id, rules: [], costs: [1], count: 1 }) as typeof answer;
      }
      await (octokit as unknown as { throttle: ThrottleControl }).throttle.close();
      return (answer.pausedUntil ?? 0) - Date.now();
    };
    const year = await paused(String(365 * 86_400));
    expect(year).toBeGreaterThan(3_590_000);
    expect(year).toBeLessThanOrEqual(3_600_000);
    expect(warnings.filter((w) => w.includes('valve/octokit'))).toEqual([
      expect.stringMatching(
        /asked for a 31536000000 ms wait \(retry-after\); the budget pauses for 3600000 ms/,
      ),
    ]);
    // Not a plain decimal: read as absent, so fallbackSecondaryRateRetryAfter (60 s) applies.
    const odd = await paused('1e12');
    expect(odd).toBeGreaterThan(59_000);
    expect(odd).toBeLessThanOrEqual(60_000);
  });

  describe('a retry-after or reset too large for a number (400 digits)', () => {
    const huge = '9'.repeat(400);
    /**
     * Sends one request GitHub answers with `answer`; returns what the handler got, the warnings,
     * how long the store holds the pause of `lane` (0: none), and whether a next request is sent.
     */
    const answered = async (answer: ScriptedAnswer, lane: string) => {
      const warnings: string[] = [];
      const handled: number[] = [];
      const store = memoryStore();
      const id = freshId();
      const handler = (retryAfter: number) => {
        handled.push(retryAfter);
        return false;
      };
      const octokit = new ThrottledOctokit({
        baseUrl: github.url,
        log: { ...quiet, warn: (m: string) => warnings.push(String(m)) },
        throttle: { id, store, maxWait: 200, onRateLimit: handler, onSecondaryRateLimit: handler },
      });
      github.script(answer);
      await octokit.request('GET /repos/o/r').catch(() => undefined);
      const next = await octokit.request('GET /repos/o/r2').then(
        () => 'sent',
        (e: { code?: string }) => e.code,
      );
      const held = store.acquire({
        id: lane === 'all' ? id : `${id}:${lane}`,
        rules: [],
        costs: [1],
        count: 1,
      });
      await (octokit as unknown as { throttle: ThrottleControl }).throttle.close();
      const until = (held as { pausedUntil: number | null }).pausedUntil;
      return {
        handled,
        next,
        paused: until === null ? 0 : until - Date.now(),
        warnings: warnings.filter((w) => w.includes('valve/octokit')),
      };
    };
    const spentCore = (status: number, reset: string): ScriptedAnswer => ({
      status,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': reset, 'x-ratelimit-resource': 'core' },
      body: status === 200 ? {} : { message: 'API rate limit exceeded' },
    });
    const anHour = (got: Awaited<ReturnType<typeof answered>>, name: string, what: string) => {
      expect(got.next).toBe('MAX_WAIT');
      expect(got.paused).toBeGreaterThan(3_590_000);
      expect(got.paused).toBeLessThanOrEqual(3_600_000);
      expect(got.warnings).toEqual([
        `valve/octokit: GitHub asked for a wait too long to count (${name}); ${what} for 3600000 ms, the most it pauses`,
      ]);
    };

    it('as x-ratelimit-reset of a 403 or a 200 that spends the last unit: core pauses an hour, with a warning', async () => {
      const denied = await answered(spentCore(403, huge), 'core');
      anHour(denied, 'x-ratelimit-reset', 'the core lane pauses');
      // The handler's retryAfter stays a finite number: the largest one.
      expect(denied.handled).toEqual([Number.MAX_VALUE]);
      anHour(await answered(spentCore(200, huge), 'core'), 'x-ratelimit-reset', 'the core lane pauses');
    });

    it('as retry-after of a secondary limit: the budget pauses an hour, with a warning, not the 60 s fallback', async () => {
      const got = await answered(secondaryAnswer(403, huge), 'all');
      anHour(got, 'retry-after', 'the budget pauses');
      expect(got.handled).toEqual([Number.MAX_VALUE]);
    });

    it('the text `Infinity` is no number of seconds: an absent reset (no pause), an absent retry-after (the fallback)', async () => {
      for (const status of [403, 200]) {
        const got = await answered(spentCore(status, 'Infinity'), 'core');
        expect(got).toMatchObject({ next: 'sent', paused: 0, warnings: [] });
        expect(got.handled).toEqual(status === 403 ? [0] : []);
      }
      const secondary = await answered(secondaryAnswer(403, 'Infinity'), 'all');
      expect(secondary).toMatchObject({ next: 'MAX_WAIT', handled: [60], warnings: [] });
      expect(secondary.paused).toBeGreaterThan(59_000);
      expect(secondary.paused).toBeLessThanOrEqual(60_000);
    });
  });

  it('holds at most `concurrency` requests in flight', async () => {
    await restartGitHub({ latencyMs: 30 });
    const { octokit } = octokitWith({ limits: { concurrency: 3 } });
    await Promise.all(Array.from({ length: 15 }, (_, i) => octokit.request(`GET /c/${i}`)));
    expect(github.log).toHaveLength(15);
    expect(github.maxInFlight()).toBe(3);
  });

  it('pauses on a spent primary limit and sends nothing inside the announced reset', async () => {
    await restartGitHub({ limit: 5, windowMs: 1000, latencyMs: 5 });
    // valve's own core rule is looser than the server: GitHub's answers are what pauses.
    const sent: { t: number; token: string }[] = [];
    const answers: { t: number; until: number }[] = [];
    const fetchSpy = async (url: string, init: RequestInit) => {
      sent.push({ t: Date.now(), token: 'anonymous' });
      const res = await fetch(url, init);
      const reset = Number(res.headers.get('x-ratelimit-reset'));
      if (res.headers.get('x-ratelimit-remaining') === '0')
        answers.push({ t: Date.now(), until: reset * 1000 });
      return res;
    };
    const { octokit, calls } = octokitWith(
      { limits: { core: { limit: 1000, interval: '1h', algorithm: 'fixed-window' } } },
      { request: { fetch: fetchSpy } },
    );
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => octokit.request(`GET /p/${i}`)),
    );
    expect(results.every((r) => r.status === 'fulfilled')).toBe(true);
    // A request sent after an answer with remaining 0 was read, before its reset, is a violation.
    const violations = sent.filter((s) => answers.some((a) => s.t > a.t && s.t < a.until));
    expect(violations).toEqual([]);
    expect(github.log.filter((e) => e.status === 200)).toHaveLength(12);
    // Only requests already in flight when the last unit was spent met the 403.
    expect(calls.primary.length).toBe(github.limited());
  });

  it('a 200 that spends the last unit pauses until the reset: the next request never meets the 403', async () => {
    await restartGitHub({ limit: 3, windowMs: 1000 });
    const { octokit, calls } = octokitWith({});
    for (let i = 0; i < 3; i++) await octokit.request(`GET /s/${i}`);
    await octokit.request('GET /s/3');
    expect(github.limited()).toBe(0);
    expect(calls.primary).toEqual([]);
    // The fourth waited for the end of the window the first opened.
    expect(github.log[3]!.t).toBeGreaterThanOrEqual(github.log[0]!.t + 1000);
  });

  it('gives each installation its own budget (Probot-style clients), with per-key limits', async () => {
    const store = memoryStore();
    const id = freshId();
    const fixed = (limit: number) => ({ limit, interval: '1h', algorithm: 'fixed-window' as const });
    // One Octokit per installation, as Probot makes them; the plugin keys each by its installation.
    const make = (installationId: number) =>
      new ThrottledOctokit({
        baseUrl: github.url,
        log: quiet,
        authStrategy: createAppAuth,
        auth: { appId: 1, privateKey: appKey(), installationId },
        throttle: {
          id,
          store,
          limits: (budget: string) => ({ core: fixed(budget === `${id}:installation:2` ? 4 : 2) }),
          onRateLimit: () => true,
          onSecondaryRateLimit: () => true,
        },
      });
    const one = make(1);
    const oneAgain = make(1);
    const two = make(2);
    const c = new AbortController();
    const tries = (o: typeof one, k: number) =>
      Array.from({ length: k }, () =>
        o.request('GET /x', { request: { signal: c.signal } }).then(
          () => 1,
          () => 0,
        ),
      );
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const done = Promise.all([
      Promise.all(tries(one, 3)),
      Promise.all(tries(oneAgain, 3)),
      Promise.all(tries(two, 6)),
    ]);
    // Wait until the six that fit went through, then give up on the rest.
    while (github.log.filter((e) => e.path === '/x').length < 6) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 100));
    c.abort(new Error('stop'));
    const [a, b, d] = await done;
    // Installation 1's budget (2) is shared by its two clients; installation 2 has its own, larger one.
    expect(sum(a) + sum(b)).toBe(2);
    expect(sum(d)).toBe(4);
    expect(
      github.log
        .filter((e) => e.path === '/x')
        .map((e) => e.token)
        .sort(),
    ).toEqual(['ghs_1', 'ghs_1', 'ghs_2', 'ghs_2', 'ghs_2', 'ghs_2']);
  });

  it('works with @octokit/rest', async () => {
    const MyOctokit = RestOctokit.plugin(throttling);
    const octokit = new MyOctokit({
      baseUrl: github.url,
      log: quiet,
      throttle: {
        id: freshId(),
        retryAfterBaseValue: 10,
        onRateLimit: () => true,
        onSecondaryRateLimit: () => true,
      },
    });
    github.script(secondaryAnswer(403, '1'));
    const { data } = await octokit.rest.issues.create({ owner: 'o', repo: 'r', title: 'hello' });
    expect(data).toMatchObject({ ok: true, method: 'POST', path: '/repos/o/r/issues' });
    expect(github.log.map((e) => e.status)).toEqual([403, 201]);
  });
});

describe('classify', () => {
  it('spends the documented lanes and points', () => {
    expect(classify('GET', '/repos/{owner}/{repo}', {}).lanes).toEqual([
      ['core', 1],
      ['rest', 1],
    ]);
    // The longest window first: a POST waiting for `core`'s hour holds no `content` grant.
    expect(classify('POST', '/repos/{owner}/{repo}/issues', {}).lanes).toEqual([
      ['core', 1],
      ['content', 1],
      ['rest', 5],
    ]);
    expect(classify('DELETE', '/repos/o/r/issues/1/labels/x', {}).lanes).toEqual([
      ['core', 1],
      ['rest', 5],
    ]);
    expect(classify('GET', 'https://api.github.com/search/issues?q=x', {}).lanes).toEqual([
      ['search', 1],
      ['rest', 1],
    ]);
    expect(classify('GET', '/search/code', {}).lanes[0]).toEqual(['codeSearch', 1]);
    expect(classify('POST', '/graphql', { query: 'query { viewer { login } }' }).lanes).toEqual([
      ['graphql', 1],
    ]);
    expect(
      classify('POST', '/graphql', { query: 'mutation { addStar(input: {}) { clientMutationId } }' }).lanes,
    ).toEqual([
      ['content', 1],
      ['graphql', 5],
    ]);
    expect(classify('POST', '/api/graphql', { query: '{ viewer { login } }' }).graphql).toBe(true);
    // Every request takes its lanes in one order (no two requests wait for each other's lane).
    const kinds: [string, string, Record<string, unknown>][] = [
      ['GET', '/repos/o/r', {}],
      ['POST', '/repos/o/r/issues', {}],
      ['POST', '/markdown', {}],
      ['GET', '/search/issues', {}],
      ['POST', '/search/code', {}],
      ['POST', '/graphql', { query: '{ a }' }],
      ['POST', '/graphql', { query: 'mutation { a }' }],
    ];
    for (const [method, url, options] of kinds) {
      const order = classify(method, url, options).lanes.map(([lane]) => LANE_ORDER.indexOf(lane));
      expect(order.every((n, i) => n >= 0 && (i === 0 || n > order[i - 1]!))).toBe(true);
    }
    expect(classify('POST', '/app/installations/{installation_id}/access_tokens', {}).auth).toBe(true);
    expect(classify('POST', '/app/installations/9/access_tokens', {}).auth).toBe(true);
  });

  it('finds a mutation by its keyword, not by the word in a string, a block string or a comment', () => {
    for (const query of [
      'query { search(query: "is mutation", type: ISSUE, first: 1) { issueCount } }',
      'query { a(b: """\n  a mutation, a \\""" quote\n""") { c } }',
      'query { a(b: "a \\"mutation\\" # not a comment") { c } } # mutation',
    ]) {
      expect(classify('POST', '/graphql', { query }).lanes).toEqual([['graphql', 1]]);
    }
    expect(
      classify('POST', '/graphql', { query: 'query { a(b: "#") { c } }\nmutation { d }' }).lanes,
    ).toEqual([
      ['content', 1],
      ['graphql', 5],
    ]);
  });
});
