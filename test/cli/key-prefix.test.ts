/**
 * `--key-prefix`: the `valve` command against an application whose ioredis client has a
 * `keyPrefix` ('app:'). Such a store's keys are `app:<prefix>:{<id>}:…`, its wake channel
 * `<prefix>:{<id>}:wake` (ioredis prefixes keys, not classic channels, and sharded subscribers
 * must have no keyPrefix). With the option, `status` finds the application's rules, pause and
 * leases, and `pause`/`resume` reach its subscribed valve at once, through every client the
 * command can use (node-redis has no keyPrefix: the command adds it), standalone and cluster;
 * without it the id is unknown (exit 3). `doctor` checks the keys and channels the application
 * uses. The application's valve runs in this process, on real servers, as cli.test.ts does.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Check } from '../../src/cli/doctor.js';
import type { IdStatus } from '../../src/cli/state.js';
import { createValve, type Valve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import { type Ran, valve } from './run-cli.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

const json = <T>(r: Ran): T => {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
};

const RULES = [
  { limit: 10, interval: '1h', burst: 10 },
  { limit: 50, interval: '1h', algorithm: 'sliding-window' as const },
];
const DIGESTS = ['g10.3600000000.10', 's50.3600000000'];
const HOUR = 3_600_000;

const seeds = () => sharedCluster().nodes.map((n) => ({ host: n.host, port: n.port }));

/**
 * The application: a valve on a store whose ioredis client has keyPrefix 'app:', with a
 * subscriber (standalone: the client's duplicate, keyPrefix and all, as applications write it;
 * cluster: a sharded subscriber, which must have none). One job of cost 2 ran; two jobs hold
 * global leases until release().
 */
async function application(cluster: boolean, prefix: string, id: string) {
  const client = cluster
    ? new Cluster(seeds(), { keyPrefix: 'app:', redisOptions: { maxRetriesPerRequest: 2 } })
    : new Redis(sharedRedis().url, { keyPrefix: 'app:' });
  const subscriber = cluster ? new Cluster(seeds(), { shardedSubscribers: true }) : client.duplicate();
  const store = redisStore({ client, subscriber, prefix });
  const v: Valve = createValve({
    id,
    rules: RULES,
    store,
    concurrency: { limit: 4, scope: 'global', leaseTtl: 60_000 },
  });
  await v.run(() => {}, { cost: 2 });
  let release = () => {};
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const tokens: string[] = [];
  const held = [0, 1].map(() =>
    v.run(async (ctx) => {
      tokens.push(ctx.lease!.token);
      await gate;
    }),
  );
  // The command's resume reaches the valve through the store's wake-ups: wait until they are
  // confirmed delivered for the id.
  await expect
    .poll(() => tokens.length === 2 && store.listening?.(id) === true, { timeout: 10_000 })
    .toBe(true);
  return {
    valve: v,
    tokens,
    async close() {
      release();
      await Promise.all(held);
      await v.close();
      client.disconnect();
      subscriber.disconnect();
    },
  };
}

interface Case {
  name: string;
  cluster: boolean;
  /** The command's connection arguments. */
  args: () => string[];
}

const cases: Case[] = [
  { name: 'standalone, ioredis', cluster: false, args: () => ['--redis', sharedRedis().url] },
  {
    name: 'standalone, iovalkey',
    cluster: false,
    args: () => ['--redis', sharedRedis().url, '--client', 'iovalkey'],
  },
  // node-redis has no keyPrefix: the command puts it before each key itself.
  {
    name: 'standalone, node-redis',
    cluster: false,
    args: () => ['--redis', sharedRedis().url, '--client', 'redis'],
  },
  {
    name: 'cluster, ioredis',
    cluster: true,
    args: () => ['--redis', `redis://${seeds()[0]!.host}:${seeds()[0]!.port}`],
  },
  {
    name: 'cluster, node-redis',
    cluster: true,
    args: () => ['--redis', `redis://${seeds()[1]!.host}:${seeds()[1]!.port}`, '--client', 'redis'],
  },
];

describe('an application whose ioredis client has keyPrefix "app:"', () => {
  it.concurrent.each(cases)(
    '$name: status finds it with --key-prefix (and not without); pause stops it and resume wakes it at once',
    async (c) => {
      const prefix = uniquePrefix('kp');
      const id = `kp:${c.name.replace(/\W+/g, '-')}`;
      const app = await application(c.cluster, prefix, id);
      try {
        const args = [...c.args(), '--prefix', prefix];
        const withKp = [...args, '--key-prefix', 'app:'];

        // status: the application's rules, leases and fence, read under app:<prefix>.
        const s = json<IdStatus>(await valve(['status', id, '--json', ...withKp]));
        expect(s).toMatchObject({ id, prefix, keyPrefix: 'app:', unknown: false, pause: null, problems: [] });
        expect(s.recorded?.digests).toEqual(DIGESTS);
        expect(s.mismatch).toEqual({ checked: true, digests: [] });
        // 4 units: the job of cost 2 and the two held jobs.
        expect(s.rules.map((r) => [r.digest, r.left])).toEqual([
          [DIGESTS[0], 6],
          [DIGESTS[1], 46],
        ]);
        expect(s.leases.map((l) => l.token).sort()).toEqual([...app.tokens].sort());
        expect(s.fence).toBe(Math.max(...s.leases.map((l) => l.fence)));
        const text = await valve(['status', id, ...withKp]);
        expect(text.code, text.stderr).toBe(0);
        expect(text.stdout.split('\n')[0]).toMatch(
          new RegExp(`^valve status ${id} {3}key prefix app:, prefix ${prefix}, store clock `),
        );
        expect(text.stdout).toContain('leases    2 held');

        // Without --key-prefix nothing is recorded under <prefix>: unknown id, exit code 3.
        const without = await valve(['status', id, ...args]);
        expect(without.code).toBe(3);
        expect(without.stderr).toMatch(
          new RegExp(
            `^valve: unknown id "${id}": .* under prefix ${prefix} \\(check --prefix, --key-prefix and the id\\)\\n$`,
          ),
        );

        // pause: the application's next job waits, with the command's pause.
        const paused = json<{ until: number; known: boolean }>(
          await valve(['pause', id, '1h', '--json', ...withKp]),
        );
        expect(paused.known).toBe(true);
        const heardPause = new Promise<number>((r) => app.valve.on('pause', (e) => r(e.until)));
        const heardResume = new Promise<void>((r) => app.valve.on('resume', () => r()));
        let started = 0;
        const queued = app.valve.run(() => {
          started = Date.now();
        });
        expect(Math.abs((await heardPause) - paused.until)).toBeLessThan(1);
        expect(started).toBe(0);
        const during = json<IdStatus>(await valve(['status', id, '--json', ...withKp]));
        expect(during.pause!.by).toMatch(/^valve pause by .+@.+$/);
        expect(during.pause!.in).toBeGreaterThan(HOUR - 60_000);

        // resume: the wake-up on the application's channel starts the queued job now, not in an hour.
        const resumed = json<{ wasPaused: boolean; known: boolean }>(
          await valve(['resume', id, '--json', ...withKp]),
        );
        expect(resumed).toMatchObject({ wasPaused: true, known: true });
        await heardResume;
        await queued;
        expect(started).toBeGreaterThan(0);
        expect(started).toBeLessThan(paused.until - HOUR + 60_000);
        expect(app.valve.stats().pausedUntil).toBeNull();
      } finally {
        await app.close();
      }
      const after = json<IdStatus>(
        await valve(['status', id, '--json', ...c.args(), '--prefix', prefix, '--key-prefix', 'app:']),
      );
      expect(after.leases).toEqual([]);
    },
    60_000,
  );

  it('watch reads it too', async () => {
    const prefix = uniquePrefix('kp');
    const app = await application(false, prefix, 'kp-watch');
    try {
      const args = ['--redis', sharedRedis().url, '--prefix', prefix];
      const r = await valve(['watch', 'kp-watch', '--count', '1', '--key-prefix', 'app:', ...args]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/kp-watch: 10 per 3600000ms \(gcra, burst 10\): 4\/10 in use/);
      expect(r.stdout).toMatch(/2 lease\(s\) held/);
      expect((await valve(['watch', 'kp-watch', '--count', '1', ...args])).code).toBe(3);
    } finally {
      await app.close();
    }
  });
});

describe('--key-prefix usage', () => {
  it.concurrent.each([
    [
      ['--key-prefix', ''],
      /^valve: --key-prefix: expected the client's keyPrefix \(e\.g\. app:\), got an empty string/,
    ],
    [['--key-prefix', 'a\ud800'], /^valve: --key-prefix: expected well-formed Unicode/],
  ])('%j is bad usage (exit 2), named in one line', async (extra, message) => {
    const r = await valve(['status', 'x', '--redis', sharedRedis().url, ...extra]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  });

  it('a hash tag in it is refused on a cluster (given or detected), as redisStore() refuses the client', async () => {
    const seed = `redis://${seeds()[0]!.host}:${seeds()[0]!.port}`;
    for (const args of [
      ['--redis', seed],
      ['--redis', seed, '--cluster'],
      ['--redis', seed, '--client', 'redis'],
    ]) {
      const r = await valve(['status', 'x', ...args, '--key-prefix', '{app}:']);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/^valve: --key-prefix: expected no '\{' or '\}' on a cluster, got "\{app\}:"/);
    }
    // A standalone server has no slots: an application may use one there.
    const prefix = uniquePrefix('kp');
    const client = new Redis(sharedRedis().url, { keyPrefix: '{app}:' });
    try {
      await createValve({ id: 'tagged', rules: RULES[0]!, store: redisStore({ client, prefix }) }).run(
        () => {},
      );
    } finally {
      client.disconnect();
    }
    const s = json<IdStatus>(
      await valve([
        'status',
        'tagged',
        '--json',
        '--redis',
        sharedRedis().url,
        '--prefix',
        prefix,
        '--key-prefix',
        '{app}:',
      ]),
    );
    expect(s.rules.map((r) => [r.digest, r.left])).toEqual([[DIGESTS[0], 9]]);
  });
});

describe('doctor --key-prefix', () => {
  /** An ACL user whose keys are app:<prefix>:{* and channels <prefix>:{* (docs/operating.md's rule). */
  let server: RedisServer;
  const prefix = 'ops';
  beforeAll(async () => {
    const line = /^ACL SETUSER valve-ops on >change-me (.+)$/m.exec(
      readFileSync(join(root, 'docs/operating.md'), 'utf8'),
    )![1]!;
    const rules = line
      .split(' ')
      .map((r) => (r === '~valve:{*' ? `~app:${prefix}:{*` : r === '&valve:{*' ? `&${prefix}:{*` : r));
    expect(rules).toContain(`~app:${prefix}:{*`);
    expect(rules).toContain(`&${prefix}:{*`);
    server = await startRedis({
      aclUser: { name: 'app', password: 'pw', rules: [...rules, '+acl|whoami', '+acl|dryrun'] },
    });
  });
  afterAll(() => server?.stop());

  it.concurrent.each(['ioredis', 'redis'])(
    '--client %s: checks the keys and channels of a keyPrefix application',
    async (client) => {
      const args = [
        '--redis',
        `redis://app:pw@${server.host}:${server.port}`,
        '--client',
        client,
        '--prefix',
        prefix,
      ];
      const report = json<{ ok: boolean; checks: Check[] }>(
        await valve(['doctor', '--json', '--key-prefix', 'app:', ...args]),
      );
      const by = Object.fromEntries(report.checks.map((c) => [c.name, c]));
      expect(report.ok, JSON.stringify(report.checks)).toBe(true);
      expect(by.acl!.detail).toBe(
        `ACL DRYRUN: user app may run every command the store needs on app:${prefix}:{…} keys and ${prefix}:{…} channels`,
      );
      expect(by.scripts!.detail).toMatch(new RegExp(`ran on app:${prefix}:\\{valve-doctor:[0-9a-f]+\\}$`));
      expect(by['wake-ups']!.level).toBe('ok');
      // The user may not touch <prefix>:{…} keys: without --key-prefix the store would not work.
      // (Its wake-up check waits --timeout for a probe the user may not send.)
      const without = await valve(['doctor', '--json', '--timeout', '2s', ...args]);
      expect(without.code).toBe(1);
      const failed = (JSON.parse(without.stdout) as { checks: Check[] }).checks.find(
        (c) => c.name === 'acl',
      )!;
      expect(failed.level).toBe('fail');
    },
    30_000,
  );

  it('on a cluster, every check passes with the keys under the keyPrefix', async () => {
    const p = uniquePrefix('kp');
    const seed = `redis://${seeds()[2]!.host}:${seeds()[2]!.port}`;
    const report = json<{ ok: boolean; checks: Check[] }>(
      await valve(['doctor', '--json', '--redis', seed, '--prefix', p, '--key-prefix', 'app:']),
    );
    expect(report.ok, JSON.stringify(report.checks)).toBe(true);
    const by = Object.fromEntries(report.checks.map((c) => [c.name, c]));
    expect(by.server!.detail).toMatch(/cluster of 3 masters/);
    expect(by.scripts!.detail).toMatch(new RegExp(`ran on app:${p}:\\{valve-doctor:[0-9a-f]+\\}$`));
    expect(by['wake-ups']).toMatchObject({
      level: 'ok',
      detail: `pub/sub delivers ${p}:{…}:wake (SSUBSCRIBE)`,
    });
  }, 30_000);
});
