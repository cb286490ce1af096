/**
 * A private redis-server for one benchmark run: a child process (never --daemonize) on a free
 * loopback port, without persistence, stopped afterwards. Never touches 127.0.0.1:6379.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';

export interface RedisServer {
  readonly port: number;
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port === 6379 || port === 0 ? freePort().then(resolve, reject) : resolve(port)));
    });
  });
}

export async function startRedis(): Promise<RedisServer> {
  const port = await freePort();
  const child: ChildProcess = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--loglevel',
      'warning',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 10_000;
  for (;;) {
    const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      break;
    } catch (err) {
      probe.disconnect();
      if (Date.now() > deadline || child.exitCode !== null) {
        child.kill('SIGKILL');
        throw new Error(`redis-server on port ${port} did not start: ${String(err)}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    port,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Counters read from INFO: total commands (INFO itself excluded), script calls, server CPU seconds. */
export interface RedisCounters {
  readonly commands: number;
  readonly scripts: number;
  readonly cpuSec: number;
  /** Time spent executing commands (commandstats usec; nested script commands counted inside their script). */
  readonly commandUs: number;
  readonly usedMemory: number;
  readonly keys: number;
}

/**
 * Commands that the benchmarked scripts call from inside Lua: their usec is already part of the
 * script's own usec, so they are not added twice. (A command called outside a script, e.g.
 * Bottleneck's direct ones, is then undercounted; the CPU column is the complete figure.)
 */
const scriptInner = new Set([
  'time',
  'get',
  'set',
  'pexpire',
  'zadd',
  'zcard',
  'zrange',
  'zremrangebyscore',
  'lrange',
  'lindex',
  'lset',
  'ltrim',
  'rpush',
  'incrby',
  'pttl',
  'hget',
  'hset',
  'hincrby',
  'hmget',
  'hmset',
  'del',
  'exists',
  'expire',
]);

export async function readCounters(client: Redis): Promise<RedisCounters> {
  const text = await client.info('all');
  let commands = 0;
  let scripts = 0;
  let cpuSec = 0;
  let commandUs = 0;
  let usedMemory = 0;
  for (const line of text.split('\r\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
    if (m) {
      const name = m[1]!;
      const calls = Number(m[2]);
      if (name === 'info') continue;
      commands += calls;
      if (name === 'evalsha' || name === 'eval' || name === 'fcall') commandUs += Number(m[3]);
      else if (!scriptInner.has(name)) commandUs += Number(m[3]);
      if (name === 'evalsha' || name === 'eval' || name === 'fcall' || name.startsWith('evalsha_ro'))
        scripts += calls;
      continue;
    }
    const cpu = /^used_cpu_(sys|user):([\d.]+)/.exec(line);
    if (cpu) cpuSec += Number(cpu[2]);
    const mem = /^used_memory:(\d+)/.exec(line);
    if (mem) usedMemory = Number(mem[1]);
  }
  const keys = await client.dbsize();
  return { commands, scripts, cpuSec, commandUs, usedMemory, keys };
}

/** `readings`: how many readCounters() calls happened before `after` (each adds one DBSIZE). */
export function diffCounters(before: RedisCounters, after: RedisCounters, readings = 1): RedisCounters {
  return {
    commands: after.commands - before.commands - readings,
    scripts: after.scripts - before.scripts,
    cpuSec: after.cpuSec - before.cpuSec,
    commandUs: after.commandUs - before.commandUs,
    usedMemory: after.usedMemory - before.usedMemory,
    keys: after.keys,
  };
}
