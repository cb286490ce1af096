/**
 * Scenario octokit: valve/octokit beside @octokit/plugin-throttling against the same fake GitHub
 * (test/helpers/fake-github.ts): per token 100 requests per 2 seconds (primary limit, GitHub's
 * 5,000 per hour compressed; a window opens with its first request, as GitHub's), GitHub's
 * secondary limits (100 in flight, 900 points per minute; 403 + retry-after beyond), 20 ms per
 * answer. Every process sends its share of 600 GETs and 6 POSTs (issue comments) at once, with
 * one token; both plugins' handlers retry up to 10 times.
 *
 * Cases: 'local' (one process, memory) and '3 processes' (sharing one Redis: valve with
 * redisStore, plugin-throttling with its Bottleneck clustering on ioredis). Peers:
 * - valve-octokit: `limits.core` set to the fake's primary limit (100 per 2 s, fixed window);
 * - valve-octokit-defaults: GitHub's own numbers (5,000 per hour): only GitHub's answers
 *   (remaining 0, 403s) slow it down;
 * - plugin-throttling: its defaults (it has no limit options).
 * Metrics: requests per second (answered 2xx to the caller, over the run), 403/429s the fake
 * sent, requests rejected to the caller, and on Redis the commands and script calls per request
 * (INFO commandstats deltas, INFO excluded). A peer that fails to run reports its error in notes.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Octokit } from '@octokit/core';
import { Redis } from 'ioredis';
import { throttling } from '../../src/integrations/octokit/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { startFakeGitHub } from '../../test/helpers/fake-github.js';
import { emit, parseScenarioArgs, round } from '../lib/common.js';
import { diffCounters, readCounters, startRedis } from '../lib/redis-server.js';

export const cases = ['local', '3 processes'] as const;
export const peers = ['valve-octokit', 'valve-octokit-defaults', 'plugin-throttling'] as const;

const GETS = 600;
const POSTS = 6;

interface WorkerSetup {
  peer: string;
  githubUrl: string;
  redisPort: number | undefined;
  gets: number;
  posts: number;
  id: string;
  name: string;
}

interface WorkerResult {
  ok: number;
  failed: number;
  errors: string[];
  elapsedMs: number;
}

/** One client of the peer, and how to close what it opened. */
async function makeClient(
  setup: WorkerSetup,
): Promise<{ octokit: InstanceType<typeof Octokit>; close: () => Promise<void> }> {
  const handlers = {
    onRateLimit: (_r: number, _o: unknown, _k: unknown, retryCount: number) => retryCount < 10,
    onSecondaryRateLimit: (_r: number, _o: unknown, _k: unknown, retryCount: number) => retryCount < 10,
  };
  const log = { debug() {}, info() {}, warn() {}, error() {} };
  const client =
    setup.redisPort === undefined ? undefined : new Redis({ port: setup.redisPort, host: '127.0.0.1' });
  if (setup.peer === 'plugin-throttling') {
    // Loaded by a computed name: its type declarations would clash with valve/octokit's in one program.
    const name = '@octokit/plugin-throttling';
    const plugin = (await import(name)) as { throttling: Parameters<typeof Octokit.plugin>[0] };
    const bottleneckName = 'bottleneck';
    const Bottleneck = (await import(bottleneckName)).default as {
      IORedisConnection: new (o: {
        client: Redis;
      }) => { on(e: string, f: (e: unknown) => void): void; disconnect(flush?: boolean): Promise<void> };
    };
    const connection = client === undefined ? undefined : new Bottleneck.IORedisConnection({ client });
    connection?.on('error', (err) => process.stderr.write(`bottleneck: ${String(err)}\n`));
    const octokit = new (Octokit.plugin(plugin.throttling))({
      baseUrl: setup.githubUrl,
      auth: 'bench-token',
      log,
      throttle: {
        ...handlers,
        id: setup.id,
        ...(connection === undefined ? {} : { connection, Bottleneck }),
      },
    } as never);
    return {
      octokit,
      close: async () => {
        await connection?.disconnect(false);
        client?.disconnect();
      },
    };
  }
  const store = client === undefined ? undefined : redisStore({ client });
  const limits =
    setup.peer === 'valve-octokit'
      ? { core: { limit: 100, interval: '2s', algorithm: 'fixed-window' as const } }
      : undefined;
  const octokit = new (Octokit.plugin(throttling))({
    baseUrl: setup.githubUrl,
    auth: 'bench-token',
    log,
    throttle: { ...handlers, id: setup.id, ...(store ? { store } : {}), ...(limits ? { limits } : {}) },
  });
  return { octokit, close: async () => client?.disconnect() };
}

async function work(setup: WorkerSetup, startAt: number): Promise<WorkerResult> {
  const { octokit, close } = await makeClient(setup);
  await new Promise((r) => setTimeout(r, Math.max(0, startAt - Date.now())));
  const t0 = Date.now();
  const calls: Promise<unknown>[] = [];
  for (let i = 0; i < setup.gets; i++)
    calls.push(octokit.request('GET /repos/{owner}/{repo}/issues/{n}', { owner: 'o', repo: 'r', n: i }));
  for (let i = 0; i < setup.posts; i++)
    calls.push(
      octokit.request('POST /repos/{owner}/{repo}/issues/{n}/comments', {
        owner: 'o',
        repo: 'r',
        n: i,
        body: 'hi',
      }),
    );
  const results = await Promise.allSettled(calls);
  const elapsedMs = Date.now() - t0;
  await close();
  const errors = results.flatMap((r) =>
    r.status === 'rejected' ? [String((r.reason as Error)?.message ?? r.reason)] : [],
  );
  return {
    ok: results.length - errors.length,
    failed: errors.length,
    errors: [...new Set(errors)].slice(0, 3),
    elapsedMs,
  };
}

// ---------------------------------------------------------------------------------------------- worker side

if (process.env.VALVE_BENCH_OCTOKIT) {
  const setup = JSON.parse(process.env.VALVE_BENCH_OCTOKIT) as WorkerSetup;
  process.on('message', async (m: { startAt: number }) => {
    try {
      process.send!({ result: await work(setup, m.startAt) });
    } catch (err) {
      process.send!({ error: String(err) });
    }
    process.exit(0);
  });
  process.send!({ ready: true });
} else {
  await main();
}

function spawnWorker(setup: WorkerSetup): {
  child: ChildProcess;
  ready: Promise<void>;
  result: Promise<WorkerResult>;
} {
  const child = fork(fileURLToPath(import.meta.url), [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, VALVE_BENCH_OCTOKIT: JSON.stringify(setup) },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  let ready!: () => void;
  const readyP = new Promise<void>((r) => {
    ready = r;
  });
  const result = new Promise<WorkerResult>((resolve, reject) => {
    child.on('message', (m: { ready?: boolean; result?: WorkerResult; error?: string }) => {
      if (m.ready) ready();
      else if (m.result) resolve(m.result);
      else reject(new Error(m.error));
    });
    child.on('exit', (code) => reject(new Error(`worker exited ${code}`)));
  });
  return { child, ready: readyP, result };
}

async function main(): Promise<void> {
  const args = parseScenarioArgs();
  const caseNames = args.case ? [args.case] : [...cases];
  const peerNames = args.peer ? [args.peer] : [...peers];
  for (const caseName of caseNames) {
    for (const peer of peerNames) {
      const github = await startFakeGitHub({ limit: 100, windowMs: 2000, latencyMs: 20 });
      const processes = caseName === 'local' ? 1 : 3;
      const redis = processes > 1 ? await startRedis() : undefined;
      const admin = redis ? new Redis({ port: redis.port, host: '127.0.0.1' }) : undefined;
      const id = `bench-${Math.random().toString(36).slice(2, 8)}`;
      const setups: WorkerSetup[] = Array.from({ length: processes }, (_, i) => ({
        peer,
        githubUrl: github.url,
        redisPort: redis?.port,
        gets: Math.round(GETS / processes),
        posts: Math.round(POSTS / processes),
        id,
        name: `w${i}`,
      }));
      let results: WorkerResult[] = [];
      let notes: string | undefined;
      const before = admin ? await readCounters(admin) : undefined;
      const t0 = Date.now();
      try {
        if (processes === 1) {
          results = [await work(setups[0]!, Date.now())];
        } else {
          const workers = setups.map(spawnWorker);
          await Promise.all(workers.map((w) => w.ready));
          const startAt = Date.now() + 500;
          for (const w of workers) w.child.send({ startAt });
          results = await Promise.all(
            workers.map((w) =>
              Promise.race([
                w.result,
                new Promise<never>((_, reject) =>
                  setTimeout(() => reject(new Error('timed out after 90 s')), 90_000),
                ),
              ]).finally(() => w.child.kill('SIGKILL')),
            ),
          );
        }
      } catch (err) {
        notes = `failed: ${String(err)}`;
      }
      const elapsedMs = results.length > 0 ? Math.max(...results.map((r) => r.elapsedMs)) : Date.now() - t0;
      const after = admin ? await readCounters(admin) : undefined;
      const delta = before && after ? diffCounters(before, after) : undefined;
      const requests = GETS + POSTS;
      const ok = results.reduce((s, r) => s + r.ok, 0);
      const failed = results.reduce((s, r) => s + r.failed, 0);
      const errors = [...new Set(results.flatMap((r) => r.errors))];
      if (errors.length > 0) notes = `${notes ? `${notes}; ` : ''}errors: ${errors.join(' | ')}`;
      emit({
        scenario: 'octokit',
        case: caseName,
        peer,
        metrics: {
          requestsPerSec: round((ok / elapsedMs) * 1000, 1),
          limitedSeen: github.limited(),
          primarySeen: github.log.filter((e) => e.kind === 'primary').length,
          rejectedToCaller: results.length > 0 ? failed : requests,
          sentToGitHub: github.log.length,
          maxInFlight: github.maxInFlight(),
          commandsPerRequest: delta ? round(delta.commands / requests, 2) : null,
          scriptsPerRequest: delta ? round(delta.scripts / requests, 2) : null,
        },
        ...(notes ? { notes } : {}),
      });
      admin?.disconnect();
      await redis?.stop();
      await github.stop();
    }
  }
}
