/**
 * The ACL rules of docs/redis.md (the store's user) and docs/operating.md (the `valve`
 * command's), read from the docs, confine a user to its own prefix. Every key and channel valve
 * writes is `<prefix>:{<id>}:…`, so `~valve:{*` and `&valve:{*` cover them all (`{` is literal
 * in an ACL glob), and nothing of a store whose prefix merely starts with `valve:` (`valve:other`,
 * whose keys are `valve:other:{<id>}:…`). On Redis 7 and Valkey, as those users: every feature
 * works (rules of each kind, global leases and their renewals, pause and resume with wake-ups,
 * setRules, the line of turns, a valve group's batched admissions, wrapFetch's fleet window, and
 * the command's status, pause, resume, watch and doctor) with nothing in ACL LOG, and every key
 * and channel of the prefix `valve:other` is refused.
 */
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createValve, createValveGroup } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { valve as cli } from '../cli/run-cli.js';
import { type FakeApi, startFakeApi } from '../helpers/fake-apis.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** The rules after `ACL SETUSER <user> on >change-me` in `doc`. */
function docRule(doc: string, user: string): string[] {
  const text = readFileSync(new URL(`../../${doc}`, import.meta.url), 'utf8');
  const line = new RegExp(`^ACL SETUSER ${user} on >change-me (.+)$`, 'm').exec(text)?.[1];
  expect(line, `${doc} has the ACL SETUSER ${user} line`).toBeDefined();
  return line!.split(' ');
}

it('the documented rules give the keys and channels as <prefix>:{*', () => {
  for (const rule of [docRule('docs/redis.md', 'valve'), docRule('docs/operating.md', 'valve-ops')]) {
    expect(rule.filter((r) => /^[~&%]/.test(r))).toEqual(['~valve:{*', '&valve:{*']);
  }
});

/** ACL LOG as objects: who was refused what, and why. */
async function aclLog(admin: Redis): Promise<Record<string, string>[]> {
  const entries = (await admin.call('ACL', 'LOG')) as unknown[][];
  return entries.map((flat) => {
    const entry: Record<string, string> = {};
    for (let i = 0; i < flat.length; i += 2) entry[String(flat[i])] = String(flat[i + 1]);
    return entry;
  });
}

for (const kind of ['redis', 'valkey'] as const) {
  describe(`${kind}: the documented ACL users, prefix valve`, () => {
    let server: RedisServer;
    let admin: Redis;
    let api: FakeApi;
    const conns: Redis[] = [];
    const as = (user: string) => {
      const c =
        user === 'default'
          ? new Redis(server.url)
          : new Redis({ host: server.host, port: server.port, username: user, password: 'pw' });
      conns.push(c);
      return c;
    };
    const url = (user: string) => `redis://${user}:pw@${server.host}:${server.port}`;

    beforeAll(async () => {
      // docs/redis.md: on Redis 7.2+ and Valkey, also +client|setinfo (7.0 refuses a rule naming it).
      const extra = kind === 'valkey' ? ['+client|setinfo'] : [];
      server = await startRedis({
        kind,
        aclUser: [
          { name: 'valve', password: 'pw', rules: [...docRule('docs/redis.md', 'valve'), ...extra] },
          {
            name: 'valve-ops',
            password: 'pw',
            rules: [...docRule('docs/operating.md', 'valve-ops'), ...extra],
          },
        ],
      });
      admin = new Redis(server.url);
      api = await startFakeApi('generic', { limit: 100, windowMs: 1000 });
    });
    afterAll(async () => {
      for (const c of conns) c.disconnect();
      admin?.disconnect();
      await api?.stop();
      await server?.stop();
    });

    it('every feature works as these users, with nothing in ACL LOG', async () => {
      await admin.call('ACL', 'LOG', 'RESET');
      const client = as('valve');
      const subscriber = as('valve');
      const store = redisStore({ client, subscriber });
      const other = redisStore({ client: as('valve'), subscriber: as('valve') }); // another process
      const errors: string[] = [];
      const watch = <T extends { on(e: 'store-error', f: (e: unknown) => void): unknown }>(v: T) => {
        v.on('store-error', (e) => errors.push(String(e)));
        return v;
      };

      // Every rule kind, global leases renewed while the jobs run (leaseTtl 1 s: every 333 ms).
      const leased = watch(
        createValve({
          id: 'leased',
          store,
          rules: [
            { limit: 50, interval: '1s' },
            { limit: 100, interval: '10s', algorithm: 'fixed-window' },
            { limit: 100, interval: '10s', algorithm: 'sliding-window' },
          ],
          concurrency: { limit: 2, scope: 'global', leaseTtl: 1000 },
        }),
      );
      const lost: string[] = [];
      leased.on('lease-lost', () => lost.push('lost'));
      expect(await Promise.all([1, 2, 3, 4].map((n) => leased.run(() => sleep(500).then(() => n))))).toEqual([
        1, 2, 3, 4,
      ]);
      expect(lost).toEqual([]);
      await leased.setRules([{ limit: 40, interval: '1s' }]);
      expect(await leased.run(() => 'after setRules')).toBe('after setRules');

      // A shared pause, its wake-ups confirmed (probe published and received), then resumed.
      const paused = watch(createValve({ id: 'paused', store, rules: { limit: 10, interval: '1s' } }));
      const remote = watch(createValve({ id: 'paused', store: other, rules: { limit: 10, interval: '1s' } }));
      await remote.pause('1h');
      const job = paused.run(() => 'resumed');
      for (let i = 0; i < 250 && !store.listening?.('paused'); i++) await sleep(20);
      expect(store.listening?.('paused')).toBe(true);
      await remote.resume();
      expect(await job).toBe('resumed');

      // The line of turns: two valves of one tight GCRA rule, both with jobs waiting.
      const tight = { limit: 20, interval: '1s', burst: 5 } as const;
      const a = watch(createValve({ id: 'tight', store, rules: tight }));
      const b = watch(createValve({ id: 'tight', store: other, rules: tight }));
      const turns = await Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 ? a : b).run(() => i)));
      expect(turns).toHaveLength(30);

      // A valve group's keys, admitted together (acquire-many on a standalone server).
      const group = createValveGroup({ store, rules: { limit: 5, interval: '1s' } });
      group.on('store-error', (e) => errors.push(String(e)));
      expect(
        await Promise.all(Array.from({ length: 40 }, (_, i) => group.run(`key-${i % 20}`, () => i))),
      ).toHaveLength(40);

      // wrapFetch: the fleet window.
      const fetching = watch(createValve({ id: 'fetching', store, rules: { limit: 100, interval: '1s' } }));
      const wrapped = fetching.wrapFetch(fetch);
      const statuses = await Promise.all(
        [1, 2, 3].map(() => wrapped(`${api.url}/items`).then((r) => r.status)),
      );
      expect(statuses).toEqual([200, 200, 200]);
      expect(await admin.exists('valve:{fetching}:window')).toBe(1);

      await Promise.all([leased, paused, remote, a, b, fetching].map((v) => v.close()));
      await group.close();

      // The command, as its own user.
      const args = ['--redis', url('valve-ops')];
      const status = await cli(['status', 'leased', '--json', ...args]);
      expect(status.code, status.stderr).toBe(0);
      expect(JSON.parse(status.stdout).mismatch.checked).toBe(true);
      expect((await cli(['pause', 'leased', '1m', ...args])).code).toBe(0);
      expect((await cli(['resume', 'leased', ...args])).code).toBe(0);
      expect((await cli(['watch', 'leased', '--count', '1', ...args])).code).toBe(0);
      const doctor = await cli(['doctor', '--json', ...args]);
      expect(doctor.code, doctor.stdout).toBe(0);
      expect(JSON.parse(doctor.stdout).checks.map((c: { level: string }) => c.level)).not.toContain('warn');

      expect(errors).toEqual([]);
      // doctor asks ACL WHOAMI first (to use ACL DRYRUN when allowed): the one refusal expected.
      const log = (await aclLog(admin)).filter((e) => !(e.reason === 'command' && e.object === 'acl|whoami'));
      expect(log).toEqual([]);
    }, 60_000);

    it("the prefix valve:other's keys and channels are refused to both users", async () => {
      // Another deployment's store (the default user), prefix 'valve:other'.
      const victim = createValve({
        id: 'x',
        store: redisStore({ client: as('default'), prefix: 'valve:other' }),
        rules: { limit: 10, interval: '1s' },
      });
      await admin.call('ACL', 'LOG', 'RESET');
      const intruder = redisStore({ client: as('valve'), prefix: 'valve:other' });
      await expect(intruder.pause('x', 3_600_000)).rejects.toThrow(/NOPERM/);
      await expect(intruder.resume('x')).rejects.toThrow(/NOPERM/);
      await expect(intruder.acquire({ id: 'x', rules: [], costs: [1], count: 1 })).rejects.toThrow(/NOPERM/);
      await expect(as('valve').subscribe('valve:other:{x}:wake')).rejects.toThrow(/NOPERM/);
      const args = ['--redis', url('valve-ops'), '--prefix', 'valve:other'];
      const pause = await cli(['pause', 'x', '1h', ...args]);
      expect(pause.code).toBe(1);
      expect(pause.stderr).toMatch(/NOPERM/);
      expect((await cli(['status', 'x', ...args])).code).toBe(1);
      expect(await admin.keys('valve:other:*')).toEqual([]);
      expect(await victim.run(() => 'ran', { signal: AbortSignal.timeout(2000) })).toBe('ran');
      await victim.close();
      const refused = await aclLog(admin);
      expect(refused.length).toBeGreaterThan(0);
      for (const e of refused) expect(e.object).toMatch(/^valve:other:\{x\}:|^acl\|whoami$/);
    }, 30_000);
  });
}
