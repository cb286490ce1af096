import { describe, expect, expectTypeOf, it } from 'vitest';
import { ValveError } from '../../src/errors.js';
import type { FetchRetryEvent } from '../../src/events.js';
import { wrapFetch } from '../../src/feedback/fetch.js';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { FakeClock, flushMicrotasks } from '../helpers/fake-clock.js';
import { FakeInternals } from './fake-internals.js';

const NOW = 1_700_000_000_000;

interface Call {
  input: unknown;
  init: RequestInit | undefined;
  at: number;
}

type Reply = { status: number; headers?: Record<string, string>; body?: string };

/** A scripted fetch: answers with the replies in order (the last one repeats), records every call. */
function scripted(clock: FakeClock, replies: Reply[], cancelled: number[] = []) {
  const calls: Call[] = [];
  let n = 0;
  const fn = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    calls.push({ input, init, at: clock.now() });
    if (init?.signal?.aborted) throw init.signal.reason;
    const reply = replies[Math.min(n++, replies.length - 1)]!;
    const index = n;
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode(reply.body ?? `reply ${index}`));
        c.close();
      },
      cancel() {
        cancelled.push(index);
      },
    });
    return new Response(reply.status === 204 ? null : body, { status: reply.status, headers: reply.headers });
  };
  return { fn, calls };
}

function setup(concurrency = Number.POSITIVE_INFINITY) {
  const clock = new FakeClock(NOW);
  const valve = new FakeInternals(
    clock,
    { maxPause: 3_600_000, backoffInitial: 1000, backoffMax: 60_000 },
    concurrency,
  );
  return { clock, valve };
}

describe('wrapFetch: retries', () => {
  it('retries a 429 after the pause it wrote, at the original sequence, and cancels the 429 body', async () => {
    const { clock, valve } = setup();
    const cancelled: number[] = [];
    const { fn, calls } = scripted(
      clock,
      [{ status: 429, headers: { 'retry-after': '2' } }, { status: 200 }],
      cancelled,
    );
    const f = wrapFetch(valve, fn);
    const p = f('https://api.example/x');
    await clock.runAllAsync();
    const res = await p;
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('reply 2');
    expect(calls.map((c) => c.at - NOW)).toEqual([0, 2000]);
    expect(valve.pauses.map((p) => [p.ms, p.source])).toEqual([[2000, 'retry-after']]);
    expect(clock.requested).toEqual([2000]);
    expect(valve.enqueued.map((e) => [e.sequence, e.reused])).toEqual([
      [1, false],
      [1, true],
    ]);
    expect(cancelled).toEqual([1]);
    expect(valve.eventsOf('retry')).toEqual([
      { attempt: 1, status: 429, waitMs: 2000, url: 'https://api.example/x', source: 'retry-after' },
    ] satisfies FetchRetryEvent[]);
  });

  it('after `retries` retries returns the last 429 as fetch would, body intact; bare 429s back off 1s, 2s, 4s', async () => {
    const { clock, valve } = setup();
    const cancelled: number[] = [];
    const { fn, calls } = scripted(clock, [{ status: 429, body: 'slow down' }], cancelled);
    const f = wrapFetch(valve, fn);
    const p = f(new URL('https://api.example/y'));
    await clock.runAllAsync();
    const res = await p;
    expect(res.status).toBe(429);
    expect(await res.text()).toBe('slow down');
    expect(calls).toHaveLength(4);
    // Each 429 pauses; the last one too (the caller may not retry, but others must wait).
    expect(valve.pauses.map((p) => p.ms)).toEqual([1000, 2000, 4000, 8000]);
    expect(clock.requested).toEqual([1000, 2000, 4000]);
    expect(calls.map((c) => c.at - NOW)).toEqual([0, 1000, 3000, 7000]);
    expect(cancelled).toEqual([1, 2, 3]);
    expect(valve.eventsOf('retry').map((e) => (e as FetchRetryEvent).attempt)).toEqual([1, 2, 3]);
    expect((valve.eventsOf('retry')[0] as FetchRetryEvent).url).toBe('https://api.example/y');
  });

  it('a Retry-After too large for a double (400 digits) waits maxPause, not the 1 s backoff', async () => {
    const { clock, valve } = setup();
    const { fn, calls } = scripted(clock, [
      { status: 429, headers: { 'retry-after': '9'.repeat(400) } },
      { status: 200 },
    ]);
    const p = wrapFetch(valve, fn)('https://api.example/x');
    await clock.runAllAsync();
    expect((await p).status).toBe(200);
    expect(calls.map((c) => c.at - NOW)).toEqual([0, 3_600_000]);
    expect(valve.pauses.map((p) => [p.ms, p.source])).toEqual([[3_600_000, 'retry-after']]);
  });

  it('honours `retries`, including 0', async () => {
    for (const retries of [0, 1, 5]) {
      const { clock, valve } = setup();
      const { fn, calls } = scripted(clock, [{ status: 429 }]);
      const p = wrapFetch(valve, fn, { retries })('https://a.example');
      await clock.runAllAsync();
      expect((await p).status).toBe(429);
      expect(calls).toHaveLength(retries + 1);
    }
  });

  it('retries a 503 only with Retry-After; never other statuses', async () => {
    const cases: [Reply, number][] = [
      [{ status: 503, headers: { 'retry-after': '1' } }, 2],
      [{ status: 503 }, 1],
      // A wait of 0 (or a date already passed) means "now": retried after a backoff, as a 429's.
      [{ status: 503, headers: { 'retry-after': '0' } }, 2],
      [{ status: 503, headers: { 'retry-after-ms': '0' } }, 2],
      [{ status: 503, headers: { 'x-ms-retry-after-ms': '0' } }, 2],
      [{ status: 503, headers: { 'retry-after': new Date(NOW - 5000).toUTCString() } }, 2],
      // An unparseable or negative one is ignored: a 503 without Retry-After.
      [{ status: 503, headers: { 'retry-after': 'soon' } }, 1],
      [{ status: 503, headers: { 'retry-after-ms': '-5' } }, 1],
      // Retry-After present, but a longer wait from another header: still a 503 with Retry-After.
      [
        {
          status: 503,
          headers: { 'retry-after': '1', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '30' },
        },
        2,
      ],
      [{ status: 500, headers: { 'retry-after': '1' } }, 1],
      [{ status: 403, headers: { 'retry-after': '1' } }, 1],
      [{ status: 404 }, 1],
      [{ status: 200, headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '5' } }, 1],
    ];
    for (const [reply, expected] of cases) {
      const { clock, valve } = setup();
      const { fn, calls } = scripted(clock, [reply, { status: 200 }]);
      const p = wrapFetch(valve, fn)('https://a.example');
      await clock.runAllAsync();
      await p;
      expect(calls, JSON.stringify(reply)).toHaveLength(expected);
    }
  });

  it("a 503 whose Retry-After is 0 is retried after a backoff, as a 429's is, and the 0 is reported", async () => {
    for (const status of [429, 503]) {
      const { clock, valve } = setup();
      const { fn, calls } = scripted(clock, [{ status, headers: { 'retry-after': '0' } }, { status: 200 }]);
      const p = wrapFetch(valve, fn)('https://a.example');
      await clock.runAllAsync();
      expect((await p).status).toBe(200);
      // backoffInitial is 1 s: the retry waits it out rather than going at once.
      expect(
        calls.map((c) => c.at - NOW),
        String(status),
      ).toEqual([0, 1000]);
      expect(valve.pauses.map((p) => [p.ms, p.source])).toEqual([[1000, 'backoff']]);
      expect(valve.eventsOf('retry')).toMatchObject([
        { attempt: 1, status, waitMs: 1000, source: 'backoff' },
      ]);
      expect(valve.eventsOf('feedback-ignored')).toEqual([
        { header: 'retry-after', value: '0', reason: 'zero', status },
      ]);
    }
  });

  it('a retry goes ahead of requests that arrived after the first attempt', async () => {
    const { clock, valve } = setup(1);
    const { fn, calls } = scripted(clock, [
      { status: 429, headers: { 'retry-after': '1' } },
      { status: 200 },
    ]);
    const f = wrapFetch(valve, fn);
    const a = f('https://a.example/first');
    await flushMicrotasks();
    const b = f('https://a.example/second');
    const c = f('https://a.example/third');
    await clock.runAllAsync();
    await Promise.all([a, b, c]);
    expect(calls.map((x) => String(x.input))).toEqual([
      'https://a.example/first',
      'https://a.example/first',
      'https://a.example/second',
      'https://a.example/third',
    ]);
    expect(calls.map((x) => x.at - NOW)).toEqual([0, 1000, 1000, 1000]);
    expect(valve.starts.map((s) => s.sequence)).toEqual([1, 1, 2, 3]);
  });

  it('passes cost (number or function of the request) and priority to every attempt', async () => {
    const { clock, valve } = setup();
    const { fn } = scripted(clock, [{ status: 429, headers: { 'retry-after': '1' } }, { status: 200 }]);
    const seen: unknown[] = [];
    const f = wrapFetch(valve, fn, {
      cost: (input, init) => {
        seen.push([input, init?.method]);
        return 3;
      },
      priority: 7,
    });
    const p = f('https://a.example', { method: 'POST', body: 'x' });
    await clock.runAllAsync();
    await p;
    expect(seen).toEqual([['https://a.example', 'POST']]);
    expect(valve.enqueued.map((e) => [e.cost, e.priority])).toEqual([
      [3, 7],
      [3, 7],
    ]);
    const g = wrapFetch(valve, fn, { cost: 2 });
    const q = g('https://a.example');
    await clock.runAllAsync();
    await q;
    expect(valve.enqueued.at(-1)?.cost).toBe(2);
  });

  it('validates its options', () => {
    const { valve } = setup();
    const fn = async () => new Response();
    expect(() => wrapFetch(valve, fn, { retries: -1 })).toThrow(RangeError);
    expect(() => wrapFetch(valve, fn, { retries: 1.5 })).toThrow(/retries/);
    expect(() => wrapFetch(valve, fn, { cost: 0 })).toThrow(/cost/);
    expect(() => wrapFetch(valve, fn, { priority: Number.NaN })).toThrow(/priority/);
    expect(() => wrapFetch(valve, 'fetch' as never)).toThrow(TypeError);
  });

  it('rejects unknown options, as every other entry point does', () => {
    const { valve } = setup();
    const fn = async () => new Response();
    expect(() => wrapFetch(valve, fn, { retry: 0 } as never)).toThrow(
      new TypeError('Unknown option `retry`; wrapFetch() takes `retries`, `cost` and `priority`'),
    );
    expect(() => wrapFetch(valve, fn, { retries: 1, signal: undefined } as never)).toThrow(
      /^Unknown option `signal`/,
    );
    expect(() => wrapFetch(valve, fn, 3 as never)).toThrow(
      new TypeError(
        'Expected wrapFetch() `options` to be an object like { retries: 3, cost: 1, priority: 0 }, got 3',
      ),
    );
    expect(() => wrapFetch(valve, fn, null as never)).toThrow(TypeError);
  });

  it('a value of the wrong type is a TypeError with the value quoted; a number out of range a RangeError', () => {
    const { valve } = setup();
    const fn = async () => new Response();
    expect(() => wrapFetch(valve, fn, { retries: '3' } as never)).toThrow(
      new TypeError('Expected `retries` to be a non-negative integer, got "3"'),
    );
    expect(() => wrapFetch(valve, fn, { retries: -1 })).toThrow(
      new RangeError('Expected `retries` to be a non-negative integer, got -1'),
    );
    expect(() => wrapFetch(valve, fn, { cost: '2' } as never)).toThrow(
      new TypeError('Expected `cost` to be a positive integer or a function of the request, got "2"'),
    );
    expect(() => wrapFetch(valve, fn, { priority: '1' } as never)).toThrow(
      new TypeError('Expected `priority` to be a finite number, got "1"'),
    );
    expect(() => wrapFetch(valve, fn, { priority: Number.POSITIVE_INFINITY })).toThrow(
      new RangeError('Expected `priority` to be a finite number, got Infinity'),
    );
    expect(() => wrapFetch(valve, 'fetch' as never)).toThrow(
      new TypeError('Expected `fetch` to be a function, got "fetch"'),
    );
  });

  it('cost is a positive integer (cost units), given or returned by the cost function', async () => {
    const { clock, valve } = setup();
    const { fn, calls } = scripted(clock, [{ status: 200 }]);
    for (const cost of [0.5, 1.5, 0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => wrapFetch(valve, fn, { cost })).toThrow(
        new RangeError(
          `Expected \`cost\` to be a positive integer or a function of the request, got ${cost}`,
        ),
      );
    }
    const f = wrapFetch(valve, fn, { cost: () => 2.5 });
    await expect(f('https://a.example')).rejects.toThrow(
      new RangeError('Expected `cost` (returned by the cost function) to be a positive integer, got 2.5'),
    );
    const g = wrapFetch(valve, fn, { cost: () => '2' as never });
    await expect(g('https://a.example')).rejects.toThrow(
      new TypeError('Expected `cost` (returned by the cost function) to be a positive integer, got "2"'),
    );
    expect(calls).toHaveLength(0);
    expect(valve.enqueued).toHaveLength(0);
  });
});

describe('wrapFetch: bodies', () => {
  const replayable: [string, () => NonNullable<RequestInit['body']>][] = [
    ['string', () => 'hello'],
    ['URLSearchParams', () => new URLSearchParams({ a: '1', b: '2' })],
    ['Blob', () => new Blob(['blob body'])],
    ['ArrayBuffer', () => new TextEncoder().encode('ab').buffer as ArrayBuffer],
    ['Uint8Array', () => new TextEncoder().encode('u8')],
    [
      'FormData',
      () => {
        const f = new FormData();
        f.append('k', 'v');
        return f;
      },
    ],
  ];
  for (const [name, make] of replayable) {
    it(`retries with the same ${name} body`, async () => {
      const { clock, valve } = setup();
      const { fn, calls } = scripted(clock, [
        { status: 429, headers: { 'retry-after': '1' } },
        { status: 200 },
      ]);
      const body = make();
      const p = wrapFetch(valve, fn)('https://a.example', { method: 'POST', body });
      await clock.runAllAsync();
      expect((await p).status).toBe(200);
      expect(calls).toHaveLength(2);
      expect(calls[0]?.init?.body).toBe(body);
      expect(calls[1]?.init?.body).toBe(body);
    });
  }

  it('does not retry a stream body: the 429 is returned (and still observed)', async () => {
    const { clock, valve } = setup();
    const { fn, calls } = scripted(clock, [
      { status: 429, headers: { 'retry-after': '1' } },
      { status: 200 },
    ]);
    const body = new ReadableStream({
      start(c) {
        c.enqueue(new Uint8Array([1]));
        c.close();
      },
    });
    const p = wrapFetch(valve, fn)('https://a.example', {
      method: 'POST',
      body,
      duplex: 'half',
    } as RequestInit);
    await clock.runAllAsync();
    expect((await p).status).toBe(429);
    expect(calls).toHaveLength(1);
    expect(valve.pauses.map((x) => x.ms)).toEqual([1000]);
    expect(valve.eventsOf('retry')).toEqual([]);
  });

  it('retries a Request with a body by sending clones; the caller’s Request stays unread', async () => {
    const { clock, valve } = setup();
    const { fn, calls } = scripted(clock, [
      { status: 429, headers: { 'retry-after': '1' } },
      { status: 200 },
    ]);
    const request = new Request('https://a.example/post', { method: 'POST', body: 'payload' });
    const p = wrapFetch(valve, fn)(request);
    await clock.runAllAsync();
    expect((await p).status).toBe(200);
    expect(calls).toHaveLength(2);
    for (const call of calls) {
      expect(call.input).toBeInstanceOf(Request);
      expect(call.input).not.toBe(request);
      expect(await (call.input as Request).text()).toBe('payload');
    }
    expect(request.bodyUsed).toBe(false);
    expect((valve.eventsOf('retry')[0] as FetchRetryEvent).url).toBe('https://a.example/post');
  });

  it('does not retry a Request whose body was already used', async () => {
    const { clock, valve } = setup();
    const { fn, calls } = scripted(clock, [
      { status: 429, headers: { 'retry-after': '1' } },
      { status: 200 },
    ]);
    const request = new Request('https://a.example/post', { method: 'POST', body: 'payload' });
    await request.text();
    const p = wrapFetch(valve, fn)(request);
    await clock.runAllAsync();
    expect((await p).status).toBe(429);
    expect(calls).toHaveLength(1);
  });
});

describe('wrapFetch: signals', () => {
  it('rejects at once with the reason when the signal is already aborted; fetch is never called', async () => {
    const { clock, valve } = setup();
    const { fn, calls } = scripted(clock, [{ status: 200 }]);
    const reason = new Error('gone');
    await expect(
      wrapFetch(valve, fn)('https://a.example', { signal: AbortSignal.abort(reason) }),
    ).rejects.toBe(reason);
    expect(calls).toHaveLength(0);
  });

  it('honours init.signal while queued for a retry', async () => {
    const { clock, valve } = setup();
    const { fn, calls } = scripted(clock, [
      { status: 429, headers: { 'retry-after': '10' } },
      { status: 200 },
    ]);
    const controller = new AbortController();
    const p = wrapFetch(valve, fn)('https://a.example', { signal: controller.signal });
    const settled = p.then(
      () => 'resolved',
      (e: unknown) => e,
    );
    await clock.tickAsync(5000);
    controller.abort(new Error('stop'));
    await flushMicrotasks();
    expect(await settled).toMatchObject({ message: 'stop' });
    await clock.runAllAsync();
    expect(calls).toHaveLength(1);
  });

  it('honours a Request’s signal while queued', async () => {
    const { clock, valve } = setup(1);
    const { fn, calls } = scripted(clock, [
      { status: 429, headers: { 'retry-after': '10' } },
      { status: 200 },
    ]);
    const f = wrapFetch(valve, fn);
    const first = f('https://a.example/1');
    await flushMicrotasks();
    const controller = new AbortController();
    const second = f(new Request('https://a.example/2', { signal: controller.signal }));
    const settled = second.then(
      () => 'resolved',
      (e: unknown) => e,
    );
    await clock.tickAsync(1000);
    controller.abort(new Error('request aborted'));
    expect(await settled).toMatchObject({ message: 'request aborted' });
    await clock.runAllAsync();
    await first;
    expect(calls.map((c) => String(c.input))).toEqual(['https://a.example/1', 'https://a.example/1']);
  });

  it('passes a signal to fetch that aborts with the caller’s reason while running', async () => {
    const { valve, clock } = setup();
    let seen: AbortSignal | undefined;
    const fn = (_input: string | URL | Request, init?: RequestInit) =>
      new Promise<Response>((_resolve, reject) => {
        seen = init?.signal ?? undefined;
        seen?.addEventListener('abort', () => reject(seen?.reason));
      });
    const controller = new AbortController();
    const p = wrapFetch(valve, fn)('https://a.example', { signal: controller.signal });
    await clock.tickAsync(0);
    expect(seen).toBeDefined();
    expect(seen).not.toBe(controller.signal);
    const reason = new Error('cancelled by caller');
    controller.abort(reason);
    await expect(p).rejects.toBe(reason);
    expect(seen?.aborted).toBe(true);
  });
});

describe('wrapFetch: types', () => {
  it('has fetch’s exact signature', () => {
    const { valve } = setup();
    expectTypeOf(wrapFetch(valve)).toEqualTypeOf<typeof fetch>();
    const custom = async (input: string, init?: { method?: string }) =>
      new Response(`${input}${init?.method}`);
    expectTypeOf(wrapFetch(valve, custom)).toEqualTypeOf<typeof custom>();
  });
});

describe('wrapFetch: close()', () => {
  for (const drain of [true, false]) {
    it(`a request answered 429 after close({ drain: ${drain} }) returns that answer, body intact, and is not retried`, async () => {
      const clock = new FakeClock(NOW);
      const valve = createValve({ id: `closing-${drain}`, clock, store: memoryStore({ clock }) });
      let answer!: (r: Response) => void;
      let calls = 0;
      const fetchFn = (async () => {
        calls++;
        return new Promise<Response>((resolve) => (answer = resolve));
      }) as typeof fetch;
      const wrapped = valve.wrapFetch(fetchFn);
      const response = wrapped('https://api.example.com/x');
      await flushMicrotasks();
      expect(calls).toBe(1);
      let closed = false;
      const closing = valve.close({ drain }).then(() => (closed = true));
      answer(new Response('slow down', { status: 429, headers: { 'retry-after': '1' } }));
      const r = await response;
      expect(r.status).toBe(429);
      expect(await r.text()).toBe('slow down');
      await closing;
      expect(closed).toBe(true);
      expect(calls).toBe(1);
    });
  }
});

describe('wrapFetch: a retry that is never sent', () => {
  /** A real valve on a fake clock, and a fetch that answers 429 (`retry-after: 10`) with a body. */
  function always429(id: string, maxWait?: number) {
    const clock = new FakeClock(NOW);
    const valve = createValve({ id, clock, store: memoryStore({ clock }), ...(maxWait ? { maxWait } : {}) });
    const cancelled: number[] = [];
    let calls = 0;
    const fetchFn = (async () => {
      const n = ++calls;
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(new TextEncoder().encode(`slow down ${n}`));
          c.close();
        },
        cancel() {
          cancelled.push(n);
        },
      });
      return new Response(body, { status: 429, headers: { 'retry-after': '10' } });
    }) as typeof fetch;
    return { clock, valve, fetchFn, cancelled, calls: () => calls };
  }

  for (const drain of [false, true]) {
    it(`close({ drain: ${drain} }) while a retry waits: the call returns the 429 it had, body intact; nothing more is sent`, async () => {
      const { clock, valve, fetchFn, cancelled, calls } = always429(`queued-retry-${drain}`);
      const retries: unknown[] = [];
      valve.on('retry', (e) => retries.push(e));
      const response = valve.wrapFetch(fetchFn)('https://api.example.com/x');
      const settled = response.then(
        (r) => r,
        (e: unknown) => e,
      );
      while (retries.length === 0) await clock.tickAsync(1);
      expect(valve.stats().queued).toBe(1);
      const closing = valve.close({ drain });
      await clock.runAllAsync();
      const r = await settled;
      expect(r).toBeInstanceOf(Response);
      expect((r as Response).status).toBe(429);
      expect(await (r as Response).text()).toBe('slow down 1');
      await closing;
      expect(calls()).toBe(1);
      expect(cancelled).toEqual([]);
    });
  }

  it('close({ drain: true }) while a retry waits out a 10 s pause: the 429 comes back at once, and close() resolves without waiting the pause', async () => {
    const { clock, valve, fetchFn, calls } = always429('drain-now');
    const retries: unknown[] = [];
    valve.on('retry', (e) => retries.push(e));
    const settled = valve
      .wrapFetch(fetchFn)('https://api.example.com/x')
      .then(
        (r) => r,
        (e: unknown) => e,
      );
    while (retries.length === 0) await clock.tickAsync(1);
    const t0 = clock.now();
    let closed = false;
    const closing = valve.close({ drain: true }).then(() => (closed = true));
    await clock.tickAsync(5);
    const r = await settled;
    expect(r).toBeInstanceOf(Response);
    expect(await (r as Response).text()).toBe('slow down 1');
    await closing;
    expect(closed).toBe(true);
    expect(clock.now() - t0).toBeLessThan(1000);
    expect(calls()).toBe(1);
  });

  it('close({ drain: true }) while a retry is being sent lets it finish: its answer is returned', async () => {
    const clock = new FakeClock(NOW);
    const valve = createValve({ id: 'drain-sending', clock, store: memoryStore({ clock }) });
    let calls = 0;
    let release: (() => void) | undefined;
    const fetchFn = (async () => {
      calls++;
      if (calls === 1) return new Response('slow down', { status: 429, headers: { 'retry-after': '1' } });
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      return new Response('ok', { status: 200 });
    }) as typeof fetch;
    const settled = valve.wrapFetch(fetchFn)('https://api.example.com/x');
    while (release === undefined) await clock.tickAsync(10);
    const closing = valve.close({ drain: true });
    await clock.tickAsync(10);
    release();
    const r = await settled;
    expect(r.status).toBe(200);
    await closing;
    expect(calls).toBe(2);
  });

  it('a retry that does not start within maxWait: the call returns the 429 it had, body intact', async () => {
    const { clock, valve, fetchFn, calls } = always429('maxwait-retry', 500);
    const settled = valve
      .wrapFetch(fetchFn)('https://api.example.com/x')
      .then(
        (r) => r,
        (e: unknown) => e,
      );
    await clock.tickAsync(1000);
    const r = await settled;
    expect(r).toBeInstanceOf(Response);
    expect((r as Response).status).toBe(429);
    expect(await (r as Response).text()).toBe('slow down 1');
    expect(calls()).toBe(1);
    await valve.close();
  });

  it('a retry the store refuses (STORE_UNAVAILABLE): the call returns the 429 it had', async () => {
    const { clock, valve } = setup();
    const { fn, calls } = scripted(clock, [{ status: 429, headers: { 'retry-after': '1' }, body: 'first' }]);
    const runAt = valve.runAt.bind(valve);
    let attempts = 0;
    valve.runAt = ((job, options, sequence, onSequence) =>
      ++attempts === 1
        ? runAt(job, options, sequence, onSequence)
        : Promise.reject(new ValveError('STORE_UNAVAILABLE', 'the store is down'))) as typeof valve.runAt;
    const p = wrapFetch(valve, fn)('https://a.example');
    await clock.runAllAsync();
    const r = await p;
    expect(r.status).toBe(429);
    expect(await r.text()).toBe('first');
    expect(calls).toHaveLength(1);
  });

  it("the caller's abort while a retry waits still rejects with its reason, and frees the 429's body", async () => {
    const { clock, valve, fetchFn, cancelled, calls } = always429('aborted-retry');
    const controller = new AbortController();
    const settled = valve
      .wrapFetch(fetchFn)('https://api.example.com/x', { signal: controller.signal })
      .then(
        () => 'resolved',
        (e: unknown) => e,
      );
    await clock.tickAsync(1000);
    controller.abort(new Error('stop'));
    expect(await settled).toMatchObject({ message: 'stop' });
    expect(cancelled).toEqual([1]);
    expect(calls()).toBe(1);
    await valve.close();
  });

  it("the 429's body is freed when its retry is sent, not before", async () => {
    const { clock, valve, fetchFn, cancelled, calls } = always429('freed-at-send');
    const settled = valve.wrapFetch(fetchFn, { retries: 1 })('https://api.example.com/x');
    await clock.tickAsync(9000);
    expect(cancelled).toEqual([]);
    await clock.tickAsync(2000);
    const r = await settled;
    expect(calls()).toBe(2);
    expect(cancelled).toEqual([1]);
    expect(await r.text()).toBe('slow down 2');
    await valve.close();
  });
});
