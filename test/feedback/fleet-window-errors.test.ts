/**
 * wrapFetch's fleet-window calls that fail (docs/provider-feedback.md, "Several processes: the
 * fleet window"; docs/guarantees.md, "Store failures"): the ticket before a request and the report
 * after its answer are store calls like the others. Each failure emits a 'store-error' with
 * operation 'window' and action 'none', counts in stats().storeErrors, and the request still goes
 * (without a ticket). While the valve's acquisitions fail (its onStoreError backoff), no ticket is
 * asked at all: a request started open does not wait a second store timeout for one.
 *
 * On a custom store over the memory store whose window calls throw, and on a real Redis (its own
 * server: some cases stop it with SIGSTOP) holding a window key valve never writes.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StoreErrorContext } from '../../src/events.js';
import { createValveGroup } from '../../src/group.js';
import { instrument } from '../../src/otel.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { Store } from '../../src/stores/store.js';
import { createValve } from '../../src/valve.js';
import { connectClient } from '../helpers/redis-clients.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { collect, meterSetup } from '../otel/reader.js';

/** `inner` with some methods replaced; the others bound to it, so that its state stays its own. */
function withCalls(inner: Store, replace: Partial<Record<keyof Store, unknown>>): Store {
  return new Proxy(inner, {
    get(target, key) {
      if (Object.hasOwn(replace, key)) return replace[key as keyof Store];
      const value = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

const windowError = (id: string): StoreErrorContext => ({ operation: 'window', id, action: 'none' });
const rules = [{ limit: 100, interval: 1000 }];
/** The Redis store's `timeout` (ms). */
const TIMEOUT = 1000;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A provider's answer: a window of 100 with `remaining` left, resetting in `reset` s. */
function answer(remaining = 50, reset = 60): Response {
  return new Response('ok', {
    status: 200,
    headers: { 'x-ratelimit-remaining': String(remaining), 'x-ratelimit-reset': String(reset) },
  });
}

describe('a store whose window calls fail (over the memory store)', () => {
  for (const how of ['throws', 'rejects'] as const) {
    it(`windowSend ${how}: each request emits a 'store-error' (operation 'window'), counted, and is sent without a ticket`, async () => {
      const boom = new Error('window down');
      const inner = memoryStore();
      let reports = 0;
      const store = withCalls(inner, {
        windowSend:
          how === 'throws'
            ? () => {
                throw boom;
              }
            : async () => {
                throw boom;
              },
        windowReport: (id: string, seq: number, remaining: number, resetMs: number) => {
          reports++;
          return inner.windowReport!(id, seq, remaining, resetMs);
        },
      });
      const valve = createValve({ id: 'm-send', rules, store });
      const errors: unknown[][] = [];
      valve.on('store-error', (err, context) => errors.push([err, context]));
      let sent = 0;
      const f = valve.wrapFetch(async (_url: string) => {
        sent++;
        return answer();
      });
      for (let i = 0; i < 3; i++) expect((await f('https://api.example/x')).status).toBe(200);
      expect(sent).toBe(3);
      expect(errors).toEqual([0, 1, 2].map(() => [boom, windowError('m-send')]));
      expect(valve.stats().storeErrors).toBe(3);
      // No ticket, no report.
      expect(reports).toBe(0);
      await valve.close();
    });
  }

  it("windowReport throws: a 'store-error' (operation 'window'); the answer's own reading pauses", async () => {
    const boom = new Error('report down');
    const store = withCalls(memoryStore(), {
      windowReport: () => {
        throw boom;
      },
    });
    const valve = createValve({ id: 'm-report', rules, store });
    const errors: unknown[][] = [];
    valve.on('store-error', (err, context) => errors.push([err, context]));
    const pauses: number[] = [];
    valve.on('pause', (e) => pauses.push(e.until));
    const f = valve.wrapFetch(async (_url: string) => answer(0, 2), { retries: 0 });
    const before = Date.now();
    expect((await f('https://api.example/x')).status).toBe(200);
    expect(errors).toEqual([[boom, windowError('m-report')]]);
    expect(valve.stats().storeErrors).toBe(1);
    // The window is spent: without the fleet's answer, this process's reading writes the pause.
    expect(pauses).toHaveLength(1);
    expect(pauses[0]).toBeGreaterThan(before + 1000);
    await valve.close();
  });

  it("a group forwards the 'store-error' of a key's window call with the key", async () => {
    const boom = new Error('window down');
    const store = withCalls(memoryStore(), {
      windowSend: () => {
        throw boom;
      },
    });
    const group = createValveGroup({ rules, store });
    const errors: unknown[][] = [];
    group.on('store-error', (err, context, key) => errors.push([err, context, key]));
    const f = group.wrapFetch(async (_url: string) => answer(), { key: () => 'k1' });
    expect((await f('https://api.example/x')).status).toBe(200);
    expect(errors).toEqual([[boom, windowError('k1'), 'k1']]);
    await group.close();
  });

  it("valve/otel counts them in valve.store.errors, operation 'window', with the error's type", async () => {
    const reset = Object.assign(new Error('connection reset'), { code: 'ECONNRESET' });
    const store = withCalls(memoryStore(), {
      windowSend: () => {
        throw reset;
      },
    });
    const valve = createValve({ id: 'm-otel', rules, store });
    const { reader, meter, provider } = meterSetup();
    const handle = instrument(valve, { meter });
    const f = valve.wrapFetch(async (_url: string) => answer());
    for (let i = 0; i < 2; i++) expect((await f('https://api.example/x')).status).toBe(200);
    const m = await collect(reader);
    expect(
      m.value('valve.store.errors', { 'valve.store.operation.name': 'window', 'error.type': 'ECONNRESET' }),
    ).toBe(2);
    handle.stop();
    await valve.close();
    await provider.shutdown();
  });

  it("'open', acquisitions failing: the requests started without the store ask no ticket; once an acquisition answers, they do again", async () => {
    const inner = memoryStore();
    let failing = true;
    let sends = 0;
    const store = withCalls(inner, {
      acquire: (request: Parameters<Store['acquire']>[0]) => {
        if (failing) throw new Error('acquire down');
        return inner.acquire(request);
      },
      windowSend: (id: string, probeTtl: number) => {
        sends++;
        return inner.windowSend!(id, probeTtl);
      },
    });
    const valve = createValve({ id: 'm-open', rules, store, onStoreError: 'open' });
    const errors: StoreErrorContext[] = [];
    valve.on('store-error', (_err, context) => errors.push(context));
    let sent = 0;
    const f = valve.wrapFetch(async (_url: string) => {
      sent++;
      return answer();
    });
    for (let i = 0; i < 3; i++) expect((await f('https://api.example/x')).status).toBe(200);
    expect(sent).toBe(3);
    expect(sends, 'tickets asked while the acquisitions failed').toBe(0);
    expect(errors.length).toBeGreaterThan(0);
    expect(errors.every((e) => e.operation === 'acquire' && e.action === 'open')).toBe(true);
    expect(valve.stats().storeErrors).toBe(errors.length);
    failing = false;
    // Jobs start open until the backoff ends (at most 5 s); the first acquisition then answers.
    for (let i = 0; i < 120 && sends === 0; i++) {
      await (await f('https://api.example/x')).text();
      if (sends === 0) await sleep(50);
    }
    expect(sends).toBe(1);
    await valve.close();
  });

  it("'wait': a job granted after failed acquisitions asks its ticket (the store answered)", async () => {
    const inner = memoryStore();
    let failures = 2;
    let sends = 0;
    const store = withCalls(inner, {
      acquire: (request: Parameters<Store['acquire']>[0]) => {
        if (failures > 0) {
          failures--;
          throw new Error('acquire down');
        }
        return inner.acquire(request);
      },
      windowSend: (id: string, probeTtl: number) => {
        sends++;
        return inner.windowSend!(id, probeTtl);
      },
    });
    const valve = createValve({ id: 'm-wait', rules, store });
    const f = valve.wrapFetch(async (_url: string) => answer());
    expect((await f('https://api.example/x')).status).toBe(200);
    expect(valve.stats().storeErrors).toBe(2);
    expect(sends).toBe(1);
    await valve.close();
  });
});

describe.each(['ioredis', 'redis'] as const)('fleet window calls that fail on Redis (%s)', (family) => {
  let server: RedisServer;
  let api: http.Server;
  let url = '';
  let hits = 0;
  /** What the provider does before its next answer (once). */
  let before: (() => Promise<void> | void) | undefined;
  let n = 0;
  const unique = (label: string) => `${label}-${++n}-${Math.random().toString(36).slice(2, 8)}`;

  beforeAll(async () => {
    server = await startRedis();
    api = http.createServer(async (_req, res) => {
      hits++;
      const step = before;
      before = undefined;
      await step?.();
      res.writeHead(200, { 'x-ratelimit-remaining': '100', 'x-ratelimit-reset': '60' });
      res.end('ok');
    });
    await new Promise<void>((resolve) => api.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(api.address() as AddressInfo).port}/`;
  });
  afterAll(async () => {
    server?.kill('SIGCONT');
    api?.closeAllConnections();
    await new Promise((resolve) => api?.close(resolve));
    await server?.stop();
  });

  /**
   * A valve over a fresh connection; `hook` runs before each windowSend. The store's timeout is a
   * second: long enough that a busy machine's answers never time out, so every failure is one the
   * test caused.
   */
  /** Two window calls timed out: each emitted as a 'store-error' and counted. */
  function expectTwoWindowTimeouts(t: Awaited<ReturnType<typeof setUp>>): void {
    expect(t.errors.map(([, context]) => context)).toEqual([windowError(t.id), windowError(t.id)]);
    for (const [err] of t.errors) expect(String(err)).toMatch(/within 1000 ms/);
    expect(t.valve.stats().storeErrors).toBe(2);
  }

  async function setUp(options: { onStoreError?: 'open'; hook?: () => void } = {}) {
    const connection = await connectClient(family, server);
    const prefix = unique('x');
    const id = unique('id');
    const redis = redisStore({ client: connection.client, prefix, timeout: TIMEOUT });
    let sends = 0;
    const store = withCalls(redis, {
      windowSend: (sendId: string, probeTtl: number) => {
        sends++;
        options.hook?.();
        return redis.windowSend!(sendId, probeTtl);
      },
    });
    const valve = createValve({
      id,
      rules,
      store,
      ...(options.onStoreError === undefined ? {} : { onStoreError: options.onStoreError }),
    });
    const errors: [unknown, StoreErrorContext][] = [];
    valve.on('store-error', (err, context) => errors.push([err, context]));
    const f = valve.wrapFetch(fetch, { retries: 0 });
    const get = async () => {
      const response = await f(url);
      await response.text();
      return response.status;
    };
    const close = async () => {
      await valve.close();
      await connection.close();
    };
    return { id, key: `${prefix}:{${id}}:window`, valve, errors, get, sends: () => sends, close };
  }

  it("a window key holding what valve never writes: the ticket call's 'store-error' names the key; the request goes without a ticket", async () => {
    const t = await setUp();
    try {
      await server.command(['SET', t.key, 'garbage']);
      const hitsBefore = hits;
      expect(await t.get()).toBe(200);
      expect(hits).toBe(hitsBefore + 1);
      expect(t.errors.map(([, context]) => context)).toEqual([windowError(t.id)]);
      expect(String(t.errors[0]![0])).toContain(t.key);
      expect(t.valve.stats().storeErrors).toBe(1);
      // Nothing was written over it: the request was counted nowhere.
      expect(await server.command(['GET', t.key])).toBe('garbage');
    } finally {
      await t.close();
    }
  });

  it("the key turned into one valve never writes while the request is out: the report's 'store-error' names it", async () => {
    const t = await setUp();
    try {
      before = async () => {
        await server.command(['SET', t.key, 'garbage']);
      };
      expect(await t.get()).toBe(200);
      expect(t.errors.map(([, context]) => context)).toEqual([windowError(t.id)]);
      expect(String(t.errors[0]![0])).toContain(t.key);
      expect(t.valve.stats().storeErrors).toBe(1);
    } finally {
      await t.close();
    }
  });

  it("the server stopped (SIGSTOP) at each ticket call: each timeout is a 'store-error', counted; every request is sent", async () => {
    let armed = false;
    const t = await setUp({
      hook: () => {
        if (armed) server.kill('SIGSTOP');
      },
    });
    try {
      expect(await t.get()).toBe(200); // the id's probe, answered: the window is known
      const hitsBefore = hits;
      for (let i = 0; i < 2; i++) {
        armed = true;
        try {
          expect(await t.get()).toBe(200);
        } finally {
          armed = false;
          server.kill('SIGCONT');
        }
      }
      expect(hits).toBe(hitsBefore + 2);
      expectTwoWindowTimeouts(t);
    } finally {
      server.kill('SIGCONT');
      await t.close();
    }
  });

  it("the server stopped (SIGSTOP) while the request is out: the report's timeout is a 'store-error', counted", async () => {
    const t = await setUp();
    try {
      expect(await t.get()).toBe(200);
      for (let i = 0; i < 2; i++) {
        before = () => server.kill('SIGSTOP');
        try {
          expect(await t.get()).toBe(200);
        } finally {
          server.kill('SIGCONT');
        }
      }
      expectTwoWindowTimeouts(t);
    } finally {
      server.kill('SIGCONT');
      await t.close();
    }
  });

  it("'open', the server stopped (SIGSTOP): requests started without the store ask no ticket; every failed call is emitted and counted", async () => {
    const t = await setUp({ onStoreError: 'open' });
    try {
      expect(await t.get()).toBe(200);
      const sendsBefore = t.sends();
      const hitsBefore = hits;
      server.kill('SIGSTOP');
      try {
        for (let i = 0; i < 3; i++) expect(await t.get()).toBe(200);
      } finally {
        server.kill('SIGCONT');
      }
      expect(hits).toBe(hitsBefore + 3);
      expect(t.sends(), 'tickets asked while the acquisitions failed').toBe(sendsBefore);
      const contexts = t.errors.map(([, context]) => context);
      expect(contexts.length).toBeGreaterThan(0);
      expect(contexts.every((c) => c.operation === 'acquire' && c.action === 'open')).toBe(true);
      expect(t.valve.stats().storeErrors).toBe(contexts.length);
      // Once an acquisition answers again (after the backoff), tickets are asked again.
      for (let i = 0; i < 120 && t.sends() === sendsBefore; i++) {
        expect(await t.get()).toBe(200);
        if (t.sends() === sendsBefore) await sleep(50);
      }
      expect(t.sends()).toBe(sendsBefore + 1);
    } finally {
      server.kill('SIGCONT');
      await t.close();
    }
  });
});
