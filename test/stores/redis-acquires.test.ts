/**
 * How redisStore sends acquire calls (src/stores/redis/acquires.ts): several ids in one
 * acquire-many.lua call on a standalone server, each answered exactly as its own acquire.lua
 * call would be; a corrupt id fails alone; at most MAX_IN_FLIGHT requests in flight, the rest
 * waiting unsent (and rejected, unsent, when the server stops answering). Real servers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { MAX_IN_FLIGHT, MAX_PER_CALL } from '../../src/stores/redis/acquires.js';
import { RedisStoreTimeoutError, redisStore } from '../../src/stores/redis/index.js';
import type { AcquireResult } from '../../src/stores/store.js';
import { CLIENT_FAMILIES, connectClient, connectCluster } from '../helpers/redis-clients.js';
import { respCommand } from '../helpers/resp.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { sharedCluster, uniquePrefix } from '../helpers/shared-servers.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const gcra = normalizeRule({ limit: 3, interval: '1h', burst: 3 }, 'rules[0]');
const fixed = normalizeRule({ limit: 4, interval: '1h', algorithm: 'fixed-window' }, 'rules[1]');
const sliding = normalizeRule({ limit: 5, interval: '1h', algorithm: 'sliding-window' }, 'rules[2]');

async function scriptCalls(server: RedisServer): Promise<{ evalsha: number; time: number }> {
  const info = String(await respCommand(server, ['INFO', 'commandstats']));
  return {
    evalsha: Number(/cmdstat_evalsha:calls=(\d+)/.exec(info)?.[1] ?? 0),
    time: Number(/cmdstat_time:calls=(\d+)/.exec(info)?.[1] ?? 0),
  };
}

/** What a caller sees of an answer (the store's clock aside). */
const seen = (r: AcquireResult) => ({
  granted: r.granted,
  blocked: r.blocked,
  retryAfterPositive: r.retryAfter > 0,
  recorded: r.recorded,
});

describe('acquire calls of many ids at once (standalone server)', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  for (const family of CLIENT_FAMILIES) {
    // With a sliding window each request is sent whole; with GCRA and fixed windows only, in
    // acquire-many.lua's short form.
    for (const [form, rules] of [
      ['whole', [gcra, fixed, sliding]],
      ['short form', [gcra, fixed]],
    ] as const) {
      it(`calls made together go out as one script call per ${MAX_PER_CALL}, each answered as alone (${family}, ${form})`, async () => {
        const c = await connectClient(family, server);
        try {
          const prefix = uniquePrefix('many');
          const store = redisStore({ client: c.client, prefix });
          const alone = redisStore({ client: c.client, prefix: `${prefix}-alone` });
          // Scripts loaded (acquire.lua alone, acquire-many.lua with two at once).
          await store.acquire({ id: 'warm', rules, costs: [1], count: 1 });
          await Promise.all([1, 2].map(() => store.acquire({ id: 'warm', rules, costs: [1], count: 1 })));
          // 100 ids, each asked three times in the same turn (pipelined calls of one valve): 2
          // granted, then 1 (the GCRA's burst of 3 is spent), then none. Rules that do not
          // refill during the test, so that the calls one at a time below see the same state.
          // The second call records another rule set: it and the third are told of a mismatch.
          const record = (k: number) => (k === 1 ? fixed.digest : gcra.digest);
          const ids = Array.from({ length: 100 }, (_, i) => `id-${i}`);
          const before = await scriptCalls(server);
          const together = await Promise.all(
            ids.flatMap((id) =>
              [0, 1, 2].map((k) => store.acquire({ id, rules, costs: [1, 1], count: 2, record: record(k) })),
            ),
          );
          const after = await scriptCalls(server);
          // 300 requests: ⌈300 / 64⌉ script calls, one TIME each.
          expect(after.evalsha - before.evalsha).toBe(Math.ceil(300 / MAX_PER_CALL));
          expect(after.time - before.time).toBe(Math.ceil(300 / MAX_PER_CALL));
          // The same calls one at a time, on their own keys: the same answers.
          const oneByOne: AcquireResult[] = [];
          for (const id of ids) {
            for (let k = 0; k < 3; k++) {
              oneByOne.push(await alone.acquire({ id, rules, costs: [1, 1], count: 2, record: record(k) }));
            }
          }
          expect(together.map(seen)).toEqual(oneByOne.map(seen));
          expect(together.slice(0, 3).map((r) => r.granted)).toEqual([2, 1, 0]);
          expect(together.slice(0, 3).map((r) => r.recorded)).toEqual([
            undefined,
            [gcra.digest],
            [fixed.digest],
          ]);
        } finally {
          await c.close();
        }
      });
    }

    it(`an id whose state is corrupt fails alone; the others of its call are answered (${family})`, async () => {
      const c = await connectClient(family, server);
      try {
        const prefix = uniquePrefix('corrupt');
        const store = redisStore({ client: c.client, prefix });
        await respCommand(server, ['SET', `${prefix}:{bad}:pause`, 'not a time']);
        // A list where a string is expected: redis.call would raise inside the script.
        await respCommand(server, ['RPUSH', `${prefix}:{worse}:r:${gcra.digest}`, 'x']);
        const ids = ['a', 'bad', 'b', 'worse', 'c'];
        const results = await Promise.allSettled(
          ids.map((id) => store.acquire({ id, rules: [gcra], costs: [1], count: 1 })),
        );
        expect(results.map((r) => r.status)).toEqual([
          'fulfilled',
          'rejected',
          'fulfilled',
          'rejected',
          'fulfilled',
        ]);
        expect(String((results[1] as PromiseRejectedResult).reason)).toMatch(
          /VALVE_CORRUPT_STATE .*\{bad\}:pause/,
        );
        expect(String((results[3] as PromiseRejectedResult).reason)).toMatch(
          /VALVE_CORRUPT_STATE .*\{worse\}/,
        );
        for (const i of [0, 2, 4])
          expect((results[i] as PromiseFulfilledResult<AcquireResult>).value.granted).toBe(1);
      } finally {
        await c.close();
      }
    });
  }

  it('every key of the short form holding what valve never writes (or odd forms it accepts) is answered as by acquire.lua, word for word (without a ticket and with ticket 0)', async () => {
    const c = await connectClient('ioredis', server);
    try {
      const prefix = uniquePrefix('short-corrupt');
      const store = redisStore({ client: c.client, prefix });
      const rules = [gcra, fixed];
      await store.acquire({ id: 'warm', rules, costs: [1], count: 1 });
      await Promise.all([1, 2].map(() => store.acquire({ id: 'warm', rules, costs: [1], count: 1 })));
      const now = Date.now();
      const k = Math.floor((now * 1000) / (fixed.emissionUs * fixed.burst));
      const strings: [string, string][] = [
        ...[
          'not a time',
          '1e3',
          ' 12',
          '12.',
          '0x10',
          '',
          String(now + 400 * 86_400_000),
          '0012',
          String(now + 60_000),
        ].map((v): [string, string] => ['pause', v]),
        ...[
          '12.5',
          '1e3',
          ' 12',
          '0x10',
          '-5',
          '',
          'nan',
          '99999999999999999999',
          '0012',
          String(now * 1000 + 5),
        ].map((v): [string, string] => [`r:${gcra.digest}`, v]),
        ...['abc', `${k}:x`, `${k}:9`, `${k}:1.5`, `${k}`, `0:1`, `${k}:2`, `${k}:1e0`].map(
          (v): [string, string] => [`r:${fixed.digest}`, v],
        ),
        ...[
          'abc',
          '12:G1',
          '1e3:g1',
          ':g1',
          '12',
          '12:',
          `${now * 1000 + 9e9}:${gcra.digest}`,
          `1:${gcra.digest}`,
          `${(now + 400 * 86_400_000) * 1000}:g`,
          '12:g1:2',
          '0012:w1.2,g3',
        ].map((v): [string, string] => ['rules', v]),
      ];
      const typed = ['pause', `r:${gcra.digest}`, `r:${fixed.digest}`, 'rules'];
      let i = 0;
      const answer = (p: AcquireResult | PromiseLike<AcquireResult>) =>
        Promise.resolve(p).then(
          (r) =>
            JSON.stringify({
              ...seen(r),
              retryAfter: r.retryAfter > 0,
              pausedUntil: r.pausedUntil !== null,
              turn: r.turn,
            }),
          (err: unknown) => String(err).replaceAll(/\{(alone|together)-\d+\}/g, '{id}'),
        );
      const cases = [
        ...strings.map(([key, v]) => ({ key, v, list: false })),
        ...typed.map((key) => ({ key, v: 'x', list: true })),
      ];
      for (const [{ key, v, list }, turn] of cases.flatMap(
        (c) =>
          [
            [c, undefined],
            [c, 0],
          ] as const,
      )) {
        const put = async (id: string) => {
          const name = `${prefix}:{${id}}:${key}`;
          await respCommand(server, list ? ['RPUSH', name, v] : ['SET', name, v]);
        };
        const a = `alone-${i}`;
        const t = `together-${i++}`;
        await put(a);
        await put(t);
        const record = gcra.digest;
        const alone = await answer(store.acquire({ id: a, rules, costs: [1], count: 1, record, turn }));
        const [together] = await Promise.all([
          answer(store.acquire({ id: t, rules, costs: [1], count: 1, record, turn })),
          store.acquire({ id: `other-${i}`, rules, costs: [1], count: 1, record, turn }),
        ]);
        expect(together, `${key} = ${JSON.stringify(v)}${list ? ' (a list)' : ''}, turn ${turn}`).toBe(alone);
      }
    } finally {
      await c.close();
    }
  });

  it(`at most ${MAX_IN_FLIGHT} requests in flight; when the server stops answering, the requests that waited as long as the timeout fail unsent`, async () => {
    const c = await connectClient('ioredis', server);
    try {
      const store = redisStore({ client: c.client, prefix: uniquePrefix('window'), timeout: 300 });
      await store.acquire({ id: 'warm', rules: [gcra], costs: [1], count: 1 });
      await Promise.all([1, 2].map(() => store.acquire({ id: 'warm', rules: [gcra], costs: [1], count: 1 })));
      const before = await scriptCalls(server);
      server.kill('SIGSTOP');
      const n = MAX_IN_FLIGHT + 500;
      const started = Date.now();
      const results = await Promise.allSettled(
        Array.from({ length: n }, (_, i) =>
          store.acquire({ id: `w${i}`, rules: [gcra], costs: [1], count: 1 }),
        ),
      );
      const elapsed = Date.now() - started;
      server.kill('SIGCONT');
      const messages = results.map((r) => {
        expect(r.status).toBe('rejected');
        const reason = (r as PromiseRejectedResult).reason as Error;
        expect(reason).toBeInstanceOf(RedisStoreTimeoutError);
        return reason.message;
      });
      const unanswered = messages.filter((m) => /did not answer within 300 ms/.test(m)).length;
      const unsent = messages.filter((m) => /was not sent: it waited 300 ms/.test(m)).length;
      expect(unanswered).toBe(MAX_IN_FLIGHT);
      expect(unsent).toBe(500);
      // Each id named in its own error.
      expect(messages[0]).toMatch(/"w0"/);
      expect(messages[n - 1]).toMatch(new RegExp(`"w${n - 1}"`));
      expect(elapsed).toBeLessThan(3000);
      // Only the calls of the first MAX_IN_FLIGHT requests reached the server (once it reads
      // what was written while it was stopped).
      const calls = MAX_IN_FLIGHT / MAX_PER_CALL;
      const end = Date.now() + 10_000;
      while ((await scriptCalls(server)).evalsha - before.evalsha < calls && Date.now() < end)
        await sleep(20);
      await sleep(200);
      expect((await scriptCalls(server)).evalsha - before.evalsha).toBe(calls);
    } finally {
      server.kill('SIGCONT');
      await c.close();
    }
  });
});

describe('acquire calls of many ids on a cluster', () => {
  it('each request is its own call (the ids are in different slots), all answered', async () => {
    const c = await connectCluster('ioredis', sharedCluster().nodes);
    try {
      const store = redisStore({ client: c.client, prefix: uniquePrefix('many-cluster') });
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          store.acquire({ id: `c${i}`, rules: [gcra], costs: [1, 1], count: 2 }),
        ),
      );
      expect(results.map((r) => r.granted)).toEqual(Array(200).fill(2));
    } finally {
      await c.close();
    }
  });
});
