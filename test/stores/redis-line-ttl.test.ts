/**
 * docs/redis.md, "What valve stores": the line of turns' key lives until its last ticket's turn
 * plus 2 ms (the grace after which an unused turn is skipped, TURN_GRACE_US), rounded up to a
 * whole millisecond; not seconds past it.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { normalizeRule } from '../../src/rules/rule.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { spacing, TURN_GRACE_US } from '../../src/stores/turns.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

let client: Redis;
beforeAll(() => {
  client = new Redis(sharedRedis().url);
});
afterAll(() => client?.disconnect());

it("the line key expires 2 ms (rounded up to a whole ms) after its last ticket's turn", async () => {
  expect(TURN_GRACE_US).toBe(2000);
  const prefix = uniquePrefix('line-ttl');
  const store = redisStore({ client, prefix });
  const rule = normalizeRule({ limit: 1, interval: '1s' }, 'rules[0]');
  const ask = (turn: number) => store.acquire({ id: 'x', rules: [rule], costs: [1], count: 1, turn });
  expect((await ask(0)).granted).toBe(1);
  // Two callers turned away: two tickets, the second's turn one spacing after the first's.
  const first = await ask(0);
  const second = await ask(0);
  expect([first.granted, second.granted]).toEqual([0, 0]);
  expect(second.turn).toBe(first.turn! + 1);
  const key = `${prefix}:{x}:line:${rule.digest}`;
  const [head, tail, at, step] = (await client.get(key))!.split(':').map(Number) as [
    number,
    number,
    number,
    number,
  ];
  expect(tail - head).toBe(2);
  const lastTurnUs = at + (tail - head - 1) * spacing(step);
  const expiresMs = Number(await client.call('PEXPIRETIME', key));
  // Written with PX ceil((last turn + grace − now + 1 µs) / 1000) from the script's start, which
  // the server counts in whole ms (up to 1 ms before TIME's now): it expires 2 to 3 ms after
  // the last turn, give or take that millisecond.
  const after = expiresMs * 1000 - lastTurnUs;
  expect(after).toBeGreaterThan(TURN_GRACE_US - 1000);
  expect(after).toBeLessThanOrEqual(TURN_GRACE_US + 1000 + 1);
});
