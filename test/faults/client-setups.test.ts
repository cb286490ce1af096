/**
 * Every client set-up the docs show (docs/redis.md's, from examples/redis-clients/, and
 * docs/timeouts-and-reconnection.md's, from examples/client-settings.ts), each in a process of
 * its own (test/faults/client-setups-worker.ts), through a Redis outage: the server (every
 * master, on a cluster) is killed, stays down 1.5 s and comes back empty. The process must live
 * on (node-redis ends it at an 'error' nobody listens to), print no "Unhandled error event"
 * (ioredis' complaint for a connection without a listener), and run jobs again. Then, with the
 * server down again, docs/redis.md's shutdown must settle and the process exit by itself
 * (ioredis' quit() rejects while disconnected, and the client would keep reconnecting).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisCluster, type RedisServer, startCluster, startRedis } from '../helpers/servers.js';

const root = resolve(import.meta.dirname, '../..');
const DOWN_MS = 1500;
const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

let server: RedisServer;
let cluster: RedisCluster;
const children: ChildProcess[] = [];

beforeAll(async () => {
  [server, cluster] = await Promise.all([startRedis(), startCluster()]);
}, 60_000);
afterAll(async () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await Promise.all([server?.stop(), cluster?.stop()]);
});

interface Run {
  send(line: string): void;
  /** Resolves once stdout holds a line matching `pattern`; rejects if the process ends first. */
  line(pattern: RegExp, timeoutMs: number): Promise<string>;
  exited(timeoutMs: number): Promise<{ code: number | null; signal: string | null } | 'still running'>;
  output(): string;
}

function startWorker(name: string, target: object): Run {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', 'test/faults/client-setups-worker.ts', name, JSON.stringify(target)],
    { cwd: root, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  children.push(child);
  let stdout = '';
  let stderr = '';
  const exit = new Promise<{ code: number | null; signal: string | null }>((done) =>
    child.on('exit', (code, signal) => done({ code, signal })),
  );
  child.stdout!.on('data', (d) => {
    stdout += d;
  });
  child.stderr!.on('data', (d) => {
    stderr += d;
  });
  const output = () => `--- stdout\n${stdout}\n--- stderr\n${stderr}`;
  return {
    send: (line) => child.stdin!.write(`${line}\n`),
    async line(pattern, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      let ended = false;
      void exit.then(() => {
        ended = true;
      });
      for (;;) {
        const found = stdout.split('\n').find((l) => pattern.test(l));
        if (found !== undefined) return found;
        if (ended) throw new Error(`the process ended before printing ${pattern}\n${output()}`);
        if (Date.now() > deadline) throw new Error(`no ${pattern} within ${timeoutMs} ms\n${output()}`);
        await sleep(25);
      }
    },
    exited: (timeoutMs) => Promise.race([exit, sleep(timeoutMs).then(() => 'still running' as const)]),
    output,
  };
}

/** Kills the servers (SIGKILL) and waits until they are gone. */
async function down(servers: readonly RedisServer[]): Promise<void> {
  for (const s of servers) s.kill('SIGKILL');
  await Promise.all(servers.map((s) => s.exited()));
}

/** Starts them again on their ports (empty data; a cluster node keeps its nodes.conf). */
async function up(servers: readonly RedisServer[]): Promise<void> {
  await Promise.all(servers.map((s) => s.restart()));
  if (servers.length > 1) await cluster.waitForOk();
}

const standalone = () => ({ url: server.url, host: server.host, port: server.port, nodes: [] });
const clustered = () => ({ url: '', host: '', port: 0, nodes: cluster.nodes });

const setups: [name: string, clusterSetup: boolean][] = [
  ['redis.md ioredis', false],
  ['redis.md iovalkey', false],
  ['redis.md node-redis', false],
  ['timeouts ioredis', false],
  ['timeouts node-redis', false],
  ['redis.md ioredis-cluster', true],
  ['redis.md iovalkey-cluster', true],
  ['redis.md node-redis-cluster', true],
  ['timeouts ioredis-cluster', true],
  ['timeouts node-redis-cluster', true],
];

// The set-ups of one topology share its outage: their processes run side by side (a set-up's
// process only talks to the server), so the file waits for two outages, not ten.
const topologies: [topology: string, clusterSetup: boolean][] = [
  ['standalone', false],
  ['cluster', true],
];

describe('the documented client set-ups through a server restart and a shutdown while it is down', () => {
  it.each(topologies)(
    '%s set-ups: each lives through the restart, runs jobs again, and its shutdown ends the process while the server is down',
    async (_topology, clusterSetup) => {
      const servers = clusterSetup ? cluster.servers : [server];
      const names = setups.filter(([, c]) => c === clusterSetup).map(([name]) => name);
      const runs = names.map((name) => startWorker(name, clusterSetup ? clustered() : standalone()));
      let isDown = false;
      try {
        await Promise.all(runs.map((run) => run.line(/^ready$/, 30_000)));
        isDown = true;
        await down(servers);
        await sleep(DOWN_MS);
        await up(servers);
        isDown = false;
        for (const run of runs) run.send('restarted');
        await Promise.all(runs.map((run) => run.line(/^valve-closed$/, 30_000)));
        isDown = true;
        await down(servers);
        for (const run of runs) run.send('close');
        const exits = await Promise.all(runs.map((run) => run.exited(10_000)));
        names.forEach((name, i) => {
          const out = `${name}\n${runs[i]!.output()}`;
          expect(exits[i], out).toEqual({ code: 0, signal: null });
          expect(runs[i]!.output(), out).toMatch(/^closed$/m);
          expect(runs[i]!.output(), out).not.toMatch(
            /Unhandled error event|Emitted 'error' event|Unhandled|uncaught/i,
          );
        });
      } finally {
        if (isDown) await up(servers);
      }
    },
    120_000,
  );
});
