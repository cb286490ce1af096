/**
 * The SDK recipes of docs/integrations.md (examples/openai.ts, anthropic.ts, stripe.ts), with the
 * real SDKs from npm against local fakes that answer as each provider documents
 * (test/helpers/fake-apis.ts). For each:
 *
 * - N concurrent callers all succeed; the provider sees no request inside a pause it announced
 *   (except requests already in flight); no call makes more than valve's attempts, and the SDK
 *   itself never retries (OpenAI and Anthropic stamp `x-stainless-retry-count`);
 * - a call that only gets 429s makes valve's 1 + 3 attempts, not 3 SDK attempts × 4 (the
 *   problem the recipes fix; shown with the SDK's default retries as the control);
 * - a call aborted while it waits in the queue rejects at once and never reaches the provider;
 * - OpenAI: a completion's reported usage is charged to the token-per-minute rule.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createAnthropic } from '../../examples/anthropic.js';
import { complete } from '../../examples/errors.js';
import { createOpenAI } from '../../examples/openai.js';
import { createStripe } from '../../examples/stripe.js';
import { createValve, isValveError, memoryStore, type Valve } from '../../src/index.js';
import { insideAnnouncedPauses, recordPauses, stampedFetch } from '../helpers/announced-pauses.js';
import { type ApiRequest, type FakeApi, startFakeApi } from '../helpers/fake-apis.js';

const realFetch = globalThis.fetch;
beforeAll(() => {
  // The recipes pass the global fetch to wrapFetch: stamp the moment each attempt leaves.
  globalThis.fetch = stampedFetch(realFetch);
});
afterAll(() => {
  globalThis.fetch = realFetch;
});

const servers: FakeApi[] = [];
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c()));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

async function fake(...args: Parameters<typeof startFakeApi>): Promise<FakeApi> {
  const server = await startFakeApi(...args);
  servers.push(server);
  return server;
}

/** Attempts per call, from a call id found in each request's body. */
function attemptsPerCall(log: readonly ApiRequest[], pattern: RegExp): Map<string, number> {
  const calls = new Map<string, number>();
  for (const r of log) {
    const call = pattern.exec(r.body)?.[1] ?? 'unknown';
    calls.set(call, (calls.get(call) ?? 0) + 1);
  }
  return calls;
}

/** Resolves once `valve` has a job waiting in its queue (event-driven enough: checked every tick). */
async function queued(valve: Valve, n = 1): Promise<void> {
  while (valve.stats().queued < n) await new Promise((r) => setImmediate(r));
}

const N = 12;

describe('OpenAI (examples/openai.ts)', () => {
  it(`${N} concurrent callers all succeed inside OpenAI's announced pauses, the SDK never retrying`, async () => {
    const api = await fake('openai', { limit: 4, windowMs: 400 });
    const client = createOpenAI({ apiKey: 'sk-test', baseURL: api.url, rpm: 60_000 });
    closers.push(client.close);
    const pauses = recordPauses(client.requests);
    const retries: number[] = [];
    client.requests.on('retry', ({ attempt }) => retries.push(attempt));

    const results = await Promise.all(
      Array.from({ length: N }, (_, i) => client.chat([{ role: 'user', content: `Say call-${i}.` }], 16)),
    );
    expect(results.map((r) => r.choices[0]?.message.content)).toEqual(Array(N).fill('ok'));
    expect(api.log.filter((r) => r.status === 200)).toHaveLength(N);
    expect(insideAnnouncedPauses(api.log, pauses)).toEqual([]);
    // The provider announced pauses (the bucket ran dry), so the check above had work to do.
    expect(api.log.some((r) => r.blockedUntil !== undefined)).toBe(true);
    expect(new Set(api.log.map((r) => r.sdkRetry))).toEqual(new Set(['0']));
    for (const [, attempts] of attemptsPerCall(api.log, /call-(\d+)/))
      expect(attempts).toBeLessThanOrEqual(4);
    expect(api.log).toHaveLength(N + retries.length);
  });

  it("a call that only gets 429s makes valve's 4 attempts, where the SDK's own retries made 12", async () => {
    const api = await fake('openai', { limit: 4, windowMs: 400, always429: true });
    const client = createOpenAI({ apiKey: 'sk-test', baseURL: api.url });
    closers.push(client.close);
    const error = await client.chat([{ role: 'user', content: 'Say call-0.' }], 16).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(api.log.map((r) => [r.status, r.sdkRetry])).toEqual(Array(4).fill([429, '0']));

    // The control: the same valve under the SDK's default retries (2) multiplies the attempts.
    api.log.length = 0;
    const stacked = new OpenAI({
      apiKey: 'sk-test',
      baseURL: api.url,
      fetch: client.requests.wrapFetch(fetch),
    });
    const again = await stacked.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(again).toBeInstanceOf(OpenAI.RateLimitError);
    expect(api.log).toHaveLength(12);
  });

  it('a call aborted while queued rejects at once and never reaches OpenAI', async () => {
    const api = await fake('openai', { limit: 4, windowMs: 400 });
    const client = createOpenAI({ apiKey: 'sk-test', baseURL: api.url });
    closers.push(client.close);
    await client.requests.pause(60_000);
    const controller = new AbortController();
    const call = client.chat([{ role: 'user', content: 'Say call-0.' }], 16, controller.signal);
    const settled = call.catch((e: unknown) => e);
    await queued(client.requests);
    controller.abort();
    // Rejects long before the 60 s pause ends (the test would time out otherwise).
    expect(await settled).toBeInstanceOf(OpenAI.APIUserAbortError);
    expect(api.log).toEqual([]);
  });

  it("charges each completion's reported usage to the token-per-minute rule", async () => {
    // Each call: estimate 3 + 4 + 16 = 23 tokens before, usage 42 reported: 19 more after.
    const api = await fake('openai', { limit: 50, windowMs: 1000, usage: { input: 12, output: 30 } });
    const client = createOpenAI({ apiKey: 'sk-test', baseURL: api.url, tpm: 100 });
    closers.push(client.close);
    const prompt = [{ role: 'user' as const, content: 'Say call.' }];
    await client.chat(prompt, 16);
    await client.chat(prompt, 16);
    // 2 × 42 = 84 spent: a third estimate of 23 does not fit in 100 (it would without the usage).
    const controller = new AbortController();
    const third = client.chat(prompt, 16, controller.signal).catch((e: unknown) => e);
    await queued(client.tokens);
    expect(client.tokens.stats()).toMatchObject({ started: 4, queued: 1 });
    controller.abort();
    // Aborted while its estimate waits: the SDK's abort error, as when the request waits.
    expect(await third).toBeInstanceOf(OpenAI.APIUserAbortError);
    expect(api.log).toHaveLength(2);
  });

  it("a max_tokens above the token rule's burst is charged as the whole bucket, and the call is sent", async () => {
    const api = await fake('openai', { limit: 50, windowMs: 1000, usage: { input: 12, output: 30 } });
    const client = createOpenAI({ apiKey: 'sk-test', baseURL: api.url, tpm: 100 });
    closers.push(client.close);
    const prompt = [{ role: 'user' as const, content: 'Say call.' }];
    // Estimate 3 + 4 + 500 = 507 tokens, more than the 100 the rule can ever admit: charged 100.
    const completion = await client.chat(prompt, 500);
    expect(completion.choices[0]?.message.content).toBe('ok');
    expect(api.log).toHaveLength(1);
    expect(JSON.parse(api.log[0]!.body)).toMatchObject({ max_tokens: 500 });
    // The bucket is empty: the next call waits for it to refill.
    const controller = new AbortController();
    const next = client.chat(prompt, 16, controller.signal).catch((e: unknown) => e);
    await queued(client.tokens);
    expect(client.tokens.stats()).toMatchObject({ started: 1, queued: 1 });
    controller.abort();
    await next;
    expect(api.log).toHaveLength(1);
  });
});

describe("valve's errors through an SDK (docs/errors.md, examples/errors.ts)", () => {
  /** A local server answering `{}` after `delayMs`; counts the requests it got. */
  async function slowServer(delayMs: number): Promise<{ url: string; port: number; seen: () => number }> {
    let seen = 0;
    const server = createServer((req, res) => {
      seen++;
      req.resume();
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'), delayMs);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(
      () =>
        new Promise((resolve) => {
          server.closeAllConnections();
          server.close(resolve);
        }),
    );
    const port = (server.address() as AddressInfo).port;
    return { url: `http://127.0.0.1:${port}`, port, seen: () => seen };
  }

  it("a first attempt that does not start within maxWait: the SDK's connection error, the ValveError as its cause (detail for Stripe); nothing sent", async () => {
    const srv = await slowServer(0);
    const valve = createValve({ id: 'sdk', store: memoryStore(), maxWait: 100 });
    closers.push(() => valve.close());
    await valve.pause(60_000);
    const options = { apiKey: 'sk-test', baseURL: srv.url, fetch: valve.wrapFetch(fetch), maxRetries: 0 };
    const openai = new OpenAI(options);
    const viaOpenAI = await openai.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [] })
      .catch((e: unknown) => e);
    expect(viaOpenAI).toBeInstanceOf(OpenAI.APIConnectionError);
    expect(isValveError(viaOpenAI, 'MAX_WAIT')).toBe(false);
    expect(isValveError((viaOpenAI as Error).cause, 'MAX_WAIT')).toBe(true);
    // The docs' handler tells it apart.
    const replies: [number, string][] = [];
    const reply = (status: number, body: string) => {
      replies.push([status, body]);
      return 'replied' as const;
    };
    expect(await complete(openai, { model: 'gpt-4o-mini', messages: [] }, reply)).toBe('replied');
    expect(replies).toEqual([[503, 'busy, try again']]);

    const anthropic = new Anthropic(options);
    const viaAnthropic = await anthropic.messages
      .create({ model: 'claude-sonnet-4-5', max_tokens: 1, messages: [] })
      .catch((e: unknown) => e);
    expect(viaAnthropic).toBeInstanceOf(Anthropic.APIConnectionError);
    expect(isValveError((viaAnthropic as Error).cause, 'MAX_WAIT')).toBe(true);

    const stripe = createStripe(valve, 'sk_test_1', { host: '127.0.0.1', port: srv.port, protocol: 'http' });
    const viaStripe = await stripe.customers.create({ description: 'x' }).catch((e: unknown) => e);
    expect(viaStripe).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(isValveError((viaStripe as Stripe.errors.StripeConnectionError).detail, 'MAX_WAIT')).toBe(true);
    expect(srv.seen()).toBe(0);
  });

  it('a request in flight when close() (without drain) runs: the connection error, CLOSED as its cause', async () => {
    const srv = await slowServer(5_000);
    const valve = createValve({ id: 'sdk', store: memoryStore() });
    const openai = new OpenAI({
      apiKey: 'sk-test',
      baseURL: srv.url,
      fetch: valve.wrapFetch(fetch),
      maxRetries: 0,
    });
    const call = openai.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [] })
      .catch((e: unknown) => e);
    while (srv.seen() < 1) await new Promise((r) => setTimeout(r, 10));
    await valve.close();
    const error = await call;
    expect(error).toBeInstanceOf(OpenAI.APIConnectionError);
    expect(isValveError(error, 'CLOSED')).toBe(false);
    expect(isValveError((error as Error).cause, 'CLOSED')).toBe(true);
  });
});

describe('Anthropic (examples/anthropic.ts)', () => {
  it(`${N} concurrent callers all succeed inside Anthropic's announced pauses, the SDK never retrying`, async () => {
    const api = await fake('anthropic', { limit: 4, windowMs: 400 });
    const client = createAnthropic({ apiKey: 'sk-ant-test', baseURL: api.url, rpm: 60_000, otpm: 100_000 });
    closers.push(client.close);
    const pauses = recordPauses(client.requests);
    const retries: number[] = [];
    client.requests.on('retry', ({ attempt }) => retries.push(attempt));

    const results = await Promise.all(Array.from({ length: N }, (_, i) => client.ask(`Say call-${i}.`, 16)));
    expect(results.map((r) => r.content[0]?.type === 'text' && r.content[0].text)).toEqual(
      Array(N).fill('ok'),
    );
    expect(api.log.filter((r) => r.status === 200)).toHaveLength(N);
    expect(insideAnnouncedPauses(api.log, pauses)).toEqual([]);
    expect(api.log.some((r) => r.blockedUntil !== undefined)).toBe(true);
    expect(new Set(api.log.map((r) => r.sdkRetry))).toEqual(new Set(['0']));
    for (const [, attempts] of attemptsPerCall(api.log, /call-(\d+)/))
      expect(attempts).toBeLessThanOrEqual(4);
    expect(api.log).toHaveLength(N + retries.length);
    // Every message's output tokens were charged to the output-token rule.
    expect(client.outputTokens.stats().started).toBe(N);
  });

  it("a call that only gets 429s makes valve's 4 attempts, the SDK none of its own", async () => {
    const api = await fake('anthropic', { limit: 4, windowMs: 400, always429: true });
    const client = createAnthropic({ apiKey: 'sk-ant-test', baseURL: api.url });
    closers.push(client.close);
    const error = await client.ask('Say call-0.', 16).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.RateLimitError);
    expect(api.log.map((r) => [r.status, r.sdkRetry])).toEqual(Array(4).fill([429, '0']));
  }, 20_000);

  it('a call aborted while queued rejects at once and never reaches Anthropic', async () => {
    const api = await fake('anthropic', { limit: 4, windowMs: 400 });
    const client = createAnthropic({ apiKey: 'sk-ant-test', baseURL: api.url });
    closers.push(client.close);
    await client.requests.pause(60_000);
    const controller = new AbortController();
    const settled = client.ask('Say call-0.', 16, controller.signal).catch((e: unknown) => e);
    await queued(client.requests);
    controller.abort();
    expect(await settled).toBeInstanceOf(Anthropic.APIUserAbortError);
    expect(api.log).toEqual([]);
  });

  it("a call aborted while its output tokens' charge waits rejects with APIUserAbortError, and the tokens are still charged", async () => {
    // otpm 100 a minute (0.6 s a token); each message reports 51 output tokens.
    const api = await fake('anthropic', { limit: 50, windowMs: 1000, usage: { input: 1, output: 51 } });
    const client = createAnthropic({ apiKey: 'sk-ant-test', baseURL: api.url, rpm: 60_000, otpm: 100 });
    closers.push(client.close);
    await client.ask('Say call-0.', 16); // 51 of 100 spent
    const controller = new AbortController();
    const settled = client.ask('Say call-1.', 16, controller.signal).catch((e: unknown) => e);
    // The second message was answered; its 51 tokens wait for 2 more to come back (1.2 s).
    await queued(client.outputTokens);
    expect(api.log).toHaveLength(2);
    controller.abort();
    expect(await settled).toBeInstanceOf(Anthropic.APIUserAbortError);
    expect(client.outputTokens.stats()).toMatchObject({ started: 1, queued: 1 });
    // The charge goes through all the same.
    while (client.outputTokens.stats().started < 2) await new Promise((r) => setTimeout(r, 20));
    expect(client.outputTokens.stats()).toMatchObject({ started: 2, queued: 0, failed: 0 });
  });
});

describe('Stripe (examples/stripe.ts)', () => {
  const stripeValve = (limit: number) => {
    // Stripe sends no rate-limit header: its 429s back off (shortened here to keep the test quick).
    const valve = createValve({
      id: 'stripe:acct_test',
      rules: { limit, interval: '1s' },
      store: memoryStore(),
      feedback: { backoffInitial: '100ms' },
    });
    closers.push(() => valve.close());
    return valve;
  };
  const endpoint = (api: FakeApi) => ({ host: '127.0.0.1', port: api.port, protocol: 'http' as const });

  it(`${N} concurrent callers all succeed, Stripe's 429s retried by valve alone`, async () => {
    const api = await fake('stripe', { limit: 4, windowMs: 400 });
    const valve = stripeValve(20); // looser than the fake's 10/s: 429s happen, valve backs off
    const retries: number[] = [];
    valve.on('retry', ({ attempt }) => retries.push(attempt));
    const stripe = createStripe(valve, 'sk_test_1', endpoint(api));
    const customers = await Promise.all(
      Array.from({ length: N }, (_, i) => stripe.customers.create({ description: `call-${i}` })),
    );
    expect(customers.map((c) => c.object)).toEqual(Array(N).fill('customer'));
    expect(api.log.filter((r) => r.status === 200)).toHaveLength(N);
    expect(api.log.some((r) => r.status === 429)).toBe(true);
    for (const [, attempts] of attemptsPerCall(api.log, /call-(\d+)/))
      expect(attempts).toBeLessThanOrEqual(4);
    // Every request the provider saw was an attempt of valve's: Stripe retried none itself.
    expect(api.log).toHaveLength(N + retries.length);
  });

  it("a call that only gets 429s (Stripe-Should-Retry: true) makes valve's 4 attempts", async () => {
    const api = await fake('stripe', { limit: 4, windowMs: 400, always429: true });
    const stripe = createStripe(stripeValve(20), 'sk_test_1', endpoint(api));
    const error = await stripe.customers.create({ description: 'call-0' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Stripe.errors.StripeRateLimitError);
    expect(api.log.map((r) => r.status)).toEqual([429, 429, 429, 429]);
  });

  it('a call whose timeout fires while queued rejects at once and never reaches Stripe', async () => {
    const api = await fake('stripe', { limit: 4, windowMs: 400 });
    const valve = stripeValve(20);
    const stripe = createStripe(valve, 'sk_test_1', endpoint(api));
    await valve.pause(60_000);
    // stripe-node takes no AbortSignal: its per-request timeout aborts the fetch it made.
    const error = await stripe.customers
      .create({ description: 'call-0' }, { timeout: 100 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(valve.stats().queued).toBe(0);
    expect(api.log).toEqual([]);
  });

  it('a connection closed before the answer rejects with StripeConnectionError after one request; calling again with the same idempotencyKey goes through valve', async () => {
    // stripe-node retries a closed connection itself only with its Node HTTP client: the fetch
    // client's error carries its code on `cause`, which stripe-node does not look at.
    const keys: (string | undefined)[] = [];
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        keys.push(req.headers['idempotency-key'] as string | undefined);
        if (keys.length === 1) return void req.socket.destroy();
        res
          .writeHead(200, { 'content-type': 'application/json', 'request-id': 'req_1' })
          .end(JSON.stringify({ id: 'cus_1', object: 'customer' }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(
      () =>
        new Promise((resolve) => {
          server.closeAllConnections();
          server.close(resolve);
        }),
    );
    const port = (server.address() as AddressInfo).port;
    const valve = stripeValve(20);
    const stripe = createStripe(valve, 'sk_test_1', { host: '127.0.0.1', port, protocol: 'http' });
    const params = { description: 'call-0' };
    const first = await stripe.customers.create(params, { idempotencyKey: 'k-1' }).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(keys).toEqual(['k-1']);
    const again = await stripe.customers.create(params, { idempotencyKey: 'k-1' });
    expect(again.id).toBe('cus_1');
    expect(keys).toEqual(['k-1', 'k-1']);
    expect(valve.stats().started).toBe(2);
  });
});
