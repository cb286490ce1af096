/**
 * The fleet window's probe against a provider that answers slowly (an LLM API answering a
 * non-streaming call after seconds): the probe, the first request of an idle fleet, holds the
 * other requests only while its answer is expected soon (docs/provider-feedback.md, "The id's
 * first request learns the window"). The provider is a real express-rate-limit server whose
 * handler answers 1.5 s after the request (its headers come with the answer, as a non-streaming
 * LLM call's do), and, for comparison, the same server answering at once.
 *
 * What is checked is the order of events, not their speed: which requests were sent before the
 * probe's answer came back. A minute of idleness is a skip of the valve's clock (memory store: the
 * store's clock too; Redis: the record's key is deleted, as its expiry would).
 */
import type { Server } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import { memoryStore } from '../../src/stores/memory.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { createValve } from '../../src/valve.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { connectClient } from '../helpers/redis-clients.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const SLOW_MS = 1500;
const CALLERS = 4;
/**
 * Idle time skipped: the fleet's record is kept a minute past its window's reset (the slow
 * provider's window is a minute, as an LLM API's requests per minute) and its last request.
 */
const IDLE_MS = 180_000;

interface Provider {
  readonly url: string;
  stop(): Promise<void>;
}

/** express + express-rate-limit (`limit` per `windowMs`), its handler answering after `answerMs`. */
async function startProvider(answerMs: number, limit: number, windowMs: number): Promise<Provider> {
  const { default: express } = await import('express');
  const { rateLimit } = await import('express-rate-limit');
  const app = express();
  app.use(
    rateLimit({
      windowMs,
      limit,
      standardHeaders: 'draft-8',
      legacyHeaders: true,
      keyGenerator: () => 'credential',
    }),
  );
  app.get('/{*path}', (_req, res) => {
    if (answerMs === 0) res.json({ ok: true });
    else setTimeout(() => res.json({ ok: true }), answerMs);
  });
  const server: Server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The real clock, plus an offset that a test moves forward to skip idle time. */
class SkipClock implements Clock {
  offset = 0;
  now(): number {
    return performance.timeOrigin + performance.now() + this.offset;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    return setTimeout(fn, ms);
  }
  clearTimeout(handle: unknown): void {
    clearTimeout(handle as ReturnType<typeof setTimeout>);
  }
}

interface Sent {
  /** performance.now() when fetch was called, and when its answer (headers) came. */
  readonly sent: number;
  readonly answered: number;
  readonly status: number;
}

/** A fetch that logs each request it sends. */
function loggingFetch(log: Sent[]): typeof fetch {
  return async (input, init) => {
    const sent = performance.now();
    const res = await fetch(input, init);
    log.push({ sent, answered: performance.now(), status: res.status });
    return res;
  };
}

/** Sends `n` requests at once through each of `fetches`; returns what the provider was sent. */
async function burst(fetches: (typeof fetch)[], logs: Sent[][], n: number, url: string) {
  const before = logs.map((l) => l.length);
  const statuses = await Promise.all(
    fetches.flatMap((f) =>
      Array.from({ length: n }, async () => {
        const res = await f(`${url}/item`);
        await res.arrayBuffer();
        return res.status;
      }),
    ),
  );
  const sent = logs.flatMap((l, i) => l.slice(before[i]));
  const firstAnswer = Math.min(...sent.map((q) => q.answered));
  const firstSent = Math.min(...sent.map((q) => q.sent));
  return {
    statuses,
    sent,
    /** Requests sent only once the first answer had come back: held by the probe. */
    heldForAnswer: sent.filter((q) => q.sent >= firstAnswer).length,
    /** How long the last request waited after the first was sent (ms), for the messages. */
    spread: Math.round(Math.max(...sent.map((q) => q.sent)) - firstSent),
  };
}

let slow: Provider;
let fast: Provider;

beforeAll(async () => {
  slow = await startProvider(SLOW_MS, 1000, 60_000);
  fast = await startProvider(0, 5, 1000);
});

afterAll(async () => {
  await slow?.stop();
  await fast?.stop();
});

describe('the probe of an idle fleet, one process (memory store)', () => {
  it("a provider answering in 1.5 s: the id's first probe holds the others 1 s at most, and after minutes idle not at all", async () => {
    const clock = new SkipClock();
    const valve = createValve({
      id: 'slow',
      clock,
      store: memoryStore({ clock }),
      rules: { limit: 100, interval: '1s', burst: 100 },
    });
    const log: Sent[] = [];
    const f = valve.wrapFetch(loggingFetch(log));
    try {
      // The id's first requests: nothing is known of the provider; the probe holds the others
      // until its answer or for 1 s, whichever comes first: here, 1 s.
      const first = await burst([f], [log], CALLERS, slow.url);
      expect(first.statuses).toEqual(Array(CALLERS).fill(200));
      expect(first.heldForAnswer, `sent over ${first.spread} ms`).toBe(0);

      // Three minutes without any request: the fleet's record is forgotten, the next request is
      // a probe again; this process knows the provider answers in 1.5 s, so it holds nobody.
      clock.offset += IDLE_MS;
      const idle = await burst([f], [log], CALLERS, slow.url);
      expect(idle.statuses).toEqual(Array(CALLERS).fill(200));
      expect(idle.heldForAnswer, `sent over ${idle.spread} ms`).toBe(0);
      expect(idle.spread).toBeLessThan(SLOW_MS);
    } finally {
      await valve.close();
    }
  }, 30_000);

  it('a provider answering at once: after minutes idle the probe still goes alone and the others within the count it states', async () => {
    const clock = new SkipClock();
    const valve = createValve({
      id: 'fast',
      clock,
      store: memoryStore({ clock }),
      rules: { limit: 100, interval: '1s', burst: 100 },
    });
    const log: Sent[] = [];
    const f = valve.wrapFetch(loggingFetch(log), { retries: 10 });
    try {
      const first = await burst([f], [log], 1, fast.url);
      expect(first.statuses).toEqual([200]);
      clock.offset += IDLE_MS;
      // 8 callers, 5 per second: the probe learns the count, the others go within it and wait
      // for the next window.
      const idle = await burst([f], [log], 8, fast.url);
      expect(idle.statuses).toEqual(Array(8).fill(200));
      const firstAnswer = Math.min(...idle.sent.map((q) => q.answered));
      expect(idle.sent.filter((q) => q.sent < firstAnswer)).toHaveLength(1);
      expect(idle.sent.filter((q) => q.status === 429)).toEqual([]);
    } finally {
      await valve.close();
    }
  }, 30_000);
});

describe('the probe of an idle fleet, two processes sharing Redis', () => {
  it('a provider answering in 1.5 s: neither process holds its requests for the whole answer', async () => {
    const redis = sharedRedis();
    const target = { host: redis.host, port: redis.port };
    const prefix = uniquePrefix('slow-probe');
    const id = `slow:${Math.random().toString(36).slice(2)}`;
    const connections = await Promise.all([
      connectClient('ioredis', target),
      connectClient('ioredis', target),
    ]);
    const clocks = [new SkipClock(), new SkipClock()];
    const valves = connections.map((c, i) =>
      createValve({
        id,
        clock: clocks[i]!,
        store: redisStore({ client: c.client, subscriber: c.subscriber, prefix }),
        rules: { limit: 100, interval: '1s', burst: 100 },
      }),
    );
    const logs: Sent[][] = [[], []];
    const fetches = valves.map((v, i) => v.wrapFetch(loggingFetch(logs[i]!)));
    try {
      const first = await burst(fetches, logs, CALLERS / 2, slow.url);
      expect(first.statuses).toEqual(Array(CALLERS).fill(200));
      expect(first.heldForAnswer, `sent over ${first.spread} ms`).toBe(0);

      // Three minutes idle: the record expires (deleted here) and both processes' clocks move on.
      for (const c of clocks) c.offset += IDLE_MS;
      await (connections[0]!.client as unknown as { del(key: string): Promise<number> }).del(
        `${prefix}:{${id}}:window`,
      );
      const idle = await burst(fetches, logs, CALLERS / 2, slow.url);
      expect(idle.statuses).toEqual(Array(CALLERS).fill(200));
      expect(idle.heldForAnswer, `sent over ${idle.spread} ms`).toBe(0);
      expect(idle.spread).toBeLessThan(SLOW_MS);
    } finally {
      await Promise.all(valves.map((v) => v.close()));
      await Promise.all(connections.map((c) => c.close()));
    }
  }, 30_000);
});

describe('a busy fleet keeps the probe of a slow provider', () => {
  it("a spent minute window's reset: the probe that learns the next window holds the requests that waited for it until its slow answer", async () => {
    const NOW = 1_700_000_000_000;
    const clock = new FakeClock(NOW);
    const valve = createValve({
      id: 'minute',
      clock,
      store: memoryStore({ clock }),
      rules: { limit: 1000, interval: '1s', burst: 1000 },
    });
    const LIMIT = 4;
    const WINDOW = 60_000;
    let opened = Number.NEGATIVE_INFINITY;
    let used = 0;
    const sent: { at: number; status: number }[] = [];
    // A window of 4 requests a minute, opened by its first request (express-rate-limit's way),
    // every answer 1.5 s after the request with the count and reset the limiter had then.
    const f = valve.wrapFetch(
      async (_url: string) => {
        const at = clock.now() - NOW;
        if (at >= opened + WINDOW) {
          opened = at;
          used = 0;
        }
        const status = used < LIMIT ? 200 : 429;
        if (status === 200) used++;
        sent.push({ at, status });
        const headers = {
          'ratelimit-limit': String(LIMIT),
          'ratelimit-remaining': String(LIMIT - used),
          'ratelimit-reset': String(Math.ceil((opened + WINDOW - at) / 1000)),
        };
        await new Promise<void>((r) => clock.setTimeout(r, SLOW_MS));
        return new Response('{}', { status, headers });
      },
      { retries: 5 },
    );
    try {
      const learn = f('https://api.example/learn');
      await clock.tickAsync(2000);
      expect((await learn).status).toBe(200);
      // 6 more: 3 fit in the first window, 3 wait about a minute for the next one.
      const all = Array.from({ length: 6 }, (_, i) => f(`https://api.example/${i}`));
      await clock.runAllAsync(200_000);
      expect((await Promise.all(all)).map((r) => r.status)).toEqual(Array(6).fill(200));
      expect(sent.filter((s) => s.status === 429)).toEqual([]);
      const next = sent.find((s) => s.at >= WINDOW)!;
      expect(sent.filter((s) => s.at >= next.at && s.at < next.at + SLOW_MS)).toEqual([next]);
    } finally {
      await valve.close();
    }
  });

  it("a coarse Retry-After's probes go one at a time, and the probe that finds the provider open holds the others until its slow answer", async () => {
    const NOW = 1_700_000_000_000;
    const clock = new FakeClock(NOW);
    const valve = createValve({
      id: 'busy',
      clock,
      store: memoryStore({ clock }),
      rules: { limit: 1000, interval: '1s', burst: 1000 },
    });
    const sent: { at: number; status: number }[] = [];
    // Answers 200 after 1.5 s, except from t = 2 s to 4 s (another client spends the quota),
    // when it answers 429 with a bare `Retry-After: 1` at once.
    const f = valve.wrapFetch(
      async (_url: string) => {
        const at = clock.now() - NOW;
        const status = at >= 2000 && at < 4000 ? 429 : 200;
        sent.push({ at, status });
        await new Promise<void>((r) => clock.setTimeout(r, status === 429 ? 5 : SLOW_MS));
        return new Response('{}', { status, headers: status === 429 ? { 'retry-after': '1' } : {} });
      },
      { retries: 20 },
    );
    try {
      // This process learns that the provider answers in 1.5 s.
      const learn = f('https://api.example/learn');
      await clock.tickAsync(2000);
      expect((await learn).status).toBe(200);
      const all = Array.from({ length: 5 }, (_, i) => f(`https://api.example/${i}`));
      await clock.runAllAsync(30_000);
      expect((await Promise.all(all)).map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
      // After the first 429s (the 5 sent at t = 2 s), one probe at a time while the provider refuses.
      const probes = sent.filter((s) => s.status === 429 && s.at > 2000);
      expect(probes.length).toBeGreaterThan(0);
      expect(new Set(probes.map((s) => s.at)).size).toBe(probes.length);
      // The probe that found the provider open went alone until its answer, 1.5 s later.
      const open = sent.find((s) => s.status === 200 && s.at >= 4000)!;
      expect(sent.filter((s) => s.at >= open.at && s.at < open.at + SLOW_MS)).toEqual([open]);
    } finally {
      await valve.close();
    }
  });
});
