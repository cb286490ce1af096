/**
 * ky (examples/ky.ts), valve/undici (examples/undici.ts) and valve/axios (examples/axios.ts) with
 * the real packages, against a local server that answers as express-rate-limit does (IETF
 * draft-8 fields, 429 with Retry-After: test/helpers/fake-apis.ts `generic`) and against the
 * real express-rate-limit (test/helpers/real-limiters.ts). For each: N concurrent callers all
 * succeed, the server sees no request inside a pause it announced (except those in flight),
 * retries don't stack (each call makes at most valve's 1 + 3 attempts, the client none of its
 * own), and a call aborted while queued rejects at once without reaching the server. Then what
 * each keeps of its client's semantics (errors, bodies, cancellation).
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough, Readable } from 'node:stream';
import axios, { AxiosError, getAdapter, type InternalAxiosRequestConfig } from 'axios';
import { HTTPError } from 'ky';
import OpenAI from 'openai';
import Stripe from 'stripe';
import {
  Agent,
  type Dispatcher,
  getGlobalDispatcher,
  request,
  setGlobalDispatcher,
  FormData as UndiciFormData,
  fetch as undiciFetch,
} from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createAxios } from '../../examples/axios.js';
import { createKy } from '../../examples/ky.js';
import { createDispatcher } from '../../examples/undici.js';
import { valveAdapter } from '../../src/axios.js';
import {
  createValve,
  createValveGroup,
  isValveError,
  memoryStore,
  type Valve,
  type ValveGroup,
} from '../../src/index.js';
import { requestHeader, valveInterceptor } from '../../src/undici.js';
import { insideAnnouncedPauses, recordPauses, stampedFetch } from '../helpers/announced-pauses.js';
import { type FakeApi, startFakeApi } from '../helpers/fake-apis.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { startRealLimiter } from '../helpers/real-limiters.js';

const now = (): number => performance.timeOrigin + performance.now();
const N = 12;
const LIMIT = { limit: 5, windowMs: 500 };

const servers: FakeApi[] = [];
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c()));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

async function fake(always429 = false): Promise<FakeApi> {
  const server = await startFakeApi('generic', { ...LIMIT, always429 });
  servers.push(server);
  return server;
}

function valve(rules = { limit: 40, interval: '1s' }): Valve {
  const v = createValve({ id: 'api', rules, store: memoryStore() });
  closers.push(() => v.close());
  return v;
}

function group(): ValveGroup {
  const g = createValveGroup({ rules: { limit: 40, interval: '1s' }, store: memoryStore() });
  closers.push(() => g.close());
  return g;
}

function retriesOf(source: Valve | ValveGroup): number[] {
  const retries: number[] = [];
  (source as Valve).on('retry', ({ attempt }) => retries.push(attempt));
  return retries;
}

/** The common proof: all succeeded, no request inside an announced pause, no stacking. */
function expectWellBehaved(api: FakeApi, pauses: ReturnType<typeof recordPauses>, retries: number[]): void {
  expect(api.log.filter((r) => r.status === 200)).toHaveLength(N);
  expect(insideAnnouncedPauses(api.log, pauses)).toEqual([]);
  // The server announced pauses (its window ran out), so the check above had work to do.
  expect(api.log.some((r) => r.blockedUntil !== undefined)).toBe(true);
  expect(api.log.every((r) => r.sentAt !== undefined)).toBe(true);
  const perCall = new Map<string | undefined, number>();
  for (const r of api.log) perCall.set(r.call, (perCall.get(r.call) ?? 0) + 1);
  expect(perCall.size).toBe(N);
  for (const attempts of perCall.values()) expect(attempts).toBeLessThanOrEqual(4);
  // Every request the server saw was an attempt of valve's: the client retried nothing itself.
  expect(api.log).toHaveLength(N + retries.length);
}

async function queued(source: { stats(): { queued: number } }, n = 1): Promise<void> {
  while (source.stats().queued < n) await new Promise((r) => setImmediate(r));
}

describe('ky (examples/ky.ts)', () => {
  const realFetch = globalThis.fetch;
  beforeAll(() => {
    globalThis.fetch = stampedFetch(realFetch);
  });
  afterAll(() => {
    globalThis.fetch = realFetch;
  });

  it(`${N} concurrent callers all succeed inside the announced pauses, ky retrying nothing`, async () => {
    const api = await fake();
    const v = valve();
    const pauses = recordPauses(v);
    const retries = retriesOf(v);
    const client = createKy(v, api.url);
    const bodies = await Promise.all(
      Array.from({ length: N }, (_, i) => client.get(`items/${i}`, { headers: { 'x-call': `${i}` } }).json()),
    );
    expect(bodies).toHaveLength(N);
    expectWellBehaved(api, pauses, retries);
  });

  it("a call that only gets 429s makes valve's 4 attempts, then ky's HTTPError", async () => {
    const api = await fake(true);
    const v = createValve({ id: 'api', feedback: { backoffInitial: '10ms' } });
    closers.push(() => v.close());
    const error = await createKy(v, api.url)
      .get('items/1')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HTTPError);
    expect((error as HTTPError).response.status).toBe(429);
    expect(api.log).toHaveLength(4);
  });

  it('a call aborted while queued rejects at once and never reaches the server', async () => {
    const api = await fake();
    const v = valve();
    await v.pause(60_000);
    const controller = new AbortController();
    const settled = createKy(v, api.url)
      .get('items/1', { signal: controller.signal })
      .catch((e: unknown) => e);
    await queued(v);
    controller.abort();
    expect((await settled) as Error).toMatchObject({ name: 'AbortError' });
    expect(api.log).toEqual([]);
  });

  it('a call that does not start within maxWait rejects with the ValveError, never sent', async () => {
    const api = await fake();
    const v = createValve({ id: 'api', maxWait: 50 });
    closers.push(() => v.close());
    await v.pause(60_000);
    const error = await createKy(v, api.url)
      .get('items/1')
      .catch((e: unknown) => e);
    expect(isValveError(error, 'MAX_WAIT')).toBe(true);
    expect(api.log).toEqual([]);
  });

  it("a call whose retry does not start within maxWait gets ky's HTTPError for the 429 it had", async () => {
    const api = await fake(true);
    // A bare 429 backs off 1 s: the retry cannot start within 100 ms.
    const v = createValve({ id: 'api', store: memoryStore(), maxWait: 100 });
    closers.push(() => v.close());
    const error = await createKy(v, api.url)
      .get('items/1')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HTTPError);
    expect((error as HTTPError).response.status).toBe(429);
    expect(await (error as HTTPError).response.json()).toEqual({ title: 'Too Many Requests', status: 429 });
    expect(api.log).toHaveLength(1);
  });

  it("a call that waits in valve's queue longer than ky's default timeout (10 s) is sent, not timed out", async () => {
    const api = await fake();
    const clock = new FakeClock();
    const v = createValve({ id: 'api', clock, store: memoryStore({ clock }) });
    closers.push(() => v.close());
    await v.pause(60_000);
    // ky arms its timeout with the global setTimeout: faked while the call waits in the queue.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    let settled: Promise<unknown>;
    try {
      settled = createKy(v, api.url)
        .get('items/1')
        .then((res) => res.status)
        .catch((e: unknown) => e);
      await queued(v);
      vi.advanceTimersByTime(11_000);
    } finally {
      vi.useRealTimers();
    }
    await clock.tickAsync(60_000); // the pause ends
    expect(await settled).toBe(200);
    expect(api.log).toHaveLength(1);
  });
});

/** An interceptor that stamps x-sent-at as the request leaves (composed inside valve's). */
const stamp: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) => {
  const headers: [string, string][] = [];
  const raw = opts.headers as unknown;
  if (Array.isArray(raw)) {
    if (Array.isArray(raw[0])) for (const [k, v] of raw as [string, string][]) headers.push([k, v]);
    else for (let i = 0; i + 1 < raw.length; i += 2) headers.push([String(raw[i]), String(raw[i + 1])]);
  } else if (raw && typeof raw === 'object') {
    const entries =
      typeof (raw as Iterable<unknown>)[Symbol.iterator] === 'function'
        ? [...(raw as Iterable<[string, string]>)]
        : Object.entries(raw as Record<string, string>);
    for (const [k, v] of entries) headers.push([k, String(v)]);
  }
  headers.push(['x-sent-at', String(now())]);
  return dispatch({ ...opts, headers: headers.flat() }, handler);
};

/** A local server answering with `handle`, closed (connections and all) after the test. */
async function serve(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** What a server wrote of one streamed answer. */
interface Streamed {
  written: number;
  /** res.write() returned false and no 'drain' came since: the client is not reading. */
  waiting: boolean;
  /** Every byte was handed to the socket ('finish'). */
  finished: boolean;
  /** The connection closed before that. */
  cut: boolean;
}

/**
 * Writes `body` in 16 KiB chunks, waiting for 'drain' whenever res.write() says to; then ends
 * with `trailers`, or, with `cutAt`, destroys the connection once that many bytes are written.
 */
function streamBody(
  res: ServerResponse,
  body: Buffer,
  end: { trailers?: Record<string, string>; cutAt?: number } = {},
): Streamed {
  const state: Streamed = { written: 0, waiting: false, finished: false, cut: false };
  res.on('finish', () => {
    state.finished = true;
  });
  res.on('close', () => {
    if (!state.finished) state.cut = true;
  });
  const pump = () => {
    state.waiting = false;
    while (state.written < body.length) {
      if (res.destroyed) return;
      if (end.cutAt !== undefined && state.written >= end.cutAt) {
        res.destroy();
        return;
      }
      const chunk = body.subarray(state.written, state.written + 16_384);
      state.written += chunk.length;
      if (!res.write(chunk)) {
        state.waiting = true;
        res.once('drain', pump);
        return;
      }
    }
    if (end.trailers) res.addTrailers(end.trailers);
    res.end();
  };
  pump();
  return state;
}

const sha256 = (data: Uint8Array): string => createHash('sha256').update(data).digest('hex');

/** An interceptor (composed inside valve's) logging the pause() and resume() valve's attempts call. */
function spyControllers(log: string[]): Dispatcher.DispatcherComposeInterceptor {
  return (dispatch) => (opts, handler) => {
    let spied: Dispatcher.DispatchController | undefined;
    const wrap = (c: Dispatcher.DispatchController): Dispatcher.DispatchController => {
      spied ??= {
        abort: (reason) => c.abort(reason),
        pause: () => {
          log.push('pause');
          c.pause();
        },
        resume: () => {
          log.push('resume');
          c.resume();
        },
        get aborted() {
          return c.aborted;
        },
        get paused() {
          return c.paused;
        },
        get reason() {
          return c.reason;
        },
      };
      return spied;
    };
    return dispatch(opts, {
      onRequestStart: (c, context) => handler.onRequestStart?.(wrap(c), context),
      onResponseStart: (c, status, headers, message) =>
        handler.onResponseStart?.(wrap(c), status, headers, message),
      onResponseData: (c, chunk) => handler.onResponseData?.(wrap(c), chunk),
      onResponseEnd: (c, trailers) => handler.onResponseEnd?.(wrap(c), trailers),
      onResponseError: (c, err) => handler.onResponseError?.(wrap(c), err),
    });
  };
}

describe('valve/undici (examples/undici.ts)', () => {
  let previous: Dispatcher;
  beforeAll(() => {
    previous = getGlobalDispatcher();
  });
  afterEach(() => {
    setGlobalDispatcher(previous);
  });

  it(`${N} concurrent callers through Node's global fetch, one valve per host and credential: all succeed inside the announced pauses`, async () => {
    const api = await fake();
    const g = group();
    const pauses = recordPauses(g);
    const retries = retriesOf(g);
    const key = (req: Dispatcher.DispatchOptions) => `${req.origin}:${requestHeader(req, 'authorization')}`;
    const agent = new Agent().compose(stamp, valveInterceptor({ group: g, key }));
    closers.push(() => agent.close());
    setGlobalDispatcher(agent);
    const responses = await Promise.all(
      Array.from({ length: N }, (_, i) =>
        fetch(`${api.url}/items/${i}`, { headers: { authorization: 'Bearer a', 'x-call': `${i}` } }).then(
          (r) => r.json(),
        ),
      ),
    );
    expect(responses.every((b) => (b as { ok?: unknown }).ok === true)).toBe(true);
    expect(g.size).toBe(1);
    expectWellBehaved(api, pauses, retries);
  });

  it("the example's dispatcher: fetch() and request() both go through the valve of their credential", async () => {
    const api = await fake();
    const g = group();
    const dispatcher = createDispatcher(g);
    closers.push(() => dispatcher.close());
    const viaFetch = await fetch(`${api.url}/items`, { headers: { authorization: 'Bearer token-a' } });
    const viaRequest = await request(`${api.url}/items`, { headers: { authorization: 'Bearer token-b' } });
    const viaUndiciFetch = await undiciFetch(`${api.url}/items`, {
      headers: { authorization: 'Bearer token-a' },
    });
    expect([viaFetch.status, viaRequest.statusCode, viaUndiciFetch.status]).toEqual([200, 200, 200]);
    expect(await viaRequest.body.json()).toMatchObject({ ok: true });
    await Promise.all([viaFetch.text(), viaUndiciFetch.text()]);
    // Two credentials on one host: two valves, whose ids carry no token.
    expect(g.size).toBe(2);
    expect(g.stats().started).toBe(3);
  });

  it('against the real express-rate-limit: every call through the global fetch succeeds', async () => {
    const limiter = await startRealLimiter('express', { limit: 5, windowMs: 500 });
    closers.push(() => limiter.stop());
    const v = valve();
    const retries = retriesOf(v);
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    setGlobalDispatcher(agent);
    const statuses = await Promise.all(
      Array.from({ length: N }, () =>
        fetch(`${limiter.url}/`).then(async (r) => {
          await r.text();
          return r.status;
        }),
      ),
    );
    expect(statuses).toEqual(Array(N).fill(200));
    expect(limiter.log).toHaveLength(N + retries.length);
  });

  it('the OpenAI SDK on the global fetch (no wrapFetch): its POSTs are retried at their place, 4 attempts for a call that only gets 429s', async () => {
    const api = await startFakeApi('openai', { limit: 4, windowMs: 400, always429: true });
    servers.push(api);
    const v = valve();
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    setGlobalDispatcher(agent);
    const openai = new OpenAI({ apiKey: 'sk-test', baseURL: api.url, maxRetries: 0 });
    const error = await openai.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Say call-0.' }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    // fetch() streams its bodies: the interceptor read this one first, and sent it 4 times.
    expect(api.log.map((r) => r.body)).toEqual(Array(4).fill(api.log[0]?.body));
    expect(api.log[0]?.body).toContain('call-0');
  });

  it("stripe-node's fetch client on the global fetch: its Content-Length, which Node 20's fetch repeats, is sent once", async () => {
    // Node 20's bundled fetch sends `content-length: N, N` when the caller sets it; undici 7 refuses that.
    const api = await startFakeApi('stripe', { limit: 4, windowMs: 400, always429: true });
    servers.push(api);
    const v = createValve({ id: 'stripe:acct_test', feedback: { backoffInitial: '10ms' } });
    closers.push(() => v.close());
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    setGlobalDispatcher(agent);
    const stripe = new Stripe('sk_test_1', {
      httpClient: Stripe.createFetchHttpClient(),
      maxNetworkRetries: 0,
      host: '127.0.0.1',
      port: api.port,
      protocol: 'http',
    });
    const error = await stripe.customers.create({ description: 'call-0' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Stripe.errors.StripeRateLimitError);
    expect(api.log.map((r) => r.body)).toEqual(Array(4).fill('description=call-0'));
  });

  it("a 429 is retried up to valve's attempts, and the caller gets the last answer with its body", async () => {
    const api = await fake(true);
    const v = createValve({ id: 'api', feedback: { backoffInitial: '10ms' } });
    closers.push(() => v.close());
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    const res = await request(`${api.url}/items`, { method: 'POST', body: '{"a":1}', dispatcher: agent });
    expect(res.statusCode).toBe(429);
    expect(await res.body.json()).toEqual({ title: 'Too Many Requests', status: 429 });
    expect(api.log.map((r) => r.body)).toEqual(Array(4).fill('{"a":1}'));
  });

  it('fetch() bodies (streamed) and small streams are read first and sent again on each retry; a longer stream once', async () => {
    const api = await fake(true);
    const v = createValve({ id: 'api', feedback: { backoffInitial: '10ms' } });
    closers.push(() => v.close());
    const agent = new Agent().compose(valveInterceptor({ valve: v, maxBufferedBody: 16 }));
    closers.push(() => agent.close());
    setGlobalDispatcher(agent);
    const viaFetch = await fetch(`${api.url}/items`, { method: 'POST', body: '{"fetch":1}' });
    expect(viaFetch.status).toBe(429);
    await viaFetch.text();
    expect(api.log.map((r) => r.body)).toEqual(Array(4).fill('{"fetch":1}'));

    api.log.length = 0;
    const small = await request(`${api.url}/items`, {
      method: 'POST',
      body: Readable.from(['{"a":', '1}']),
      dispatcher: agent,
    });
    expect(small.statusCode).toBe(429);
    await small.body.text();
    expect(api.log.map((r) => r.body)).toEqual(Array(4).fill('{"a":1}'));

    api.log.length = 0;
    const long = '{"long":"0123456789abcdef"}'; // 27 bytes, over maxBufferedBody (16)
    const once = await request(`${api.url}/items`, {
      method: 'POST',
      body: Readable.from([long.slice(0, 10), long.slice(10)]),
      dispatcher: agent,
    });
    expect(once.statusCode).toBe(429);
    await once.body.text();
    expect(api.log.map((r) => r.body)).toEqual([long]);
  });

  it("undici's FormData given to request() is sent again as it is", async () => {
    const api = await fake(true);
    const v = createValve({ id: 'api', feedback: { backoffInitial: '10ms' } });
    closers.push(() => v.close());
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    const form = new UndiciFormData();
    form.append('field', 'form-value');
    const viaForm = await request(`${api.url}/items`, { method: 'POST', body: form, dispatcher: agent });
    expect(viaForm.statusCode).toBe(429);
    await viaForm.body.text();
    expect(api.log).toHaveLength(4);
    for (const r of api.log) expect(r.body).toMatch(/name="field"\r\n\r\nform-value\r\n/);
  });

  it('a call aborted while queued rejects at once and never reaches the server (fetch and request)', async () => {
    const api = await fake();
    const v = valve();
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    setGlobalDispatcher(agent);
    await v.pause(60_000);
    const a = new AbortController();
    const b = new AbortController();
    const viaFetch = fetch(`${api.url}/items`, { signal: a.signal }).catch((e: unknown) => e);
    const viaRequest = request(`${api.url}/items`, { signal: b.signal, dispatcher: agent }).catch(
      (e: unknown) => e,
    );
    await queued(v, 2);
    a.abort();
    b.abort();
    expect(await viaFetch).toMatchObject({ name: 'AbortError' });
    expect(await viaRequest).toMatchObject({ name: 'AbortError' });
    expect(v.stats().queued).toBe(0);
    expect(api.log).toEqual([]);
  });

  for (const drain of [false, true]) {
    it(`a call whose retry waits when the valve closes (drain: ${drain}) gets the 429 it had, body intact; nothing more is sent`, async () => {
      const api = await fake(true);
      const v = createValve({ id: 'api', store: memoryStore() });
      closers.push(() => v.close());
      const agent = new Agent().compose(valveInterceptor({ valve: v }));
      closers.push(() => agent.close());
      const retried = new Promise((resolve) => v.once('retry', resolve));
      const answer = request(`${api.url}/items`, { dispatcher: agent });
      await retried;
      await v.close({ drain });
      const res = await answer;
      expect(res.statusCode).toBe(429);
      expect(await res.body.json()).toEqual({ title: 'Too Many Requests', status: 429 });
      expect(api.log).toHaveLength(1);
    });
  }

  it('a call whose retry does not start within maxWait gets the 429 it had (fetch and request)', async () => {
    const api = await fake(true);
    // A bare 429 backs off 1 s: the retry cannot start within 100 ms.
    const v = createValve({ id: 'api', store: memoryStore(), maxWait: 100 });
    closers.push(() => v.close());
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    setGlobalDispatcher(agent);
    const viaRequest = await request(`${api.url}/items`, { dispatcher: agent });
    expect(viaRequest.statusCode).toBe(429);
    expect(await viaRequest.body.json()).toEqual({ title: 'Too Many Requests', status: 429 });
    await v.resume();
    const viaFetch = await fetch(`${api.url}/items`);
    expect(viaFetch.status).toBe(429);
    expect(await viaFetch.json()).toEqual({ title: 'Too Many Requests', status: 429 });
    expect(api.log).toHaveLength(2);
  });

  it('a request aborted once its 429 arrived, before valve hands that answer over, rejects with the abort', async () => {
    // A 429 whose body is still streaming when valve reads its headers.
    const url = await serve((_req, res) => {
      res.writeHead(429, { 'retry-after': '1' });
      res.write('slow ');
      setTimeout(() => res.end('down'), 100);
    });
    const v = createValve({ id: 'api', store: memoryStore() });
    closers.push(() => v.close());
    const agent = new Agent().compose(valveInterceptor({ valve: v, retries: 0 }));
    closers.push(() => agent.close());
    const controller = new AbortController();
    // The pause is written as the 429's headers are read, before the answer is handed over.
    v.on('pause', () => controller.abort(new Error('caller gave up')));
    const settled = await request(url, { dispatcher: agent, signal: controller.signal }).then(
      (res) => `resolved ${res.statusCode}`,
      (e: unknown) => e,
    );
    expect(settled).toMatchObject({ message: 'caller gave up' });
  });

  it('a request aborted while its streamed body is read (a producer that stalls) rejects at once', async () => {
    const api = await fake();
    const v = valve();
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    const body = new PassThrough();
    body.write('partial');
    const controller = new AbortController();
    const call = request(`${api.url}/items`, {
      method: 'POST',
      body,
      signal: controller.signal,
      dispatcher: agent,
    });
    const outcome = call.then(
      () => 'resolved',
      (e: unknown) => e,
    );
    setTimeout(() => controller.abort(new Error('user abort')), 50);
    const first = await Promise.race([
      outcome,
      new Promise((r) => setTimeout(() => r('still pending'), 2000)),
    ]);
    expect(first).toMatchObject({ message: 'user abort' });
    expect(body.destroyed).toBe(true);
    expect(api.log).toEqual([]);
  });

  it('a held 429 with a 64 MiB body is read only up to 64 KiB: the server meets back-pressure until the retry, whose 200 the caller gets whole', async () => {
    const big = Buffer.alloc(64 * 1024 * 1024, 'x');
    const ok = randomBytes(256 * 1024);
    let held: Streamed | undefined;
    let atRetry: { written: number; finished: boolean } | undefined;
    const url = await serve((_req, res) => {
      if (held === undefined) {
        res.writeHead(429, { 'retry-after': '60', 'content-length': String(big.length) });
        held = streamBody(res, big);
        return;
      }
      atRetry = { written: held.written, finished: held.finished };
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.end(ok);
    });
    const log: string[] = [];
    const v = createValve({ id: 'api', store: memoryStore() });
    closers.push(() => v.close());
    const agent = new Agent().compose(spyControllers(log), valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    const retried = new Promise((resolve) => v.once('retry', resolve));
    const answer = request(url, { dispatcher: agent });
    await retried;
    // The held attempt paused itself, and the server's writes stalled: it waits for a 'drain'.
    await vi.waitFor(() => expect([log, held?.waiting]).toEqual([['pause'], true]), { timeout: 10_000 });
    // Its retry waits out the 60 s pause; lifting it sends the retry now.
    await v.resume();
    const res = await answer;
    expect(res.statusCode).toBe(200);
    expect(sha256(Buffer.from(await res.body.arrayBuffer()))).toBe(sha256(ok));
    // Until the retry was sent, what the server could write of the held 429 is what the
    // sockets' buffers take (a few MiB), far below the body's size.
    expect(atRetry).toBeDefined();
    expect(atRetry!.finished).toBe(false);
    expect(atRetry!.written).toBeLessThan(big.length / 4);
    // Discarded for the retry, the paused answer's connection is closed, not left hanging.
    await vi.waitFor(() => expect(held?.cut).toBe(true), { timeout: 10_000 });
    expect(held!.finished).toBe(false);
  });

  it('held 429s paused at 64 KiB and then handed over (the valve closes before the retry) reach the caller byte for byte (request and fetch)', async () => {
    const body = randomBytes(1024 * 1024);
    const url = await serve((_req, res) => {
      // Chunked, with a trailer: what the caller gets after the body.
      res.writeHead(429, { 'retry-after': '60', trailer: 'x-digest' });
      streamBody(res, body, { trailers: { 'x-digest': sha256(body) } });
    });
    const log: string[] = [];
    // One valve per call (the first 429's pause would hold the other call in the queue).
    const g = createValveGroup({ store: memoryStore() });
    closers.push(() => g.close());
    const key = (req: Dispatcher.DispatchOptions) => requestHeader(req, 'x-call') ?? '';
    const agent = new Agent().compose(spyControllers(log), valveInterceptor({ group: g, key }));
    closers.push(() => agent.close());
    setGlobalDispatcher(agent);
    let retries = 0;
    g.on('retry', () => retries++);
    const viaRequest = request(url, { dispatcher: agent, headers: { 'x-call': 'request' } });
    const viaFetch = fetch(url, { headers: { 'x-call': 'fetch' } });
    // Both 429s are held, their retries waiting out the 60 s pause; each attempt paused itself.
    await vi.waitFor(() => expect([retries, log.length]).toEqual([2, 2]), { timeout: 10_000 });
    expect(log).toEqual(['pause', 'pause']);
    await g.close();
    const [a, b] = await Promise.all([viaRequest, viaFetch]);
    expect([a.statusCode, b.status]).toEqual([429, 429]);
    const [bytesA, bytesB] = await Promise.all([a.body.arrayBuffer(), b.arrayBuffer()]);
    expect(sha256(new Uint8Array(bytesA))).toBe(sha256(body));
    expect(sha256(new Uint8Array(bytesB))).toBe(sha256(body));
    expect(a.trailers).toEqual({ 'x-digest': sha256(body) });
    expect(log.filter((e) => e === 'resume').length).toBeGreaterThanOrEqual(2);
  });

  it('a held 429 paused at 64 KiB whose connection is cut gives the caller its error, not a short body', async () => {
    const body = randomBytes(1024 * 1024);
    const url = await serve((_req, res) => {
      res.writeHead(429, { 'retry-after': '60', 'content-length': String(body.length) });
      streamBody(res, body, { cutAt: 256 * 1024 });
    });
    const v = createValve({ id: 'api', store: memoryStore() });
    closers.push(() => v.close());
    const agent = new Agent().compose(valveInterceptor({ valve: v }));
    closers.push(() => agent.close());
    const retried = new Promise((resolve) => v.once('retry', resolve));
    const answer = request(url, { dispatcher: agent });
    await retried;
    await v.close();
    const res = await answer;
    expect(res.statusCode).toBe(429);
    const read = await res.body.arrayBuffer().then(
      (bytes) => `read ${bytes.byteLength} bytes`,
      (e: unknown) => e,
    );
    expect(read).toBeInstanceOf(Error);
  });

  it('requests `match` refuses go straight through, even while the valve is paused', async () => {
    const api = await fake();
    const v = valve();
    const agent = new Agent().compose(
      valveInterceptor({ valve: v, match: (req) => !String(req.path).startsWith('/health') }),
    );
    closers.push(() => agent.close());
    await v.pause(60_000);
    const res = await request(`${api.url}/health`, { dispatcher: agent });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    expect(v.stats().started).toBe(0);
  });

  it('bad options throw at once, naming the option', () => {
    const v = valve();
    expect(() => valveInterceptor({} as never)).toThrow(/either `valve`.*got neither/);
    expect(() => valveInterceptor({ valve: v, group: group() } as never)).toThrow(/got both/);
    expect(() => valveInterceptor({ group: group() } as never)).toThrow(TypeError);
    expect(() => valveInterceptor({ valve: v, retry: 0 } as never)).toThrow(/Unknown option `retry`/);
    expect(() => valveInterceptor({ valve: v, retries: -1 })).toThrow(RangeError);
    expect(() => valveInterceptor({ valve: v, match: true } as never)).toThrow(/`match`/);
    expect(() => valveInterceptor({ valve: {} as Valve })).toThrow(/`valve`/);
    expect(() => valveInterceptor({ valve: v, maxBufferedBody: -1 })).toThrow(RangeError);
    expect(() => valveInterceptor({ valve: v, maxBufferedBody: '1mb' } as never)).toThrow(
      /`maxBufferedBody`/,
    );
  });

  it("an unknown option's message lists every option; a valve as `group` (or a group as `valve`) is named as such", () => {
    const v = valve();
    const g = group();
    expect(() => valveInterceptor({ valve: v, retry: 0 } as never)).toThrow(
      'Unknown option `retry`; valveInterceptor() takes `valve`, `group`, `key`, `retries`, `cost`, `priority`, `match` and `maxBufferedBody`',
    );
    expect(() => valveInterceptor({ group: v as never, key: () => 'a' })).toThrow(
      'Expected `group` to be a valve group from createValveGroup(), got a valve (give a valve as `valve`)',
    );
    expect(() => valveInterceptor({ valve: g as never })).toThrow(
      'Expected `valve` to be a valve from createValve(), got a valve group (give a group as `group`, with `key`)',
    );
    expect(() => valveInterceptor({ group: {} as never, key: () => 'a' })).toThrow(
      'Expected `group` to be a valve group from createValveGroup(), got an object',
    );
  });
});

describe('valve/axios (examples/axios.ts)', () => {
  /** axios's http adapter, stamping x-sent-at as the request leaves. */
  const stamped = (config: InternalAxiosRequestConfig) => {
    config.headers.set('x-sent-at', String(now()));
    return getAdapter('http')(config);
  };

  it(`${N} concurrent callers all succeed inside the announced pauses`, async () => {
    const api = await fake();
    const v = valve();
    const pauses = recordPauses(v);
    const retries = retriesOf(v);
    const client = axios.create({ baseURL: api.url, adapter: valveAdapter({ valve: v, adapter: stamped }) });
    const responses = await Promise.all(
      Array.from({ length: N }, (_, i) => client.get(`/items/${i}`, { headers: { 'x-call': `${i}` } })),
    );
    expect(responses.map((r) => r.data.ok)).toEqual(Array(N).fill(true));
    expectWellBehaved(api, pauses, retries);
  });

  it("keeps axios's errors: a 429 after valve's retries and a 404 reject with AxiosError, unless validateStatus accepts them", async () => {
    const api = await fake(true);
    const v = createValve({ id: 'api', feedback: { backoffInitial: '10ms' } });
    closers.push(() => v.close());
    const client = createAxios(v, api.url);
    const error = await client.get('/items').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AxiosError);
    expect(error).toMatchObject({ code: 'ERR_BAD_REQUEST', response: { status: 429 } });
    expect((error as AxiosError).response?.data).toEqual({ title: 'Too Many Requests', status: 429 });
    expect(api.log).toHaveLength(4);

    const accepted = await client.get('/items', { validateStatus: () => true });
    expect(accepted.status).toBe(429);
    expect(accepted.config.validateStatus).toBeTypeOf('function');

    const missing = await createAxios(valve(), 'http://127.0.0.1:1')
      .get('/items')
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(AxiosError);
    expect(missing).toMatchObject({ code: 'ECONNREFUSED' });
    // The error carries the caller's config (resending it behaves as the first call), not
    // valve's attempt config (validateStatus null, valve's signal).
    expect((missing as AxiosError).config?.validateStatus).toBeTypeOf('function');
    expect((missing as AxiosError).config?.signal).toBeUndefined();
  });

  it("names a refused status as axios's settle() does: ERR_BAD_REQUEST only for 4xx", async () => {
    const api = await fake();
    const refused = (client: ReturnType<typeof axios.create>) =>
      client.get('/items/1', { validateStatus: (s) => s === 201 }).catch((e: unknown) => e);
    const plain = await refused(axios.create({ baseURL: api.url }));
    const through = await refused(createAxios(valve(), api.url));
    expect(plain).toMatchObject({ code: 'ERR_BAD_RESPONSE', response: { status: 200 } });
    expect(through).toMatchObject({ code: 'ERR_BAD_RESPONSE', response: { status: 200 } });
  });

  it('a 404 is returned at once (one request), as axios rejects it', async () => {
    const api = await fake();
    const client = createAxios(valve(), api.url);
    const error = await client.get('/missing').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AxiosError);
    expect(error).toMatchObject({ code: 'ERR_BAD_REQUEST', response: { status: 404 } });
    expect(api.log).toHaveLength(1);
  });

  it('a call cancelled while queued (signal or cancelToken) rejects at once with CanceledError, never sent', async () => {
    const api = await fake();
    const v = valve();
    const client = createAxios(v, api.url);
    await v.pause(60_000);
    const controller = new AbortController();
    const source = axios.CancelToken.source();
    const bySignal = client.get('/items', { signal: controller.signal }).catch((e: unknown) => e);
    const byToken = client.get('/items', { cancelToken: source.token }).catch((e: unknown) => e);
    await queued(v, 2);
    controller.abort();
    source.cancel('no longer needed');
    const [a, b] = await Promise.all([bySignal, byToken]);
    expect(axios.isCancel(a)).toBe(true);
    expect(a).toMatchObject({ name: 'CanceledError', code: 'ERR_CANCELED' });
    expect(axios.isCancel(b)).toBe(true);
    expect(b as Error).toMatchObject({ message: 'no longer needed' });
    expect(api.log).toEqual([]);
  });

  it('a request that does not start within maxWait rejects with the ValveError, never sent', async () => {
    const api = await fake();
    const v = createValve({ id: 'api', maxWait: 50 });
    closers.push(() => v.close());
    await v.pause(60_000);
    const error = await createAxios(v, api.url)
      .get('/items')
      .catch((e: unknown) => e);
    expect(isValveError(error, 'MAX_WAIT')).toBe(true);
    expect(api.log).toEqual([]);
  });

  for (const drain of [false, true]) {
    it(`a call whose retry waits when the valve closes (drain: ${drain}) rejects with the AxiosError of the 429 it had; nothing more is sent`, async () => {
      const api = await fake(true);
      const v = createValve({ id: 'api', store: memoryStore() });
      closers.push(() => v.close());
      const retried = new Promise((resolve) => v.once('retry', resolve));
      const answer = createAxios(v, api.url)
        .get('/items')
        .catch((e: unknown) => e);
      await retried;
      await v.close({ drain });
      const error = await answer;
      expect(error).toBeInstanceOf(AxiosError);
      expect(error).toMatchObject({ code: 'ERR_BAD_REQUEST', response: { status: 429 } });
      expect((error as AxiosError).response?.data).toEqual({ title: 'Too Many Requests', status: 429 });
      expect(api.log).toHaveLength(1);
    });
  }

  it('a call whose retry does not start within maxWait gets the 429 it had, as validateStatus decides', async () => {
    const api = await fake(true);
    const v = createValve({ id: 'api', store: memoryStore(), maxWait: 100 });
    closers.push(() => v.close());
    const client = createAxios(v, api.url);
    const error = await client.get('/items').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AxiosError);
    expect(error).toMatchObject({ code: 'ERR_BAD_REQUEST', response: { status: 429 } });
    await v.resume();
    const accepted = await client.get('/items', { validateStatus: () => true });
    expect(accepted.status).toBe(429);
    expect(accepted.data).toEqual({ title: 'Too Many Requests', status: 429 });
    expect(api.log).toHaveLength(2);
  });

  it("reads a held 429 whole, as axios's adapters do; maxContentLength bounds it (that 429 then rejects, not retried)", async () => {
    const big = randomBytes(1024 * 1024);
    let requests = 0;
    const url = await serve((_req, res) => {
      requests++;
      if (requests % 2 === 1) {
        res.writeHead(429, { 'retry-after': '0', 'content-length': String(big.length) });
        res.end(big);
      } else res.end('{"ok":true}');
    });
    const v = createValve({ id: 'api', store: memoryStore() });
    closers.push(() => v.close());
    // Unbounded: the 1 MiB 429 is read and retried, and the retry's answer is the caller's.
    const whole = axios.create({ baseURL: url, adapter: valveAdapter({ valve: v, adapter: 'http' }) });
    expect((await whole.get('/items')).data).toEqual({ ok: true });
    expect(requests).toBe(2);
    // With maxContentLength under the 429's length, axios refuses the answer itself: no retry.
    const bounded = axios.create({
      baseURL: url,
      maxContentLength: 64 * 1024,
      adapter: valveAdapter({ valve: v, adapter: 'http' }),
    });
    const error = await bounded.get('/items').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AxiosError);
    expect((error as AxiosError).message).toMatch(/maxContentLength/);
    expect(requests).toBe(3);
  });

  it('with a group, each request goes through the valve of its key', async () => {
    const api = await fake();
    const g = group();
    const client = axios.create({
      baseURL: api.url,
      adapter: valveAdapter({ group: g, key: (config) => `tenant:${config.headers.get('x-tenant')}` }),
    });
    await Promise.all(['a', 'b', 'a'].map((t) => client.get('/items', { headers: { 'x-tenant': t } })));
    expect(g.size).toBe(2);
    expect(g.valve('tenant:a').stats().started).toBe(2);
  });

  it('bad options throw at once, naming the option', () => {
    expect(() => valveAdapter({} as never)).toThrow(/either `valve`/);
    expect(() => valveAdapter({ valve: valve(), priority: Number.NaN })).toThrow(RangeError);
    expect(() => valveAdapter({ group: group(), key: 'x' } as never)).toThrow(/`key`/);
    // The inner adapter is checked at once too, not at each request.
    expect(() => valveAdapter({ valve: valve(), adapter: 'nonexistent' as never })).toThrow(
      /`adapter` to be one of 'xhr', 'http', 'fetch'.*got "nonexistent"/,
    );
    expect(() => valveAdapter({ valve: valve(), adapter: [] as never })).toThrow(TypeError);
    expect(() => valveAdapter({ valve: valve(), adapter: ['fetch', 'HTTP'] })).not.toThrow();
    expect(() => valveAdapter({ valve: valve(), foo: 1 } as never)).toThrow(
      'Unknown option `foo`; valveAdapter() takes `valve`, `group`, `key`, `retries`, `cost`, `priority` and `adapter`',
    );
    expect(() => valveAdapter({ group: valve() as never, key: () => 'a' })).toThrow(
      /`group` to be a valve group from createValveGroup\(\), got a valve \(give a valve as `valve`\)/,
    );
  });
});

describe("a 503 whose Retry-After is 0: retried after a backoff, as a 429's (wrapFetch, valve/undici, valve/axios)", () => {
  /** A server answering each path's first request 503 with `headers`, then 200. */
  async function busyOnce(headers: Record<string, string>): Promise<{ url: string; seen: string[] }> {
    const seen: string[] = [];
    const url = await serve((req, res) => {
      const first = !seen.includes(req.url!);
      seen.push(req.url!);
      if (first) res.writeHead(503, headers).end('busy');
      else res.end('ok');
    });
    return { url, seen };
  }

  const zeros: Record<string, string>[] = [{ 'retry-after': '0' }, { 'retry-after-ms': '0' }];
  for (const headers of zeros) {
    it(`${Object.keys(headers)[0]}: 0`, async () => {
      const { url, seen } = await busyOnce(headers);
      const v = createValve({ id: 'api', store: memoryStore(), feedback: { backoffInitial: '20ms' } });
      closers.push(() => v.close());
      const ignored: unknown[] = [];
      v.on('feedback-ignored', (e) => ignored.push(e));
      const retries = retriesOf(v);

      const viaFetch = await v.wrapFetch(fetch)(`${url}/fetch`);
      expect(viaFetch.status).toBe(200);
      expect(await viaFetch.text()).toBe('ok');

      const agent = new Agent().compose(valveInterceptor({ valve: v }));
      closers.push(() => agent.close());
      const viaUndici = await request(`${url}/undici`, { dispatcher: agent });
      expect(viaUndici.statusCode).toBe(200);
      expect(await viaUndici.body.text()).toBe('ok');

      const viaAxios = await createAxios(v, url).get('/axios');
      expect(viaAxios.status).toBe(200);

      expect(seen).toEqual(['/fetch', '/fetch', '/undici', '/undici', '/axios', '/axios']);
      expect(retries).toEqual([1, 1, 1]);
      expect(ignored).toMatchObject(Array(3).fill({ reason: 'zero', status: 503 }));
    });
  }

  it('an unparseable Retry-After on a 503 is ignored: the 503 is returned, not retried', async () => {
    const { url, seen } = await busyOnce({ 'retry-after': 'soon' });
    const v = valve();
    const res = await v.wrapFetch(fetch)(`${url}/fetch`);
    expect(res.status).toBe(503);
    await res.text();
    expect(seen).toEqual(['/fetch']);
  });
});

describe('the check itself (insideAnnouncedPauses)', () => {
  const announced = { at: 100, sentAt: 99, blockedUntil: 600 };
  it('finds a request sent after the client learnt of the pause and arriving inside it', () => {
    const late = { at: 300, sentAt: 299 };
    expect(insideAnnouncedPauses([announced, late], [{ at: 110, until: 600 }])).toEqual([late]);
    // No pause event covered it: the client knew from the announcement's arrival on.
    expect(insideAnnouncedPauses([announced, late], [])).toEqual([late]);
  });
  it('lets through requests in flight when the client learnt of it, and requests after its end', () => {
    const inFlight = { at: 120, sentAt: 105 };
    const after = { at: 601, sentAt: 600 };
    expect(insideAnnouncedPauses([announced, inFlight, after], [{ at: 110, until: 600 }])).toEqual([]);
  });
});
