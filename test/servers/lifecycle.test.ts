import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { RespError } from '../helpers/resp.js';
import { type RedisServer, startRedis } from '../helpers/servers.js';
import { REPO_ROOT } from '../helpers/valkey.js';

const kinds = ['redis', 'valkey'] as const;

/** Alive and not a zombie (an orphaned zombie waits for init to reap it). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

async function until(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((res) => setTimeout(res, 25));
  }
  return check();
}

/** Runs a child Node process that starts a server, prints its pid, then ends as `how` says. */
async function orphanTest(how: 'SIGKILL' | 'exit'): Promise<{ pid: number; dir: string; tls: string }> {
  const helper = path.join(REPO_ROOT, 'test', 'helpers', 'servers.ts');
  const code = `
    const { startRedis } = await import(${JSON.stringify(helper)});
    const s = await startRedis({ tls: true });
    console.log('pid=' + s.pid + ' dir=' + s.dir + ' tls=' + s.tls.caFile);
    ${how === 'exit' ? 'process.exit(0);' : 'setInterval(() => {}, 1000);'}
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const found = await new Promise<{ pid: number; dir: string; tls: string }>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /pid=(\d+) dir=(\S+) tls=(\S+)/.exec(out);
      if (m) resolve({ pid: Number(m[1]), dir: m[2]!, tls: path.dirname(m[3]!) });
    });
    child.once('exit', () => setTimeout(() => reject(new Error(`child exited early: ${out}`)), 50));
  });
  if (how === 'SIGKILL') {
    expect(existsSync(found.dir) && existsSync(found.tls)).toBe(true);
    child.kill('SIGKILL');
  }
  return found;
}

describe('servers die with the test process', () => {
  it('when it is SIGKILLed (watchdog)', async () => {
    const { pid, dir, tls } = await orphanTest('SIGKILL');
    expect(await until(() => !running(pid), 5_000)).toBe(true);
    expect(await until(() => !existsSync(dir) && !existsSync(tls), 5_000)).toBe(true);
  });

  it('when it exits without stopping them', async () => {
    const { pid, dir, tls } = await orphanTest('exit');
    expect(await until(() => !running(pid), 5_000)).toBe(true);
    expect(await until(() => !existsSync(dir) && !existsSync(tls), 5_000)).toBe(true);
  });
});

describe.each(kinds)('ACL users (%s)', (kind) => {
  let server: RedisServer | undefined;
  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });
  const user = { name: 'valve', password: 's3cret', rules: ['~valve:*', '-@all', '+ping', '+get', '+set'] };

  it('creates a least-privilege user next to the default user', async () => {
    server = await startRedis({ kind, aclUser: user });
    const c = new Redis({
      host: server.host,
      port: server.port,
      username: user.name,
      password: user.password,
      enableReadyCheck: false,
    });
    try {
      expect(await c.set('valve:k', '1')).toBe('OK');
      await expect(c.set('other:k', '1')).rejects.toThrow(/NOPERM/);
      await expect(c.del('valve:k')).rejects.toThrow(/NOPERM/);
    } finally {
      c.disconnect();
    }
    expect(await server.command(['PING'])).toBe('PONG'); // default user untouched
    expect(await server.command(['GET', 'valve:k'], user)).toBe('1');
  });

  it('can turn the default user off', async () => {
    server = await startRedis({ kind, aclUser: user, defaultUserOff: true });
    const anonymous = await import('../helpers/resp.js').then((m) =>
      m.respCommand({ host: server!.host, port: server!.port }, ['PING']),
    );
    expect(anonymous).toBeInstanceOf(RespError);
    expect((anonymous as RespError).message).toMatch(/NOAUTH/);
    expect(await server.command(['PING'])).toBe('PONG'); // the harness authenticates as the first user
  });
});

describe.each(kinds)('TLS (%s)', (kind) => {
  let server: RedisServer | undefined;
  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });

  it('serves TLS only, with a CA the test can trust', async () => {
    server = await startRedis({ kind, tls: true });
    expect(server.url).toBe(`rediss://127.0.0.1:${server.port}`);
    expect(server.tls?.ca).toMatch(/BEGIN CERTIFICATE/);
    const c = new Redis({ host: server.host, port: server.port, tls: { ca: server.tls!.ca } });
    try {
      expect(await c.ping()).toBe('PONG');
    } finally {
      c.disconnect();
    }
    expect(await server.command(['PING'])).toBe('PONG');
    const plain = new Redis({
      host: server.host,
      port: server.port,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
    });
    plain.on('error', () => {});
    try {
      await expect(
        Promise.race([
          plain.connect().then(() => plain.ping()),
          new Promise((_, rej) => setTimeout(() => rej(new Error('no answer in plain text')), 1_000)),
        ]),
      ).rejects.toThrow();
    } finally {
      plain.disconnect();
    }
  });
});
