/**
 * The `valve` command against the real servers the suite starts: Redis and Valkey, standalone
 * and cluster, an ACL user with exactly the rule docs/operating.md gives, and a TLS server.
 * `status --json` is compared with what a live valve in another process
 * (test/cli/live-worker.ts) just did; the command's pause and resume reach that valve as the
 * API's do.
 *
 * Most checks call the command's `main()` in this process (the same code the bin runs, with
 * its output captured and its exit code returned). What only a process shows runs the file
 * built as the package ships it (tsup, the cli config of tsup.config.ts, into a scratch
 * directory) as a child process: --help, a bad usage, an unreachable server, no client
 * installed, the live view on a pty, and NODE_EXTRA_CA_CERTS (read by node at start).
 */
import { type ChildProcessWithoutNullStreams, execFile, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Check } from '../../src/cli/doctor.js';
import type { IdStatus } from '../../src/cli/state.js';
import { createValve } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { cliConfig } from '../../tsup.config.js';
import { type RedisServer, type ServerKind, startRedis } from '../helpers/servers.js';
import { sharedCluster, sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';
import type { LiveWorkerConfig, LiveWorkerState } from './live-worker.js';
import { type Ran, valve } from './run-cli.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
let buildDir: string;
let cli: string;

beforeAll(async () => {
  // Inside the package, so the built file resolves the clients from node_modules as it will
  // in a user's project.
  buildDir = mkdtempSync(join(root, '.cli-build-'));
  const { build } = await import('tsup');
  await Promise.all([
    build({ ...cliConfig, outDir: buildDir, silent: true, config: false }),
    // The live valve's worker too, bundled with the library's source (the packages left to
    // node_modules): plain node starts it faster than tsx, four at once.
    build({
      entry: { 'live-worker': 'test/cli/live-worker.ts' },
      format: ['esm'],
      outDir: buildDir,
      silent: true,
      config: false,
      skipNodeModulesBundle: true,
      target: 'node20',
      dts: false,
      sourcemap: false,
      clean: false,
      splitting: false,
    }),
  ]);
  cli = join(buildDir, 'cli.js');
}, 120_000);

afterAll(() => {
  if (buildDir) rmSync(buildDir, { recursive: true, force: true });
});

/** Runs the built file with `args` in a child process; VALVE_REDIS_URL only when given in `env`. */
function spawnValve(args: string[], env: Record<string, string> = {}, file = cli): Promise<Ran> {
  const base = { ...process.env };
  delete base.VALVE_REDIS_URL;
  return new Promise((done) => {
    execFile(
      process.execPath,
      [file, ...args],
      { env: { ...base, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        done({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

/** One line on stderr, no stack trace. */
function expectOneLine(r: Ran, pattern: RegExp): void {
  const lines = r.stderr.trimEnd().split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^valve: /);
  expect(lines[0]).toMatch(pattern);
  expect(r.stderr).not.toMatch(/\n\s+at /);
}

const json = <T>(r: Ran): T => {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
};

const seedsOf = (kind: ServerKind) => sharedCluster(kind).nodes.map((n) => `redis://${n.host}:${n.port}`);

// Independent checks (the unreachable server's process takes 2 s to end): at once.
describe.concurrent('usage and one-line failures', () => {
  it('--help prints the usage and exits 0; bad usage exits 2 with one line', async () => {
    // The built file, as a process: its exit code and streams (and the in-process main's).
    const [help, inProcess, badUsage] = await Promise.all([
      spawnValve(['--help']),
      valve(['--help']),
      spawnValve(['frobnicate']),
    ]);
    expect(inProcess).toEqual(help);
    expect(badUsage.code).toBe(2);
    expect(badUsage.stdout).toBe('');
    expectOneLine(badUsage, /unknown command "frobnicate"/);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: valve <command>/);
    for (const word of [
      'status <id>',
      'pause <id> <duration>',
      'resume <id>',
      'watch <id>',
      'doctor',
      '--redis',
      '--prefix',
      '--json',
      '--cluster',
    ]) {
      expect(help.stdout).toContain(word);
    }
    const url = sharedRedis().url;
    const cases: [string[], RegExp][] = [
      [[], /missing command/],
      [['frobnicate'], /unknown command "frobnicate"/],
      [['status', '--bogus'], /Unknown option '--bogus'/],
      [['status'], /missing <id>: valve status <id>/],
      [['status', 'a', 'b', '--redis', url], /too many arguments/],
      [['pause', 'a', 'soon', '--redis', url], /<duration>: expected a duration/],
      [['pause', 'a', '400d', '--redis', url], /<duration>: expected at most 365 days, got "400d"/],
      [['status', 'a', '--timeout', '30d', '--redis', url], /--timeout: expected at most 24 days/],
      [['status', 'a{b}', '--redis', url], /no '\{' or '\}'/],
      [['status', 'a', '--redis', 'http://x'], /expected a redis:\/\/ or rediss:\/\/ URL/],
      [['status', 'a', '--prefix', 'a b', '--redis', url], /--prefix/],
      [['status', 'a'], /no server: pass --redis <url> or set VALVE_REDIS_URL/],
      [['status', 'a', '--client', 'nope', '--redis', url], /--client/],
    ];
    const results = await Promise.all(cases.map(([args]) => valve(args)));
    cases.forEach(([args, pattern], i) => {
      const r = results[i]!;
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stdout).toBe('');
      expectOneLine(r, pattern);
    });
  });

  it('an unreachable server exits 1 with one line; an unknown id exits 3', async () => {
    const [refused, unknown, fromEnv] = await Promise.all([
      // As a process: the failed connection leaves nothing that keeps it from exiting 1.
      spawnValve(['status', 'x', '--redis', 'redis://127.0.0.1:1', '--timeout', '3s']),
      valve(['status', 'nobody', '--prefix', uniquePrefix('cli'), '--redis', sharedRedis().url]),
      valve(['watch', 'nobody', '--count', '1'], { VALVE_REDIS_URL: sharedRedis().url }),
    ]);
    expect(refused.code).toBe(1);
    expectOneLine(refused, /cannot use 127\.0\.0\.1:1: .*ECONNREFUSED/);
    expect(unknown.code).toBe(3);
    expectOneLine(unknown, /unknown id "nobody"/);
    expect(fromEnv.code).toBe(3);
    expectOneLine(fromEnv, /unknown id "nobody"/);
    // --json: the object still, `unknown: true`, and exit code 3 with the one line.
    const asJson = await valve([
      'status',
      'nobody',
      '--json',
      '--prefix',
      uniquePrefix('cli'),
      '--redis',
      sharedRedis().url,
    ]);
    expect(asJson.code).toBe(3);
    expect(JSON.parse(asJson.stdout)).toMatchObject({ id: 'nobody', unknown: true, problems: [] });
    expectOneLine(asJson, /unknown id "nobody"/);
  });

  it('status reports keys that hold what valve never writes, and does not take them for an unknown id', async () => {
    const prefix = uniquePrefix('cli');
    const client = new Redis(sharedRedis().url);
    try {
      await client.hset(`${prefix}:{c1}:pause`, 'a', '1');
      await client.set(`${prefix}:{c1}:leases`, 'x');
      await client.set(`${prefix}:{c2}:pause`, '9'.repeat(25));
      await client.set(`${prefix}:{c2}:fence`, 'abc');
      const [c1, c2, c2json] = await Promise.all([
        valve(['status', 'c1', '--prefix', prefix, '--redis', sharedRedis().url]),
        valve(['status', 'c2', '--prefix', prefix, '--redis', sharedRedis().url]),
        valve(['status', 'c2', '--json', '--prefix', prefix, '--redis', sharedRedis().url]),
      ]);
      expect(c1.code, c1.stderr).toBe(0);
      expect(c1.stdout).toMatch(/problem {3}\S+:\{c1\}:pause holds a value of another type/);
      expect(c1.stdout).toMatch(
        /problem {3}\S+:\{c1\}:leases holds a value of another type, not a sorted set/,
      );
      expect(c2.code, c2.stderr).toBe(0);
      expect(c2.stdout).toMatch(/problem {3}\S+:\{c2\}:pause holds "9{25}", not a pause end/);
      expect(c2.stdout).toMatch(/problem {3}\S+:\{c2\}:fence holds "abc"/);
      expect(c2.stdout).toMatch(/pause {5}none/);
      expect(json<{ problems: string[]; pause: null; unknown: boolean }>(c2json)).toMatchObject({
        pause: null,
        unknown: false,
        problems: [expect.stringMatching(/:pause holds/), expect.stringMatching(/:fence holds/)],
      });
    } finally {
      client.disconnect();
    }
  });

  it('names the packages to install when no Redis client is installed', async () => {
    const alone = mkdtempSync(join(tmpdir(), 'valve-cli-alone-'));
    try {
      copyFileSync(cli, join(alone, 'cli.js'));
      const r = await spawnValve(['status', 'x', '--redis', sharedRedis().url], {}, join(alone, 'cli.js'));
      expect(r.code).toBe(1);
      expectOneLine(r, /no Redis client installed: install one of ioredis, iovalkey or redis/);
    } finally {
      rmSync(alone, { recursive: true, force: true });
    }
  });
});

/** A live valve in a worker process; its JSON lines as they come. */
class LiveWorker {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly lines: Record<string, unknown>[] = [];
  private waiters: (() => void)[] = [];
  private err = '';
  constructor(config: LiveWorkerConfig) {
    this.child = spawn(process.execPath, [join(buildDir, 'live-worker.js')], {
      cwd: root,
      env: { ...process.env, VALVE_CLI_WORKER: JSON.stringify(config) },
    });
    let buffer = '';
    this.child.stdout.on('data', (d) => {
      buffer += d;
      let i = buffer.indexOf('\n');
      while (i >= 0) {
        const text = buffer.slice(0, i);
        if (text.startsWith('{')) this.lines.push(JSON.parse(text));
        else this.err += `${text}\n`;
        buffer = buffer.slice(i + 1);
        i = buffer.indexOf('\n');
      }
      for (const w of this.waiters.splice(0)) w();
    });
    this.child.stderr.on('data', (d) => {
      this.err += d;
    });
    this.child.on('exit', () => {
      for (const w of this.waiters.splice(0)) w();
    });
  }
  /** The first line matching `pred` (waits for it; fails when the worker exits first). */
  async line(pred: (l: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
    for (;;) {
      const found = this.lines.find(pred);
      if (found) return found;
      if (this.child.exitCode !== null)
        throw new Error(`worker exited ${this.child.exitCode}: ${this.err.slice(-2000)}`);
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }
  /** Queues one job (cost 1) in the worker's valve. */
  job(): void {
    this.child.stdin.write('job\n');
  }
  async done(): Promise<void> {
    this.child.stdin.end('done\n');
    await this.line((l) => l.done === true);
  }
  kill(): void {
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

const RULES = [
  { limit: 10, interval: '1h', burst: 10 },
  { limit: 100, interval: '1h', algorithm: 'fixed-window' as const },
  { limit: 50, interval: '1h', algorithm: 'sliding-window' as const },
];
const HOUR = 3_600_000;

interface LiveCase {
  name: string;
  kind: ServerKind;
  cluster: boolean;
  family: 'ioredis' | 'iovalkey';
  /** Connection arguments of the command. */
  args: () => string[];
}

const liveCases: LiveCase[] = [
  {
    name: 'Redis standalone',
    kind: 'redis',
    cluster: false,
    family: 'ioredis',
    args: () => ['--redis', sharedRedis().url],
  },
  // One seed: the command detects the cluster (INFO cluster).
  {
    name: 'Redis Cluster',
    kind: 'redis',
    cluster: true,
    family: 'ioredis',
    args: () => ['--redis', seedsOf('redis')[1]!],
  },
  {
    name: 'Valkey standalone (iovalkey)',
    kind: 'valkey',
    cluster: false,
    family: 'iovalkey',
    args: () => ['--redis', sharedRedis('valkey').url, '--client', 'iovalkey'],
  },
  {
    name: 'Valkey cluster (seeds, --cluster)',
    kind: 'valkey',
    cluster: true,
    family: 'ioredis',
    args: () => [...seedsOf('valkey').flatMap((u) => ['--redis', u]), '--cluster'],
  },
];

// The four cases at once (each its own prefix and worker): most of the time goes to starting
// the workers.
describe('status, pause and resume against a live valve', () => {
  const workers: LiveWorker[] = [];
  afterAll(() => {
    for (const w of workers) w.kill();
  });

  it.concurrent.each(liveCases)(
    '$name: status --json shows what the valve just did; the command pauses and resumes it',
    async (c) => {
      const prefix = uniquePrefix('cli');
      const id = `live:${c.kind}`;
      const shared = sharedRedis(c.kind);
      const worker = new LiveWorker({
        target: { host: shared.host, port: shared.port },
        cluster: c.cluster ? sharedCluster(c.kind).nodes : undefined,
        family: c.family,
        prefix,
        id,
        rules: RULES,
        costs: [1, 1, 1, 2],
        held: 2,
        pauseMs: 60_000,
      });
      workers.push(worker);
      const { state } = (await worker.line((l) => 'state' in l)) as { state: LiveWorkerState };
      const args = [...c.args(), '--prefix', prefix];

      const s = json<IdStatus>(await valve(['status', id, '--json', ...args]));
      expect(s.id).toBe(id);
      expect(s.unknown).toBe(false);
      expect(s.recorded?.digests).toEqual(['g10.3600000000.10', 's50.3600000000', 'w100.3600000000']);
      expect(s.mismatch).toEqual({ checked: true, digests: [] });
      const rule = (d: string) => s.rules.find((r) => r.digest === d)!;
      // 7 units spent: 1 + 1 + 1 + 2, and the two held jobs.
      const gcra = rule('g10.3600000000.10');
      expect(gcra).toMatchObject({ capacity: 10, left: 3, recorded: true });
      // One unit comes back every 360 s, counted from the first start (a few seconds ago).
      expect(gcra.nextUnitIn).toBeGreaterThan(360_000 - 60_000);
      expect(gcra.nextUnitIn).toBeLessThanOrEqual(360_000);
      const sliding = rule('s50.3600000000');
      expect(sliding).toMatchObject({ capacity: 50, left: 43 });
      expect(sliding.nextUnitIn).toBeGreaterThan(HOUR - 60_000);
      expect(sliding.allBackIn).toBeGreaterThanOrEqual(sliding.nextUnitIn!);
      const fixed = rule('w100.3600000000');
      // All 7 units fell in the hour window that holds the status reading, unless it began since.
      if (fixed.windowStart! <= state.firstStart - 1000) expect(fixed.left).toBe(93);
      else expect(fixed.left).toBeGreaterThanOrEqual(93);
      expect(fixed.nextUnitIn).toBeCloseTo(fixed.windowStart! + HOUR - s.now, 0);

      // stats().pausedUntil is the store's answer moved onto the worker's clock (within a round trip).
      expect(Math.abs(s.pause!.until - state.pausedUntil)).toBeLessThan(100);
      expect(s.pause!.in).toBeGreaterThan(0);
      expect(s.pause!.by).toBe('manual'); // valve.pause()'s event source, recorded with the pause
      expect(s.leases.map((l) => [l.token, l.fence]).sort()).toEqual(
        state.leases.map((l) => [l.token, l.fence]).sort(),
      );
      expect(s.fence).toBe(Math.max(...state.leases.map((l) => l.fence)));
      for (const l of s.leases) expect(l.ttl).toBeGreaterThan(30_000);

      // The text form says the same.
      const text = await valve(['status', id, ...args]);
      expect(text.code).toBe(0);
      expect(text.stdout).toMatch(/10 per 3600000ms \(gcra, burst 10\) +3 of 10 left, next unit in/);
      expect(text.stdout).toMatch(/50 per 3600000ms \(sliding-window\) +43 of 50 left/);
      expect(text.stdout).toMatch(/pause +PAUSED until .* left\) by manual; every valve with this id waits/);
      expect(text.stdout).toContain(`leases    2 held (last fence ${s.fence})`);

      // resume: the valve in the other process hears it, as after valve.resume().
      const resumed = json<{ resumed: boolean; wasPaused: boolean }>(
        await valve(['resume', id, '--json', ...args]),
      );
      expect(resumed).toMatchObject({ resumed: true, wasPaused: true });
      await worker.line((l) => l.event === 'resume');
      expect(json<IdStatus>(await valve(['status', id, '--json', ...args])).pause).toBeNull();

      // pause: extend-only, the same until in the valve's 'pause' event. A wake-up is only a cue
      // to ask the store (docs/redis.md): the worker's valve, idle but for its held jobs, learns
      // the pause from the store's answer to its next job.
      const paused = json<{ until: number; in: number; extended: boolean }>(
        await valve(['pause', id, '30s', '--json', ...args]),
      );
      expect(paused.extended).toBe(true);
      expect(paused.in).toBeGreaterThan(25_000);
      expect(paused.in).toBeLessThanOrEqual(30_000);
      worker.job();
      const heard = await worker.line((l) => l.event === 'pause');
      expect(Math.abs((heard.until as number) - paused.until)).toBeLessThan(1);
      expect(json<IdStatus>(await valve(['status', id, '--json', ...args])).pause!.by).toMatch(
        /^valve pause by .+@.+$/,
      );
      const shorter = json<{ until: number; extended: boolean }>(
        await valve(['pause', id, '1s', '--json', ...args]),
      );
      expect(shorter).toMatchObject({ extended: false, until: paused.until });
      await valve(['resume', id, ...args]);

      await worker.done();
      // Released leases are gone.
      expect(json<IdStatus>(await valve(['status', id, '--json', ...args])).leases).toEqual([]);
    },
    90_000,
  );
});

/** The number of lines of the first frame the live view drew (each ends with erase-line, newline). */
function watchLinesCount(tty: string): number {
  const first = tty.slice(0, tty.indexOf('\u001b[J'));
  return first.split('\u001b[K').length - 1;
}

describe('rule mismatches and watch', () => {
  it('status shows live state of rules that are not recorded, marked, with --json digests', async () => {
    const prefix = uniquePrefix('cli');
    const client = new Redis(sharedRedis().url);
    try {
      const store = redisStore({ client, prefix });
      const a = createValve({
        id: 'shared',
        rules: { limit: 5, interval: '1h', algorithm: 'sliding-window' },
        store,
      });
      const b = createValve({
        id: 'shared',
        rules: { limit: 7, interval: '1h', algorithm: 'sliding-window' },
        store,
      });
      await a.run(() => {});
      await b.run(() => {});
      await b.run(() => {});
      await a.close();
      await b.close();
      const args = ['--redis', sharedRedis().url, '--prefix', prefix];
      const s = json<IdStatus>(await valve(['status', 'shared', '--json', ...args]));
      // b called last: its rules are recorded, a's have live state.
      expect(s.recorded?.digests).toEqual(['s7.3600000000']);
      expect(s.mismatch).toEqual({ checked: true, digests: ['s5.3600000000'] });
      const other = s.rules.find((r) => r.digest === 's5.3600000000')!;
      expect(other).toMatchObject({ recorded: false, left: 4 });
      const text = await valve(['status', 'shared', ...args]);
      expect(text.stdout).toMatch(/! 5 per 3600000ms \(sliding-window\) +4 of 5 left/);
      expect(text.stdout).toMatch(/mismatch {2}1 rule\(s\) marked ! have live state but are not recorded/);

      // Both watches at once (each takes a second): on a terminal, and not on one.
      // On a terminal (a pty from util-linux `script`): the built file in a process.
      const command = [process.execPath, cli, 'watch', 'shared', '--count', '2', ...args].join(' ');
      const [w, tty] = await Promise.all([
        valve(['watch', 'shared', '--count', '2', ...args]),
        new Promise<string>((done, fail) => {
          execFile('script', ['-qec', command, '/dev/null'], { timeout: 60_000 }, (err, stdout) =>
            err ? fail(err) : done(String(stdout)),
          );
        }),
      ]);

      // watch, not on a terminal: one plain line per reading.
      expect(w.code, w.stderr).toBe(0);
      const lines = w.stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(2);
      for (const line of lines) {
        expect(line).toMatch(/^\[\d{4}-\d\d-\d\dT[\d:.]+Z\] shared: /);
        expect(line).toMatch(/7 per 3600000ms \(sliding-window\): 2\/7 in use, [0-9.]+ starts\/s/);
        expect(line).toContain('not paused; no leases held');
      }
      // The second reading comes a second after the first, so more than a second after the last
      // start: the sliding window's log shows none in the last second.
      expect(lines[1]).toContain('2/7 in use, 0.0 starts/s');

      // On a terminal: the cursor hidden, the view redrawn in place (cursor up over the previous
      // frame), the cursor shown again at the end.
      expect(tty.startsWith('\u001b[?25l')).toBe(true);
      const frame = watchLinesCount(tty);
      expect(tty).toContain(`\u001b[${frame}F`);
      expect(tty.trimEnd().endsWith('\u001b[?25h')).toBe(true);
      expect(tty).toMatch(/! 5 per 3600000ms \(sliding-window\) +█+░+ +1\/5 in use/);
    } finally {
      client.disconnect();
    }
  });
});

describe('doctor', () => {
  it.concurrent.each([
    { name: 'Redis standalone', kind: 'redis' as const, cluster: false, client: 'ioredis' },
    { name: 'Redis standalone (node-redis)', kind: 'redis' as const, cluster: false, client: 'redis' },
    { name: 'Redis Cluster', kind: 'redis' as const, cluster: true, client: 'ioredis' },
    { name: 'Redis Cluster (node-redis)', kind: 'redis' as const, cluster: true, client: 'redis' },
    { name: 'Valkey standalone', kind: 'valkey' as const, cluster: false, client: 'iovalkey' },
    { name: 'Valkey cluster', kind: 'valkey' as const, cluster: true, client: 'ioredis' },
  ])(
    '$name: passes every check, exit 0',
    async ({ kind, cluster, client }) => {
      const urls = cluster ? seedsOf(kind) : [sharedRedis(kind).url];
      const args = [
        ...urls.flatMap((u) => ['--redis', u]),
        '--client',
        client,
        '--prefix',
        uniquePrefix('doc'),
      ];
      const r = await valve(['doctor', '--json', ...args]);
      const report = json<{ ok: boolean; checks: Check[] }>(r);
      expect(report.ok).toBe(true);
      const by = Object.fromEntries(report.checks.map((c) => [c.name, c]));
      expect(by.server!.detail).toMatch(
        new RegExp(
          `^${kind === 'redis' ? 'Redis' : 'Valkey'} \\d+\\.\\d+\\.\\d+, ${cluster ? 'cluster of 3 masters' : 'standalone'}$`,
        ),
      );
      expect(by.client!.detail).toBe(`${client}, no TLS`);
      expect(by.acl).toMatchObject({ level: 'ok' });
      expect(by.acl!.detail).toMatch(/^ACL DRYRUN: user default may run every command/);
      expect(by.scripts).toMatchObject({ level: 'ok' });
      expect(by.latency!.detail).toMatch(/^round trip [\d.]+ ms/);
      expect(by.clock!.detail).toMatch(/server TIME minus this machine's clock: /);
      expect(by.clock!.detail.split(',')).toHaveLength(cluster ? 3 : 1);
      expect(by['wake-ups']).toMatchObject({ level: 'ok' });
      // Nothing of the scratch ids is left behind.
      const text = await valve(['doctor', ...args]);
      expect(text.code).toBe(0);
      expect(text.stdout.trimEnd().split('\n').pop()).toBe('the store would work here');
    },
    60_000,
  );
});

/** The command's ACL rule from docs/operating.md, for `prefix`. */
function docsRule(prefix: string): string[] {
  const docs = readFileSync(join(root, 'docs/operating.md'), 'utf8');
  const line = /^ACL SETUSER valve-ops on >change-me (.+)$/m.exec(docs)?.[1];
  expect(line, 'docs/operating.md has the ACL SETUSER line').toBeDefined();
  return line!.split(' ').map((r) => r.replace('valve:{*', `${prefix}:{*`));
}

describe('docs/operating.md', () => {
  it("the command's ACL rule is the store's rule of docs/redis.md plus +scan +evalsha_ro", () => {
    const store = /^ACL SETUSER valve on >change-me (.+)$/m.exec(
      readFileSync(join(root, 'docs/redis.md'), 'utf8'),
    )?.[1];
    expect(docsRule('valve')).toEqual([...store!.split(' '), '+scan', '+evalsha_ro']);
  });

  it('every `npx valve` line of its shell blocks runs as documented (server from VALVE_REDIS_URL)', async () => {
    const text = readFileSync(join(root, 'docs/operating.md'), 'utf8');
    const commands = [...text.matchAll(/```sh\n([\s\S]*?)```/g)].flatMap((m) =>
      m[1]!.split('\n').filter((l) => l.startsWith('npx valve ')),
    );
    expect(commands.length).toBeGreaterThanOrEqual(6);
    const prefix = uniquePrefix('docs');
    for (const command of commands) {
      // The documented servers do not exist here: --redis <url> gives way to VALVE_REDIS_URL.
      const args = command
        .slice('npx valve '.length)
        .replace(/--redis \S+/, '')
        .split(/\s+/)
        .filter(Boolean);
      const r = await valve([...args, '--prefix', prefix], { VALVE_REDIS_URL: sharedRedis().url });
      // 3: status of an id this prefix has not seen yet.
      expect([0, 3], `${command}: ${r.stderr}`).toContain(r.code);
    }
  });
});

// Its tests use their own users and ids: they run at once.
describe.concurrent('as a least-privilege ACL user (the rule of docs/operating.md)', () => {
  let server: RedisServer;
  const prefix = 'ops';
  beforeAll(async () => {
    const rule = docsRule(prefix);
    server = await startRedis({
      aclUser: [
        { name: 'ops', password: 'pw', rules: rule },
        { name: 'nolset', password: 'pw', rules: rule.filter((r) => r !== '+lset') },
        { name: 'noscan', password: 'pw', rules: rule.filter((r) => r !== '+scan') },
        {
          name: 'noeval',
          password: 'pw',
          rules: rule.filter((r) => r !== '+evalsha' && r !== '+eval' && r !== '+evalsha_ro'),
        },
        // May check itself with ACL DRYRUN, but lacks a command the scripts run.
        {
          name: 'auditor',
          password: 'pw',
          rules: [...rule.filter((r) => r !== '+lset'), '+acl|whoami', '+acl|dryrun'],
        },
      ],
    });
  });
  afterAll(() => server?.stop());
  const url = (user: string) => `redis://${user}:pw@${server.host}:${server.port}`;

  it('every command works; doctor runs the scripts instead of ACL DRYRUN', async () => {
    const args = ['--redis', url('ops'), '--prefix', prefix];
    const report = json<{ ok: boolean; checks: Check[] }>(await valve(['doctor', '--json', ...args]));
    expect(report.ok).toBe(true);
    const acl = report.checks.find((c) => c.name === 'acl')!;
    expect(acl.detail).toMatch(
      /^ACL WHOAMI or DRYRUN not permitted .*: checked by running the scripts below$/,
    );

    const client = new Redis({ host: server.host, port: server.port, username: 'ops', password: 'pw' });
    try {
      const v = createValve({
        id: 'acl',
        rules: { limit: 3, interval: '1h', algorithm: 'sliding-window' },
        store: redisStore({ client, prefix }),
      });
      await v.run(() => {});
      await v.close();
    } finally {
      client.disconnect();
    }
    const s = json<IdStatus>(await valve(['status', 'acl', '--json', ...args]));
    expect(s.rules.map((r) => [r.digest, r.left])).toEqual([['s3.3600000000', 2]]);
    expect(s.mismatch.checked).toBe(true);
    expect((await valve(['pause', 'acl', '1m', ...args])).code).toBe(0);
    expect(json<IdStatus>(await valve(['status', 'acl', '--json', ...args])).pause).not.toBeNull();
    expect((await valve(['resume', 'acl', ...args])).code).toBe(0);
    expect((await valve(['watch', 'acl', '--count', '1', ...args])).code).toBe(0);
  });

  it('doctor fails (exit 1) when a command the scripts need is missing, naming the failing script', async () => {
    const r = await valve(['doctor', '--redis', url('nolset'), '--prefix', prefix]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      /^fail +scripts +acquire failed on ops:\{valve-doctor:[0-9a-f]+\}: .*can't run this command/im,
    );
    expect(r.stdout.trimEnd().split('\n').pop()).toBe(
      'the store would NOT work here: see the lines marked fail',
    );
  });

  it('doctor names the missing command when the user may run ACL DRYRUN', async () => {
    const r = await valve(['doctor', '--json', '--redis', url('auditor'), '--prefix', prefix]);
    expect(r.code).toBe(1);
    const report = JSON.parse(r.stdout) as { ok: boolean; checks: Check[] };
    expect(report.ok).toBe(false);
    const acl = report.checks.find((c) => c.name === 'acl')!;
    expect(acl.level).toBe('fail');
    expect(acl.detail).toMatch(/^ACL DRYRUN: user auditor may not run LSET \(.*\)$/);
  });

  it('without +scan, status still answers and says mismatches were not checked', async () => {
    const args = ['--redis', url('noscan'), '--prefix', prefix];
    await valve(['pause', 'noscan', '1m', ...args]);
    const s = json<IdStatus>(await valve(['status', 'noscan', '--json', ...args]));
    expect(s.pause).not.toBeNull();
    expect(s.mismatch.checked).toBe(false);
    expect(s.mismatch.note).toMatch(/^not checked: SCAN failed \(NOPERM/);
  });

  it('a refused command is one line, exit 1', async () => {
    const r = await valve(['status', 'x', '--redis', url('noeval'), '--prefix', prefix]);
    expect(r.code).toBe(1);
    expectOneLine(r, /the server refused a command \(ACL\): NOPERM .*'eval/);
  });

  it('a wrong password is one line, exit 1', async () => {
    const r = await valve(['status', 'x', '--redis', `redis://ops:wrong@${server.host}:${server.port}`]);
    expect(r.code).toBe(1);
    expectOneLine(r, /authentication failed: WRONGPASS/);
  });
});

describe('TLS (rediss://)', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis({ tls: true });
  });
  afterAll(() => server?.stop());

  it('works with --tls-ca or NODE_EXTRA_CA_CERTS; an untrusted certificate is one line, exit 1', async () => {
    expect(server.url).toMatch(/^rediss:/);
    const report = json<{ ok: boolean; checks: Check[] }>(
      await valve(['doctor', '--json', '--redis', server.url, '--tls-ca', server.tls!.caFile]),
    );
    expect(report.ok).toBe(true);
    expect(report.checks.find((c) => c.name === 'client')!.detail).toBe('ioredis, TLS (rediss://)');
    // node reads NODE_EXTRA_CA_CERTS when it starts: the built file in a process.
    const viaEnv = await spawnValve(['pause', 'tls', '10s', '--redis', server.url], {
      NODE_EXTRA_CA_CERTS: server.tls!.caFile,
    });
    expect(viaEnv.code, viaEnv.stderr).toBe(0);
    const node = await valve([
      'status',
      'tls',
      '--client',
      'redis',
      '--redis',
      server.url,
      '--tls-ca',
      server.tls!.caFile,
    ]);
    expect(node.code, node.stderr).toBe(0);
    expect(node.stdout).toMatch(/pause +PAUSED/);
    const untrusted = await valve(['status', 'tls', '--redis', server.url]);
    expect(untrusted.code).toBe(1);
    expectOneLine(untrusted, /certificate/i);
  });
});
