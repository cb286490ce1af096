/**
 * End to end: wrapFetch against a local server that plays each provider with its real
 * header shapes, several concurrent callers, real clock and real sockets.
 *
 * The property checked for every provider: once the client has seen a response that
 * asks it to wait, no request is dispatched, and none reaches the server, until the
 * pause it wrote ends, except requests that were already on their way (granted before
 * the pause).
 */
import { get } from 'node:http';
import { fetch as undiciFetch, request as undiciRequest } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createValve } from '../../src/valve.js';
import { type FakeProvider, type ProviderName, startFakeProvider } from '../helpers/fake-provider.js';

const wall = () => performance.timeOrigin + performance.now();

let server: FakeProvider;

beforeAll(async () => {
  server = await startFakeProvider({
    providers: {
      'github-primary': { limit: 4, windowMs: 1000, limitedStatus: 429 },
      'github-secondary': { limit: 4, windowMs: 1000, limitedStatus: 429 },
      openai: { limit: 4, windowMs: 400 },
      anthropic: { limit: 4, windowMs: 1000 },
      discord: { limit: 4, windowMs: 400 },
      shopify: { limit: 40 },
      stripe: { limit: 4, windowMs: 300 },
      ietf: { limit: 4, windowMs: 1000 },
      'ietf-legacy': { limit: 4, windowMs: 1000 },
      hubspot: { limit: 4, windowMs: 300 },
    },
  });
});

afterAll(async () => {
  await server?.stop();
});

interface Run {
  statuses: number[];
  dispatches: { tag: string; at: number }[];
  /** Responses handed back to the wrapper, by tag: when the client learnt of them. */
  received: Map<string, number>;
  pauses: { at: number; until: number; source: string }[];
  retries: unknown[];
  ignored: unknown[];
}

async function drive(
  provider: ProviderName,
  callers: number,
  options: {
    fetchFn?: typeof fetch;
    concurrency?: number;
    retries?: number;
    on?: FakeProvider;
    rules?: { limit: number; interval: string; burst?: number }[];
  } = {},
): Promise<Run> {
  const target = options.on ?? server;
  const valve = createValve({
    id: `e2e:${provider}`,
    rules: options.rules ?? [{ limit: 1000, interval: '1s', burst: 1000 }],
    concurrency: options.concurrency ?? 3,
    feedback: { backoffInitial: 100, backoffMax: 1000 },
  });
  const run: Run = {
    statuses: [],
    dispatches: [],
    received: new Map(),
    pauses: [],
    retries: [],
    ignored: [],
  };
  valve.on('pause', (e) => run.pauses.push({ at: wall(), until: e.until, source: e.source }));
  valve.on('retry', (e) => run.retries.push(e));
  valve.on('feedback-ignored', (e) => run.ignored.push(e));
  const base = options.fetchFn ?? fetch;
  const recording = async (input: string | URL | Request, init?: RequestInit) => {
    const tag = new Headers(init?.headers).get('x-test-tag') ?? '';
    run.dispatches.push({ tag: `${tag}#${run.dispatches.length}`, at: wall() });
    const res = await base(input, init);
    run.received.set(`${tag}#${run.dispatches.length}`, wall());
    return res;
  };
  const f = valve.wrapFetch(recording as typeof fetch, { retries: options.retries ?? 3 });
  const responses = await Promise.all(
    Array.from({ length: callers }, (_, i) =>
      f(target.urlFor(provider, `/call/${i}`), { headers: { 'x-test-tag': `${provider}-${i}` } }),
    ),
  );
  for (const r of responses) {
    run.statuses.push(r.status);
    await r.arrayBuffer();
  }
  await valve.close();
  return run;
}

/** No dispatch inside any pause the client wrote, and no arrival inside one unless dispatched before it. */
function assertPausesHeld(provider: ProviderName, run: Run, on: FakeProvider = server) {
  const log = on.requests(provider);
  expect(run.pauses.length).toBeGreaterThan(0);
  for (const p of run.pauses) {
    const early = run.dispatches.filter((d) => d.at > p.at + 0.5 && d.at < p.until - 1);
    expect(early, `dispatched during the pause ${JSON.stringify(p)}`).toEqual([]);
    const arrivals = log.filter((r) => r.at > p.at + 0.5 && r.at < p.until - 1);
    // Anything that arrived during the pause was dispatched before the pause was written.
    const inFlight = run.dispatches.filter((d) => d.at <= p.at + 0.5).length;
    expect(arrivals.length).toBeLessThanOrEqual(inFlight);
  }
}

/** The first pause the client wrote covers the provider's own block (header-driven providers). */
function assertCoversSignal(provider: ProviderName, run: Run) {
  const signal = server.firstSignal(provider);
  expect(signal, 'the provider limited or reported 0 remaining').toBeDefined();
  const covering = run.pauses.find((p) => p.until >= signal!.blockedUntil! - 2);
  expect(covering, `a pause until ${signal!.blockedUntil}`).toBeDefined();
  // No request reached the server after the first signal and before its block ended,
  // other than ones already dispatched when the client learnt of the signal (the first pause
  // written after the signal's arrival; a pause written before it, from a remaining count the
  // requests in flight spend, cannot be its answer).
  const learnt = run.pauses.find((p) => p.at >= signal!.at)?.at ?? run.pauses[0]!.at;
  const dispatchedAfter = run.dispatches.filter(
    (d) => d.at > learnt + 0.5 && d.at < signal!.blockedUntil! - 2,
  );
  expect(dispatchedAfter).toEqual([]);
}

const headerDriven: ProviderName[] = [
  'github-primary',
  'github-secondary',
  'openai',
  'anthropic',
  'discord',
  'shopify',
  'ietf',
  'ietf-legacy',
  'hubspot',
];

describe('wrapFetch against providers (local server, several callers)', () => {
  for (const provider of headerDriven) {
    it.concurrent(`${provider}: every caller succeeds; no request reaches the server while paused`, async () => {
      // Shopify's 40-request bucket leaks 2 per second. The rule paces at that rate but allows a
      // burst a little larger than the bucket, so the header has to stop the overflow.
      const run = await drive(
        provider,
        provider === 'shopify' ? 46 : 12,
        provider === 'shopify' ? { concurrency: 8, rules: [{ limit: 2, interval: '1s', burst: 44 }] } : {},
      );
      expect(run.statuses.every((s) => s === 200)).toBe(true);
      assertPausesHeld(provider, run);
      assertCoversSignal(provider, run);
      expect(run.ignored).toEqual([]);
      expect(run.pauses.every((p) => p.source === 'ratelimit-header' || p.source === 'retry-after')).toBe(
        true,
      );
    });
  }

  it.concurrent("stripe's bare 429: exponential backoff until the window frees; every caller succeeds", async () => {
    const run = await drive('stripe', 10, { retries: 10 });
    expect(run.statuses.every((s) => s === 200)).toBe(true);
    expect(server.requests('stripe').some((r) => r.limited)).toBe(true);
    expect(run.pauses.length).toBeGreaterThan(0);
    expect(run.pauses.every((p) => p.source === 'backoff')).toBe(true);
    expect(run.retries.length).toBeGreaterThan(0);
    assertPausesHeld('stripe', run);
  });
});

describe('variants', () => {
  let other: FakeProvider;
  beforeAll(async () => {
    other = await startFakeProvider({
      providers: {
        'github-primary': { limit: 3, windowMs: 1000, limitedStatus: 403 },
        'github-secondary': { limit: 3, windowMs: 1000, limitedStatus: 403 },
        openai: { limit: 4, windowMs: 400 },
        discord: { limit: 4, windowMs: 400 },
      },
    });
  });
  afterAll(async () => {
    await other?.stop();
  });

  it('GitHub primary with 403s: 0 remaining pauses before the limit is hit, so one caller at a time never sees a 403', async () => {
    const valve = createValve({ id: 'gh403', rules: [], concurrency: 1 });
    const f = valve.wrapFetch();
    const statuses = await Promise.all(
      Array.from({ length: 7 }, (_, i) =>
        f(other.urlFor('github-primary', `/repos/${i}`)).then(async (r) => {
          await r.arrayBuffer();
          return r.status;
        }),
      ),
    );
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200]);
    expect(other.requests('github-primary').every((r) => !r.limited)).toBe(true);
    await valve.close();
  });

  it('GitHub secondary with 403 + retry-after: pauses every caller, returns the 403 (not retried)', async () => {
    const valve = createValve({ id: 'gh2-403', rules: [], concurrency: 1 });
    const pauses: number[] = [];
    valve.on('pause', (e) => pauses.push(e.until));
    const f = valve.wrapFetch();
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await f(other.urlFor('github-secondary', `/search/${i}`));
      await r.arrayBuffer();
      statuses.push(r.status);
    }
    expect(statuses.filter((s) => s === 403)).toHaveLength(1);
    expect(pauses).toHaveLength(1);
    const blocked = other.requests('github-secondary').find((r) => r.limited)!;
    const after = other.requests('github-secondary').filter((r) => r.at > blocked.at);
    for (const r of after) expect(r.at).toBeGreaterThanOrEqual(pauses[0]! - 1);
    await valve.close();
  });

  it("works with undici's fetch (openai and discord)", async () => {
    for (const provider of ['openai', 'discord'] as const) {
      const run = await drive(provider, 10, { fetchFn: undiciFetch as unknown as typeof fetch, on: other });
      expect(run.statuses.every((s) => s === 200)).toBe(true);
      assertPausesHeld(provider, run, other);
    }
  });
});

describe('bodies on the wire, control endpoints', () => {
  let srv: FakeProvider;
  beforeAll(async () => {
    srv = await startFakeProvider({ providers: { ietf: { limit: 1, windowMs: 1000 } } });
  });
  afterAll(async () => {
    await srv?.stop();
  });

  it('a retried POST sends the same body again (string, URLSearchParams, Request); a stream is sent once', async () => {
    // A fresh valve per case: the previous case's last 200 said r=0, which pauses its valve.
    let valve = createValve({ id: 'bodies', rules: [], concurrency: 1 });
    const f: typeof fetch = (input, init) => valve.wrapFetch()(input, init);
    const cases: [string, () => Promise<Response>, string, number][] = [
      ['string', () => f(srv.urlFor('ietf', '/s'), { method: 'POST', body: 'plain text' }), 'plain text', 2],
      [
        'params',
        () =>
          f(srv.urlFor('ietf', '/p'), { method: 'POST', body: new URLSearchParams({ a: '1', b: 'x y' }) }),
        'a=1&b=x+y',
        2,
      ],
      [
        'request',
        () => f(new Request(srv.urlFor('ietf', '/r'), { method: 'POST', body: '{"json":true}' })),
        '{"json":true}',
        2,
      ],
    ];
    for (const [name, call, body, attempts] of cases) {
      await valve.close();
      valve = createValve({ id: `bodies-${name}`, rules: [], concurrency: 1 });
      srv.reset();
      // Spend the window so that the call under test gets a 429 first.
      await (await fetch(srv.urlFor('ietf', '/spend'))).arrayBuffer();
      const res = await call();
      expect(res.status, name).toBe(200);
      const sent = srv.log.filter((r) => r.method === 'POST');
      expect(
        sent.map((r) => r.body),
        name,
      ).toEqual(Array(attempts).fill(body));
      expect(sent[0]?.status).toBe(429);
    }
    await valve.close();
    valve = createValve({ id: 'bodies-stream', rules: [], concurrency: 1 });
    srv.reset();
    await (await fetch(srv.urlFor('ietf', '/spend'))).arrayBuffer();
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode('streamed'));
        c.close();
      },
    });
    const res = await f(srv.urlFor('ietf', '/stream'), {
      method: 'POST',
      body: stream,
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(429);
    expect(srv.log.filter((r) => r.method === 'POST').map((r) => r.body)).toEqual(['streamed']);
    await res.arrayBuffer();
    await valve.close();
  });

  it('serves its log and takes configuration over HTTP (for other processes)', async () => {
    srv.reset();
    const configured = await fetch(`${srv.url}/__configure/openai`, {
      method: 'POST',
      body: JSON.stringify({ limit: 1, windowMs: 60_000 }),
    });
    expect(configured.status).toBe(204);
    await (await fetch(srv.urlFor('openai', '/a'), { headers: { 'x-test-tag': 't1' } })).arrayBuffer();
    const second = await fetch(srv.urlFor('openai', '/b'));
    expect(second.status).toBe(429);
    await second.arrayBuffer();
    const log = (await (await fetch(`${srv.url}/__log`)).json()) as {
      tag?: string;
      status: number;
      at: number;
    }[];
    expect(log.map((r) => [r.tag, r.status])).toEqual([
      ['t1', 200],
      [undefined, 429],
    ]);
    expect(log[0]!.at).toBeGreaterThan(Date.now() - 60_000);
    expect((await fetch(`${srv.url}/__reset`, { method: 'POST' })).status).toBe(204);
    expect(srv.log).toEqual([]);
  });
});

describe('observe() with other clients', () => {
  let srv: FakeProvider;
  beforeAll(async () => {
    srv = await startFakeProvider({ providers: { 'github-primary': { limit: 1, windowMs: 60_000 } } });
  });
  afterAll(async () => {
    await srv?.stop();
  });

  it("reads node:http's IncomingMessage and undici.request()'s answer", async () => {
    const valve = createValve({ id: 'clients', rules: [] });
    const message = await new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
      get(srv.urlFor('github-primary', '/http'), resolve).on('error', reject);
    });
    message.resume();
    const viaHttp = valve.observe(message);
    expect(viaHttp).toMatchObject({ source: 'ratelimit-header', header: 'x-ratelimit-reset', status: 200 });
    const { statusCode, headers, body } = await undiciRequest(srv.urlFor('github-primary', '/undici'));
    await body.dump();
    const viaUndici = valve.observe({ statusCode, headers });
    expect(viaUndici).toMatchObject({ source: 'ratelimit-header', status: 429 });
    expect(viaUndici!.until).toBeCloseTo(viaHttp!.until, 0);
    await valve.close();
  });
});
