/**
 * Runs the examples the docs' code blocks come from (test/acceptance/docs-snippets.test.ts
 * checks that each block equals its region) and checks what the docs say of each: the start
 * times a rule gives, the pause a provider's answer writes, a client's settings, a limit shared
 * across processes. docs/testing.md's blocks are regions of this file itself (they use the
 * test helpers, as a test file does).
 */
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, type Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  ioredisClient,
  ioredisCluster,
  nodeRedisClient,
  nodeRedisCluster,
} from '../../examples/client-settings.js';
import { countTimeouts, handle, isValveErrorInstance, logStoreErrors } from '../../examples/errors.js';
import {
  axiosItems,
  expectedReading,
  githubFeedback,
  githubReading,
  gotItems,
  logIgnored,
  postItem,
  sdkClients,
  sdkResponses,
  withFeedback,
} from '../../examples/feedback.js';
import { undiciCalls } from '../../examples/feedback-undici.js';
import { asLease, asValveLease, type Db, syncLedger } from '../../examples/fencing.js';
import * as providers from '../../examples/providers.js';
import { logMismatch, raiseLimit, storeWithOptions } from '../../examples/redis-store.js';
import { tlsClients } from '../../examples/redis-tls.js';
import * as rules from '../../examples/rules.js';
import { createValve, isValveError, memoryStore, redisStore, type Valve } from '../../src/index.js';
import { type FakeApi, startFakeApi } from '../helpers/fake-apis.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { runExample } from '../helpers/run-example.js';
// #region private-servers
import { startCluster, startRedis } from '../helpers/servers.js';
// #endregion private-servers
// #region shared-servers
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

// #endregion shared-servers
import { expectStoreWorks } from '../helpers/store-smoke.js';

const HOUR = 3_600_000;

/** Queues `n` jobs of `cost` at once and runs the virtual clock; returns each start, ms after the call. */
async function startTimes(valve: Valve, clock: FakeClock, n: number, cost = 1): Promise<number[]> {
  const t0 = clock.now();
  const times: number[] = [];
  const jobs = Array.from({ length: n }, () => valve.run(() => times.push(clock.now() - t0), { cost }));
  await clock.runAllAsync(2 * HOUR);
  await Promise.all(jobs);
  await valve.close();
  return times.map((t) => Math.round(t * 1000) / 1000);
}

/** The most starts in any half-open window of `ms`. */
function mostInAnyWindow(times: number[], ms: number): number {
  let most = 0;
  for (const t of times) most = Math.max(most, times.filter((u) => u >= t && u < t + ms).length);
  return most;
}

/** A valve's store and clock on one virtual clock, starting `offset` ms into a UTC hour. */
function virtual(offset = 0) {
  const clock = new FakeClock(472_223 * HOUR + offset);
  return { clock, options: { clock, store: memoryStore({ clock }) } };
}

describe('examples/rules.ts: the rules of docs/choose-an-algorithm.md and docs/how-it-works.md', () => {
  it('GCRA: one start every 100 ms, at most 10 in any second', async () => {
    const { clock, options } = virtual();
    const times = await startTimes(rules.gcra(options), clock, 21);
    for (const [i, t] of times.entries()) expect(t).toBeCloseTo(i * 100, 2);
    expect(mostInAnyWindow(times, 1000)).toBe(10);
  });

  it('burst 5: 5 at once after a pause, then one every 100 ms: 14 = 10 + 5 - 1 in the first second', async () => {
    const { clock, options } = virtual();
    const times = await startTimes(rules.burst(options), clock, 20);
    expect(times.slice(0, 5)).toEqual([0, 0, 0, 0, 0]);
    for (const [i, t] of times.slice(5).entries()) expect(t).toBeCloseTo((i + 1) * 100, 2);
    expect(times.filter((t) => t < 1000)).toHaveLength(14);
    expect(mostInAnyWindow(times, 1000)).toBe(14);
  });

  it('limit 91, burst 10: bursts of 10, at most 100 in any 10 s', async () => {
    const { clock, options } = virtual();
    const times = await startTimes(rules.burstWithinQuota(options), clock, 150);
    expect(times.slice(0, 10)).toEqual(Array(10).fill(0));
    expect(times[10]).toBeGreaterThan(0);
    expect(mostInAnyWindow(times, 10_000)).toBe(100);
  });

  it('sliding window: all 200 at once, then each unit again 10 s after it was spent', async () => {
    const { clock, options } = virtual();
    const times = await startTimes(rules.slidingWindow(options), clock, 400);
    expect(times.slice(0, 200)).toEqual(Array(200).fill(0));
    expect(times.slice(200)).toEqual(Array(200).fill(10_000));
    expect(mostInAnyWindow(times, 10_000)).toBe(200);
  });

  it("the demo's rules: starts 40 ms apart, never more than 200 in any 10 s", async () => {
    const { clock, options } = virtual();
    const times = await startTimes(rules.spreadAndSlidingWindow(options), clock, 260);
    for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(40);
    expect(times[199]).toBeCloseTo(199 * 40, 2);
    expect(times[200]).toBe(10_000); // the first start leaves the provider's window
    expect(mostInAnyWindow(times, 10_000)).toBe(200);
  });

  it('fixed window: the whole 5,000 at once, the next only when the clock hour (UTC) turns', async () => {
    const { clock, options } = virtual(HOUR / 2); // half past
    const times = await startTimes(rules.fixedWindow(options), clock, 6, 1000);
    expect(times).toEqual([0, 0, 0, 0, 0, HOUR / 2]);
  });

  it.each([
    ['several-rules', rules.severalRules],
    ['two-algorithms', rules.twoAlgorithms],
  ])('%s: 10 per second, and 5,000 per clock hour', async (_, make) => {
    const { clock, options } = virtual();
    const times = await startTimes(make(options), clock, 5001);
    expect(times.slice(0, 3)).toEqual([0, 100, 200]);
    expect(times[4999]).toBeCloseTo(499_900, 2);
    expect(times[5000]).toBe(HOUR); // the hourly rule holds the 5,001st until the next hour
  });

  it('how-it-works "Store": valves on one store share a budget, a valve with its own store does not', async () => {
    const { search, sync, other } = rules.sharedStore({ limit: 1, interval: '300ms' });
    const t0 = performance.now();
    const at = () => performance.now() - t0;
    const [a, b, c] = await Promise.all([search.run(at), sync.run(at), other.run(at)]);
    // sync waits the shared rule's 300 ms after search; other, on its own store, does not.
    // The bound holds between grants on the store's clock (the same performance clock as here);
    // a job starts at or after its grant, and search's grant came after t0, so sync starts at
    // least 300 ms after t0. (Not `b - a`: search's job may start a few ms after its grant on a
    // busy machine, while sync's starts at once: 296 ms apart was seen.)
    expect(a).toBeGreaterThanOrEqual(0);
    expect(b).toBeGreaterThanOrEqual(299.9);
    expect(c).toBeLessThan(b);
    expect(c).toBeLessThan(5000);
    await Promise.all([search.close(), sync.close(), other.close()]);
  });

  it('how-it-works "Id": one id per credential, one budget each', async () => {
    const store = memoryStore();
    const valves = rules.ids({ limit: 1, interval: '10s' }, store, 'acct_1');
    const t0 = performance.now();
    const starts = await Promise.all(valves.map((v) => v.run(() => performance.now() - t0)));
    // At once, not a 10 s interval later (a generous bound: the wall clock may stall).
    for (const start of starts) expect(start).toBeLessThan(5000);
    // The same credential again, on the same store: the budget the first valve spent.
    const again = createValve({ id: 'stripe:acct_1', rules: { limit: 1, interval: '10s' }, store });
    expect(await again.run(() => 'started', { maxWait: 200 }).catch((e) => e.code)).toBe('MAX_WAIT');
    await Promise.all([...valves, again].map((v) => v.close()));
  });

  it('how-it-works "What the same budget means": one rule set per id; a stricter rule goes under its own id', async () => {
    // The pages that explain sharing by rule say so (they once suggested a second rule set on the id).
    const section = (page: string, heading: string) => {
      const text = readFileSync(join(import.meta.dirname, '../../docs', page), 'utf8');
      const start = text.indexOf(heading);
      return text.slice(start, text.indexOf('\n#', start + heading.length));
    };
    for (const text of [
      section('how-it-works.md', '### What "the same budget" means'),
      section('choose-an-algorithm.md', '## Several rules at once'),
    ]) {
      expect(text).toContain("`'rule-mismatch'`");
      expect(text).toContain('its own id');
    }
    const { clock, options } = virtual();
    const warned: string[] = [];
    const make = (id: string, r: { limit: number; interval: string }[]) => {
      const v = createValve({ id, rules: r, ...options });
      v.on('rule-mismatch', () => warned.push(id));
      return v;
    };
    const common = [{ limit: 10, interval: '1s' }];
    // Other rules on one id: both valves are warned, and they share the per-second state.
    const a = make('x', [...common, { limit: 5000, interval: '1h' }]);
    const b = make('x', common);
    const t0 = clock.now();
    const starts = [
      a.run(() => clock.now() - t0),
      b.run(() => clock.now() - t0),
      a.run(() => clock.now() - t0),
    ];
    await clock.tickAsync(1000);
    // B waits for A's grant on the per-second state; A's second job for its hourly rule (720 ms apart).
    expect(await Promise.all(starts)).toEqual([0, 100, 720]);
    expect(warned).toEqual(['x', 'x']);
    // The stricter rule under its own id, run before the common valve: no warning.
    warned.length = 0;
    const reads = make('y', common);
    const writes = make('y:writes', [{ limit: 1, interval: '1m' }]);
    const jobs = [reads.run(() => 1), writes.run(() => reads.run(() => 1)), reads.run(() => 1)];
    await clock.tickAsync(1000);
    await Promise.all(jobs);
    expect(warned).toEqual([]);
    expect(reads.stats().started).toBe(3);
    await Promise.all([a, b, reads, writes].map((v) => v.close()));
  });
});

/** Starts `n` jobs at once on a real clock; returns each start, ms after the first. */
/**
 * The start times (ms after the first) of `n` jobs queued at once on the valve `make()` returns,
 * on vitest's fake timers: the examples' valves keep the default clock, which then reads the
 * fake time, so every time is exact.
 */
async function fakeStarts(make: () => Valve, n: number): Promise<number[]> {
  vi.useFakeTimers();
  try {
    const valve = make();
    const times = Array.from({ length: n }, () => valve.run(() => performance.now()));
    await vi.advanceTimersByTimeAsync(2000);
    const starts = await Promise.all(times);
    await valve.close();
    return starts.map((t) => Math.round((t - starts[0]!) * 1000) / 1000);
  } finally {
    vi.useRealTimers();
  }
}

describe('examples/providers.ts: the worked examples of docs/choose-an-algorithm.md', () => {
  it('Stripe: bursts of 10, then one every 11.1 ms', async () => {
    const times = await fakeStarts(() => providers.stripe(memoryStore(), 'acct_1'), 12);
    expect(times.slice(0, 10)).toEqual(Array(10).fill(0));
    // One emission interval (1 s / 90: 11.112 µs-rounded) per start after the burst, never
    // sooner; the fake timers fire on whole milliseconds, so 11.112 and 22.224 ms start at 12
    // and 23 (the 12th keeps its slot after a late 11th).
    expect(times.slice(10)).toEqual([12, 23]);
  });

  it('HubSpot: 10 at once, then one every 110 ms', async () => {
    const times = await fakeStarts(() => providers.hubspot(memoryStore()), 11);
    expect(times.slice(0, 10)).toEqual(Array(10).fill(0));
    expect(times[10]).toBe(110); // 10 s / 91 = 109.891 ms, on the fake timers' next millisecond
  });

  it('Shopify: 40 at once, then 2 per second', async () => {
    const times = await fakeStarts(() => providers.shopify(memoryStore(), 'shop-1.myshopify.com'), 41);
    expect(times.slice(0, 40)).toEqual(Array(40).fill(0));
    expect(times[40]).toBe(500);
  });

  it('Discord: one start every 20 ms', async () => {
    const times = await fakeStarts(() => providers.discord(memoryStore()), 4);
    expect(times).toEqual([0, 20, 40, 60]);
  });

  it('OpenAI: each call through both valves, its tokens as the cost; a cost above the burst is a RangeError', async () => {
    const api = await startFakeApi('openai', { limit: 10, windowMs: 1000 });
    try {
      const valves = providers.openaiValves(memoryStore());
      const openai = new OpenAI({ apiKey: 'sk-test', baseURL: api.url, maxRetries: 0 });
      const messages = [{ role: 'user' as const, content: 'Say hello.' }];
      const reply = await providers.complete(openai, valves, 'gpt-4o', messages, 100);
      expect(reply.choices[0]?.message).toBeDefined();
      expect(valves.tokens.stats().started).toBe(1);
      expect(valves.requests.stats().started).toBe(1);
      await expect(providers.complete(openai, valves, 'gpt-4o', messages, 9000)).rejects.toThrow(RangeError);
      expect(api.log).toHaveLength(1);
      await Promise.all([valves.tokens.close(), valves.requests.close()]);
    } finally {
      await api.stop();
    }
  });

  it("GitHub: reads and writes share the hourly budget and the pause (on the suite's Redis)", async () => {
    const arrivals: { method: string; at: number }[] = [];
    const reset = Math.ceil(Date.now() / 1000) + 1; // epoch seconds, as GitHub sends it
    const server = await listen((req, res) => {
      arrivals.push({ method: req.method ?? '', at: Date.now() });
      res.setHeader('x-ratelimit-limit', '5000');
      res.setHeader('x-ratelimit-remaining', req.method === 'GET' ? '0' : '4999');
      res.setHeader('x-ratelimit-reset', String(reset));
      res.end('{}');
    });
    const client = new Redis(sharedRedis().url, { maxRetriesPerRequest: 0 });
    try {
      const { reads, writes, gh, ghWrite } = providers.github(client);
      const mismatches: string[] = [];
      reads.on('rule-mismatch', (e) => mismatches.push(`reads ${e.id}`));
      writes.on('rule-mismatch', (e) => mismatches.push(`writes ${e.id}`));
      expect((await gh(`${server.url}/repos/octo/hello`)).status).toBe(200); // spends the hour's last request
      const res = await ghWrite(`${server.url}/repos/octo/hello/issues`, { method: 'POST', body: '{}' });
      expect(res.status).toBe(200);
      expect(arrivals.map((a) => a.method)).toEqual(['GET', 'POST']);
      expect(arrivals[1]!.at).toBeGreaterThanOrEqual(reset * 1000 - 20); // the write waited for the reset
      expect(reads.stats().started).toBe(2); // the write went out through the reads valve too
      expect(writes.stats().started).toBe(1);
      // One rule set per id: the docs' set-up never warns (it did with two rule sets on one id).
      await gh(`${server.url}/repos/octo/hello`);
      expect(mismatches).toEqual([]);
      await Promise.all([reads.close(), writes.close()]);
    } finally {
      await client.quit();
      await server.close();
    }
  });
});

/** A local HTTP server. */
async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void) {
  const server: Server = createServer(handler);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

describe('examples/feedback.ts and examples/feedback-undici.ts: docs/provider-feedback.md', () => {
  const later = (s: number) => String(Math.ceil(Date.now() / 1000) + s);

  it("the opening example: GitHub's spent count and a 403 with Retry-After pause the id", async () => {
    const reset = later(60);
    const fakeFetch = vi.fn(
      async (_input: string | URL | Request, _init?: RequestInit) =>
        new Response('{}', { headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': reset } }),
    );
    const secondary = new Response(null, { status: 403, headers: { 'retry-after': '120' } });
    const { github, res } = await githubFeedback(memoryStore(), fakeFetch, secondary);
    expect(res.status).toBe(200);
    expect(String(fakeFetch.mock.calls[0]![0])).toBe('https://api.github.com/repos/octo/hello');
    expect(github.stats().pausedUntil).toBeGreaterThan(Date.now() + 110_000); // the longer pause holds
    expect(github.stats().pausedBy?.source).toBe('retry-after');
    await github.close();
  });

  it("observe() returns the reading the page shows for GitHub's 403, 30 s before its reset", () => {
    expect(githubReading(new FakeClock(1714138770000))).toEqual(expectedReading);
  });

  it('feedback options: backoff from 500 ms, doubling; a pause capped at 15 minutes', async () => {
    const valve = withFeedback('example:backoff', { limit: 10, interval: '1s' });
    expect(valve.observe({ status: 429, headers: {} })?.waitMs).toBe(500);
    await new Promise((r) => setTimeout(r, 520));
    expect(valve.observe({ status: 429, headers: {} })?.waitMs).toBe(1000);
    const capped = valve.observe({ status: 429, headers: { 'retry-after': '99999999' } });
    expect(capped).toMatchObject({ waitMs: 15 * 60_000, capped: true });
    await valve.close();
  });

  it("'feedback-ignored': every header value not used as sent reaches the log", async () => {
    const valve = createValve({ id: 'example:ignored' });
    const log = { warn: vi.fn() };
    logIgnored(valve, log);
    valve.observe({ status: 429, headers: { 'retry-after': 'soon' } });
    valve.observe({ status: 429, headers: { 'retry-after': '99999999' } });
    expect(log.warn).toHaveBeenCalledWith(
      { header: 'retry-after', value: 'soon', reason: 'unparseable', status: 429 },
      'rate-limit header not used as sent',
    );
    expect(log.warn).toHaveBeenCalledWith(
      expect.objectContaining({ reason: 'capped', cappedTo: 3_600_000, requestedMs: 99_999_999_000 }),
      'rate-limit header not used as sent',
    );
    await valve.close();
  });

  it('wrapFetch: a 429 is retried with the same body, after the pause it states', async () => {
    const valve = createValve({ id: 'example:wrap-fetch' });
    const bodies: unknown[] = [];
    const fakeFetch = vi.fn(async (_input: string | URL | Request, init?: RequestInit) => {
      bodies.push(init?.body);
      return bodies.length === 1
        ? new Response(null, { status: 429, headers: { 'retry-after-ms': '50' } })
        : new Response('{}', { status: 201 });
    });
    const t0 = performance.now();
    const res = await postItem(valve, fakeFetch, { name: 'widget' });
    expect(res.status).toBe(201);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(49);
    expect(bodies).toEqual(['{"name":"widget"}', '{"name":"widget"}']);
    expect(String(fakeFetch.mock.calls[0]![0])).toBe('https://api.example.com/items');
    await valve.close();
  });

  describe('observe() from other clients', () => {
    let status = 200;
    let server: Awaited<ReturnType<typeof listen>>;
    let reset = '';
    beforeAll(async () => {
      server = await listen((req, res) => {
        res.statusCode = status;
        res.setHeader('content-type', 'application/json');
        if (status === 429) res.setHeader('retry-after', '30');
        else res.setHeader('x-ratelimit-remaining', '0').setHeader('x-ratelimit-reset', reset);
        res.end(JSON.stringify({ path: req.url }));
      });
    });
    afterAll(() => server.close());

    const paused = (valve: Valve) => (valve.stats().pausedUntil ?? 0) - Date.now();

    it('axios: a spent count on a 200 and a 429 rejected by axios both pause the valve', async () => {
      const valve = createValve({ id: 'example:axios' });
      status = 200;
      reset = later(60);
      const res = await axiosItems(valve, server.url);
      expect(res.data).toEqual({ path: '/items' });
      expect(paused(valve)).toBeGreaterThan(50_000);
      await valve.resume();
      status = 429;
      await expect(axiosItems(valve, server.url)).rejects.toMatchObject({ response: { status: 429 } });
      expect(paused(valve)).toBeGreaterThan(25_000);
      await valve.close();
    });

    it("got: the afterResponse hook hands every response to observe(); got's retries are off", async () => {
      const valve = createValve({ id: 'example:got' });
      status = 200;
      reset = later(60);
      expect(await gotItems(valve, server.url)).toEqual({ path: '/items' });
      expect(paused(valve)).toBeGreaterThan(50_000);
      await valve.resume();
      status = 429;
      await expect(gotItems(valve, server.url)).rejects.toMatchObject({ response: { statusCode: 429 } });
      expect(paused(valve)).toBeGreaterThan(25_000);
      await valve.close();
    });

    it("undici: request()'s statusCode and headers pause the valve", async () => {
      const valve = createValve({ id: 'example:undici' });
      status = 200;
      reset = later(60);
      const { api, statusCode, text } = await undiciCalls(valve, `${server.url}/items`);
      expect(statusCode).toBe(200);
      expect(JSON.parse(text)).toEqual({ path: '/items' });
      expect(paused(valve)).toBeGreaterThan(50_000);
      await valve.resume();
      reset = later(1);
      const res = await api(`${server.url}/other`); // undici's fetch, through the valve
      expect(await res.json()).toEqual({ path: '/other' });
      await valve.close();
    });
  });

  describe('SDKs', () => {
    const apis: FakeApi[] = [];
    afterAll(async () => {
      vi.unstubAllEnvs();
      await Promise.all(apis.map((a) => a.stop()));
    });

    it('OpenAI, Anthropic and Octokit given the wrapped fetch send every request through the valve', async () => {
      const [openaiApi, anthropicApi, githubApi] = await Promise.all([
        startFakeApi('openai', { limit: 10, windowMs: 1000 }),
        startFakeApi('anthropic', { limit: 10, windowMs: 1000 }),
        startFakeApi('generic', { limit: 10, windowMs: 1000 }),
      ]);
      apis.push(openaiApi, anthropicApi, githubApi);
      vi.stubEnv('OPENAI_API_KEY', 'sk-test');
      vi.stubEnv('OPENAI_BASE_URL', openaiApi.url);
      vi.stubEnv('ANTHROPIC_API_KEY', 'sk-ant-test');
      vi.stubEnv('ANTHROPIC_BASE_URL', anthropicApi.url);
      const valve = createValve({ id: 'example:sdks' });
      const { openai, anthropic, octokit } = sdkClients(valve);
      await openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
      await anthropic.messages.create({
        model: 'claude-sonnet-4-5',
        max_tokens: 10,
        messages: [{ role: 'user', content: 'hi' }],
      });
      await octokit.request('GET /repos/{owner}/{repo}', {
        owner: 'octo',
        repo: 'hello',
        baseUrl: githubApi.url,
      });
      expect(valve.stats().started).toBe(3);
      expect([openaiApi, anthropicApi, githubApi].map((a) => a.log.length)).toEqual([1, 1, 1]);
      await valve.close();
    });

    it("SDKs that expose the response: OpenAI's response observed, a bare 429 from Stripe backs off", async () => {
      const [openaiApi, stripeApi] = await Promise.all([
        startFakeApi('openai', { limit: 10, windowMs: 1000 }),
        startFakeApi('stripe', { limit: 10, windowMs: 60_000, always429: true }),
      ]);
      apis.push(openaiApi, stripeApi);
      const valve = createValve({ id: 'example:sdk-responses' });
      const observed = vi.spyOn(valve, 'observe');
      const openai = new OpenAI({ apiKey: 'sk-test', baseURL: openaiApi.url, maxRetries: 0 });
      const stripe = new Stripe('sk_test_1', {
        host: '127.0.0.1',
        port: stripeApi.port,
        protocol: 'http',
        maxNetworkRetries: 0,
      });
      const data = await sdkResponses(valve, openai, stripe, {
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(data.choices).toHaveLength(1);
      expect(observed).toHaveBeenCalledTimes(1);
      expect(valve.stats().pausedUntil).toBeNull();
      await expect(stripe.customers.create()).rejects.toMatchObject({ statusCode: 429 });
      expect(valve.stats().pausedBy?.source).toBe('backoff');
      await valve.close();
    });
  });
});

describe('examples/errors.ts: docs/errors.md', () => {
  it('a full queue is answered 503; another ValveError is logged with its code and rethrown', async () => {
    const valve = createValve({ id: 'example:errors', rules: { limit: 1, interval: '10s' }, maxQueue: 1 });
    const logger = { warn: vi.fn() };
    const reply = vi.fn((status: number, body: string) => `${status} ${body}`);
    const job = async () => 'done';
    expect(await handle(valve, job, reply, logger)).toBe('done'); // starts at once
    const queued = handle(valve, job, reply, logger).catch((err: unknown) => err); // waits 10 s
    await new Promise((r) => setTimeout(r, 20));
    expect(await handle(valve, job, reply, logger)).toBe('503 busy, try again'); // QUEUE_FULL
    expect(reply).toHaveBeenCalledWith(503, 'busy, try again');
    await valve.close();
    const closed = await queued;
    expect(isValveError(closed, 'CLOSED')).toBe(true);
    expect(isValveErrorInstance(closed)).toBe(true);
    expect(logger.warn).toHaveBeenCalledWith({ code: 'CLOSED', cause: undefined }, (closed as Error).message);
  });

  it("a Redis call past the store's timeout: counted as redis.timeout, logged with its operation and action", async () => {
    // A server that accepts connections and never answers: every store call times out.
    const sockets: import('node:net').Socket[] = [];
    const silent: TcpServer = createTcpServer((socket) => sockets.push(socket));
    await new Promise<void>((done) => silent.listen(0, '127.0.0.1', done));
    const { port } = silent.address() as { port: number };
    const client = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0 });
    client.on('error', () => {});
    try {
      const valve = createValve({
        id: 'example:timeout',
        store: redisStore({ client, timeout: 100 }),
        onStoreError: 'throw',
      });
      const metrics = { increment: vi.fn() };
      const logger = { warn: vi.fn() };
      countTimeouts(valve, metrics);
      logStoreErrors(valve, logger);
      await expect(valve.run(() => 'never')).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
      expect(metrics.increment).toHaveBeenCalledWith('redis.timeout');
      expect(logger.warn).toHaveBeenCalledWith(
        expect.objectContaining({ operation: 'acquire', id: 'example:timeout', action: 'throw' }),
        'valve store error',
      );
      expect(logger.warn.mock.calls[0]![0].err).toMatchObject({ code: 'VALVE_REDIS_TIMEOUT' });
      await valve.close();
    } finally {
      client.disconnect();
      for (const s of sockets) s.destroy();
      await new Promise((done) => silent.close(done));
    }
  });
});

describe("examples/redis-store.ts: docs/redis.md, on the suite's Redis", () => {
  let client: Redis;
  beforeAll(async () => {
    client = new Redis(sharedRedis().url, { maxRetriesPerRequest: 0 });
  });
  afterAll(() => client.quit());

  it("redisStore()'s options: a valve runs through it and its wake-ups are confirmed", async () => {
    const subscriber = client.duplicate();
    const store = storeWithOptions(client, subscriber, 'classic');
    const id = `example-options-${uniquePrefix('x').slice(4)}`;
    await expectStoreWorks(store, id);
    expect(await client.exists(`valve:{${id}}:fence`)).toBe(1); // prefix 'valve'
    await subscriber.quit();
  });

  it("setRules(): the new rule's state is recorded for the id", async () => {
    const id = `example-set-rules-${uniquePrefix('x').slice(4)}`;
    const valve = createValve({
      id,
      rules: { limit: 10_000, interval: '1h', algorithm: 'fixed-window' },
      store: redisStore({ client }),
    });
    await valve.run(() => 1);
    await raiseLimit(valve);
    await valve.run(() => 2);
    expect(await client.get(`valve:{${id}}:rules`)).toMatch(/:w15000\.3600000000$/);
    expect(await client.exists(`valve:{${id}}:r:w15000.3600000000`)).toBe(1);
    await valve.close();
  });

  it("'rule-mismatch': a process whose rules differ from the id's record logs both", async () => {
    const id = `example-mismatch-${uniquePrefix('x').slice(4)}`;
    const store = redisStore({ client });
    const first = createValve({ id, rules: { limit: 10, interval: '1s' }, store });
    await first.run(() => 1);
    const second = createValve({ id, rules: { limit: 20, interval: '1s' }, store });
    const log = { warn: vi.fn() };
    logMismatch(second, log);
    await second.run(() => 2);
    expect(log.warn).toHaveBeenCalledTimes(1);
    expect(log.warn).toHaveBeenCalledWith(
      {
        id,
        rules: [expect.objectContaining({ limit: 20 })],
        recorded: [expect.objectContaining({ limit: 10 })],
      },
      'another process uses other rules for this id',
    );
    await Promise.all([first.close(), second.close()]);
  });
});

describe('examples/redis-tls.ts: docs/redis.md "TLS", against TLS-only servers of its own', () => {
  it('each client connects with the CA, and a valve runs through each', async () => {
    const server = await startRedis({ tls: true });
    // A one-node cluster serving TLS only: every slot on one master, its bus on TLS too.
    const node = await startRedis({
      tls: true,
      args: [
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        'nodes.conf',
        '--tls-cluster',
        'yes',
      ].concat(['--cluster-announce-ip', '127.0.0.1']),
    });
    const cwd = process.cwd();
    const dir = mkdtempSync(join(tmpdir(), 'valve-tls-'));
    try {
      await node.command(['CLUSTER', 'ADDSLOTSRANGE', '0', '16383']);
      const until = Date.now() + 10_000;
      while (!/cluster_state:ok/.test(String(await node.command(['CLUSTER', 'INFO'])))) {
        if (Date.now() > until) throw new Error('the TLS cluster did not come up');
        await new Promise((r) => setTimeout(r, 50));
      }
      copyFileSync(server.tls!.caFile, join(dir, 'ca.pem'));
      process.chdir(dir); // the example reads ca.pem from the working directory
      const clients = await tlsClients(
        server.url,
        [{ host: node.host, port: node.port }],
        `rediss://${node.host}:${node.port}`,
      );
      process.chdir(cwd);
      expect(server.url).toMatch(/^rediss:\/\//);
      for (const [name, client] of Object.entries(clients)) {
        const valve = createValve({
          id: `example-tls-${name}`,
          store: redisStore({ client, prefix: uniquePrefix('tls').replace(/:/g, '-') }),
          concurrency: { limit: 1, scope: 'global', leaseTtl: 5000 },
        });
        expect(await valve.run(() => name)).toBe(name);
        await valve.close();
      }
      await Promise.all([
        clients.client.quit(),
        clients.cluster.quit(),
        clients.nodeClient.close(),
        clients.nodeCluster.close(),
      ]);
    } finally {
      process.chdir(cwd);
      rmSync(dir, { recursive: true, force: true });
      await Promise.all([server.stop(), node.stop()]);
    }
  }, 60_000);
});

describe("examples/client-settings.ts: docs/timeouts-and-reconnection.md, on the suite's servers", () => {
  /** A valve through the store runs a job with a global slot (a lease taken and released). */
  async function runsThrough(store: ReturnType<typeof redisStore>) {
    const valve = createValve({
      id: `example-settings-${uniquePrefix('x').slice(4)}`,
      rules: { limit: 10, interval: '1s' },
      store,
      concurrency: { limit: 1, scope: 'global', leaseTtl: 5000 },
    });
    expect(await Promise.all([valve.run(() => 1), valve.run(() => 2)])).toEqual([1, 2]);
    await valve.close();
  }

  it('ioredis: connected before use; while disconnected a command fails at once, not queued', async () => {
    const { host, port } = sharedRedis();
    const log = { warn: vi.fn() };
    const { client, subscriber } = await ioredisClient(host, port, log);
    expect(client.status).toBe('ready');
    await runsThrough(redisStore({ client, subscriber }));
    client.disconnect();
    const t0 = performance.now();
    await expect(client.get('x')).rejects.toThrow(/enableOfflineQueue/);
    // At once (a queued command would wait for a reconnect that never comes).
    expect(performance.now() - t0).toBeLessThan(2000);
    subscriber.disconnect();
  });

  it('ioredis Cluster: connected, with a sharded subscriber', async () => {
    const { client, subscriber } = await ioredisCluster(sharedCluster().nodes);
    expect(client.status).toBe('ready');
    await runsThrough(redisStore({ client, subscriber }));
    client.disconnect();
    subscriber.disconnect();
  });

  it('node-redis: no offline queue on the command connection', async () => {
    const log = { warn: vi.fn() };
    const { client, subscriber } = await nodeRedisClient(sharedRedis().url, log);
    expect(client.isReady).toBe(true);
    await runsThrough(redisStore({ client, subscriber }));
    await Promise.all([client.close(), subscriber.close()]);
    await expect(client.get('x')).rejects.toThrow();
  });

  it('node-redis cluster', async () => {
    const rootNodes = sharedCluster().nodes.map((n) => ({ url: `redis://${n.host}:${n.port}` }));
    const client = await nodeRedisCluster(rootNodes);
    await runsThrough(redisStore({ client }));
    await client.close();
  });
});

describe('examples/global-concurrency.ts: docs/share-a-concurrency-limit.md', () => {
  it('two processes sharing the id never run more than 4 exports at once; every fence differs', async () => {
    const env = { REDIS_URL: sharedRedis().url, JOBS: '5' };
    const runs = await Promise.all([
      runExample('examples/global-concurrency.ts', env, 30_000),
      runExample('examples/global-concurrency.ts', env, 30_000),
    ]);
    const log: { start: number; end: number; fence: number }[] = [];
    for (const run of runs) {
      expect(run.signal, `killed: the process did not exit by itself\n${run.stderr}`).toBeNull();
      expect(run.code, run.stderr).toBe(0);
      log.push(...JSON.parse(run.stdout.trim()));
    }
    expect(log).toHaveLength(10);
    const most = Math.max(...log.map((a) => log.filter((b) => b.start <= a.start && a.start < b.end).length));
    expect(most).toBeLessThanOrEqual(4);
    expect(most).toBe(4); // 10 starts a second of 600 ms exports: the limit is what holds them back
    expect(new Set(log.map((e) => e.fence)).size).toBe(10);
  }, 40_000);
});

describe('examples/fencing.ts: docs/share-a-concurrency-limit.md "Fencing"', () => {
  /** The ledger_cursor table, with the page's conditional UPDATE. */
  function ledger() {
    const rows = new Map([['acct-1', { position: 0, fence: 0 }]]);
    const db: Db = {
      async query(sql, params) {
        expect(sql).toMatch(/WHERE account = \$3 AND fence <= \$2/);
        const [position, fence, account] = params as [number, number, string];
        const row = rows.get(account);
        if (!row || !(row.fence <= fence)) return { rowCount: 0 };
        Object.assign(row, { position, fence });
        return { rowCount: 1 };
      },
    };
    return { rows, db };
  }

  it("the owner's write lands with its fence; a stale owner's write is refused", async () => {
    const valve = createValve({
      id: 'example:ledger',
      concurrency: { limit: 1, scope: 'global', leaseTtl: '10s' },
    });
    const { rows, db } = ledger();
    const fences: number[] = [];
    valve.on('lease-lost', () => {});
    const fetchEntries = async () => [{ position: 7 }, { position: 9 }];
    await syncLedger(valve, db, 'acct-1', fetchEntries);
    expect(rows.get('acct-1')!.position).toBe(9);
    fences.push(rows.get('acct-1')!.fence);
    expect(fences[0]).toBeGreaterThan(0);
    // A newer owner wrote meanwhile (a larger fence): this job's write must not land.
    const stale = async () => {
      rows.get('acct-1')!.fence = Number.MAX_SAFE_INTEGER;
      return [{ position: 12 }];
    };
    await expect(syncLedger(valve, db, 'acct-1', stale)).rejects.toThrow(
      'stale lease: a newer owner has written',
    );
    expect(rows.get('acct-1')!.position).toBe(9);
    // The page's JobLease is valve's.
    const lease = await valve.run(({ lease }) => asLease(lease!));
    expect(asValveLease(lease).fence).toBeGreaterThan(fences[0]!);
    expect(typeof lease.token).toBe('string');
    await valve.close();
  });
});

describe('docs/testing.md: the servers of the test helpers (regions of this file)', () => {
  it('the shared servers, and a key prefix of its own', () => {
    // #region shared-servers
    const { host, port, url, version } = sharedRedis(); // or sharedRedis('valkey')
    const { nodes } = sharedCluster('valkey'); // [{ host, port }, x3]: cluster seeds
    const prefix = uniquePrefix('gcra'); // e.g. "t:gcra:5f1c2a9b"
    // #endregion shared-servers
    expect(url).toBe(`redis://${host}:${port}`);
    expect(port).not.toBe(6379);
    expect(version).toMatch(/^\d+\.\d+/);
    expect(nodes).toHaveLength(3);
    expect(prefix).toMatch(/^t:gcra:[0-9a-f]{8}$/);
  });

  it('a private server: a command, a restart, signals, a kill; a private cluster', async () => {
    // #region private-servers
    const server = await startRedis({ kind: 'redis' }); // 'redis' (default) | 'valkey'
    const { host, port, url } = server; // 127.0.0.1, port, redis://127.0.0.1:port
    await server.command(['SCRIPT', 'LOAD', 'return 1']); // one command, own connection
    await server.restart(); // same port, new process, empty data and script cache (NOSCRIPT)
    server.kill('SIGSTOP'); // freeze it
    server.kill('SIGCONT'); // and thaw it
    server.kill(); // alone: SIGKILL
    await server.exited(); // after a kill
    await server.stop(); // always, e.g. in afterEach / afterAll

    const cluster = await startCluster({ kind: 'valkey', masters: 3 });
    cluster.nodes; // seeds; cluster.servers[i] is each node's RedisServer
    await cluster.stop();
    // #endregion private-servers
    expect(host).toBe('127.0.0.1');
    expect(url).toBe(`redis://127.0.0.1:${port}`);
    expect(cluster.servers).toHaveLength(3);
  }, 60_000);

  it('an ACL user: its connection may run only what its rules allow', async () => {
    // #region acl-user
    const user = {
      name: 'valve',
      password: 'pw',
      rules: ['~valve:{*', '&valve:{*', '-@all', '+evalsha', '+eval', '+script|load', '+time', '+ping'],
    };
    const server = await startRedis({ aclUser: user });
    const client = new Redis({
      host: server.host,
      port: server.port,
      username: user.name,
      password: user.password,
    });
    // #endregion acl-user
    try {
      expect(await client.ping()).toBe('PONG');
      await expect(client.get('valve:x')).rejects.toThrow(/NOPERM/);
    } finally {
      client.disconnect();
      await server.stop();
    }
  });
});
