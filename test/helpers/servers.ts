/**
 * Real Redis / Valkey servers for tests, started as child processes on free loopback ports
 * and stopped afterwards. See docs/testing.md.
 *
 * - Never touches the machine's own Redis (127.0.0.1:6379): ports come from 20000..32767.
 * - Every server runs in its own temp dir with `--save "" --appendonly no`, in the
 *   foreground (never `--daemonize`), and is killed when the test process exits, even by
 *   SIGKILL: a tiny watchdog shell (one per process) kills what is still registered once
 *   its stdin pipe from this process closes.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { type RespTarget, type RespValue, respCommand } from './resp.js';
import { valkeyBinaries } from './valkey.js';

export type ServerKind = 'redis' | 'valkey';

export interface Address {
  host: string;
  port: number;
}

/** A user created from an ACL file line `user <name> on ><password> <rules...>`. */
export interface AclUser {
  name: string;
  password: string;
  /**
   * ACL rules after `on >password`, e.g. `['~valve:{*', '&valve:{*', '-@all', '+evalsha', '+eval',
   * '+script|load', '+time', '+subscribe', '+ping']`. Default: everything (`~* &* +@all`).
   */
  rules?: string[];
}

export interface TlsFiles {
  /** CA certificate (PEM) that signed the server certificate: pass as `ca` to clients. */
  ca: string;
  caFile: string;
  certFile: string;
  keyFile: string;
}

export interface StartRedisOptions {
  kind?: ServerKind;
  /** Extra server arguments, e.g. `['--maxmemory', '10mb']`. */
  args?: string[];
  /** ACL user(s) to create besides `default` (which stays `nopass`, unless `defaultUserOff`). */
  aclUser?: AclUser | AclUser[];
  /** Turn the `default` user off (connections then must AUTH as one of `aclUser`). */
  defaultUserOff?: boolean;
  /** Serve TLS only (`--port 0 --tls-port P`), with a self-signed CA made by openssl. */
  tls?: boolean;
  /** How long to wait for "Ready to accept connections" (default 15 s). */
  readyTimeoutMs?: number;
  /** Try this port first; if it is taken, a free one is used instead (check `port`). */
  preferredPort?: number;
}

export interface RedisServer extends Address {
  readonly kind: ServerKind;
  /** `redis://127.0.0.1:<port>` (or `rediss://` with TLS). */
  readonly url: string;
  /** pid of the current server process (changes on restart). */
  readonly pid: number;
  /** The server's working dir (deleted by stop()). */
  readonly dir: string;
  readonly tls: TlsFiles | undefined;
  readonly users: readonly AclUser[];
  /** Sends one command over a fresh connection (as `default`, or as `as`). */
  command(args: readonly (string | number)[], as?: AclUser): Promise<RespValue>;
  /** SIGTERM, then SIGKILL after 3 s; removes the dir. Safe to call twice. */
  stop(): Promise<void>;
  /** Stops the process and starts a new one on the same port, dir and arguments (empty data). */
  restart(): Promise<void>;
  /** Sends a signal to the current process (e.g. SIGSTOP / SIGCONT / SIGKILL). */
  kill(signal?: NodeJS.Signals): void;
  /** Resolves when the current process has exited. */
  exited(): Promise<void>;
  /** The last 64 KB of the server's output. */
  log(): string;
}

export interface StartClusterOptions {
  kind?: ServerKind;
  /** Number of masters (default 3, no replicas). */
  masters?: number;
  args?: string[];
  readyTimeoutMs?: number;
}

export interface RedisCluster {
  readonly kind: ServerKind;
  /** Seed addresses for cluster clients (every master). */
  readonly nodes: Address[];
  readonly servers: readonly RedisServer[];
  /** Resolves when CLUSTER INFO says cluster_state:ok and all nodes are known, on every node. */
  waitForOk(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export const HOST = '127.0.0.1';
const PORT_MIN = 20_000;
/** Below Linux's default ephemeral range (32768+), so outgoing connections don't take them. */
const PORT_MAX = 32_767;
const LOG_LIMIT = 64 * 1024;

export const INSTALL_HINT =
  'Install Redis with `apt-get install -y redis-server redis-tools` (Debian/Ubuntu); see docs/testing.md.';

// ---------------------------------------------------------------------------------------
// Binaries

export interface Binaries {
  server: string;
  cli: string;
  env: NodeJS.ProcessEnv;
  kind: ServerKind;
}

export function findOnPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const file = path.join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Finds the server and CLI binaries of a kind, or throws saying how to install them. */
export function binaries(kind: ServerKind): Binaries {
  if (kind === 'valkey') return { ...valkeyBinaries(), kind };
  const server = findOnPath('redis-server');
  const cli = findOnPath('redis-cli');
  if (!server || !cli) {
    throw new Error(`${!server ? 'redis-server' : 'redis-cli'} was not found on PATH. ${INSTALL_HINT}`);
  }
  return { server, cli, env: process.env, kind };
}

// ---------------------------------------------------------------------------------------
// Cleanup: kill every server when this process exits, even when it is killed.

const live = new Set<ChildProcess>();
const liveDirs = new Set<string>();
let watchdog: ChildProcess | undefined;

// Reads "+pid" / "-pid" (kill at the end, or not) and "Ddir" / "ddir" (remove at the end, or
// not) lines; when stdin closes (this process ended, however), SIGKILLs and removes what is left.
const WATCHDOG = `
pids=' '; dirs=' '
while IFS= read -r l; do
  v="\${l#?}"
  case "$l" in
    +*) pids="$pids$v " ;;
    -*) n=' '; for p in $pids; do [ "$p" = "$v" ] || n="$n$p "; done; pids="$n" ;;
    D*) dirs="$dirs$v " ;;
    d*) n=' '; for p in $dirs; do [ "$p" = "$v" ] || n="$n$p "; done; dirs="$n" ;;
  esac
done
for p in $pids; do kill -KILL "$p" 2>/dev/null; done
for d in $dirs; do rm -rf "$d"; done
`;

function tellWatchdog(line: string): void {
  if (!watchdog) {
    watchdog = spawn('sh', ['-c', WATCHDOG], { stdio: ['pipe', 'ignore', 'ignore'] });
    watchdog.on('error', () => {});
    watchdog.stdin?.on('error', () => {});
    watchdog.unref();
    (watchdog.stdin as unknown as { unref?: () => void } | null)?.unref?.();
  }
  watchdog.stdin?.write(`${line}\n`);
}

function track(child: ChildProcess): void {
  if (child.pid === undefined) return;
  const pid = child.pid;
  live.add(child);
  tellWatchdog(`+${pid}`);
  child.once('exit', () => {
    live.delete(child);
    tellWatchdog(`-${pid}`);
  });
}

const SAFE_PATH = /^[\w./-]+$/;

/** A temp dir removed by removeDir(), else when this process ends (even when killed). */
function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  liveDirs.add(dir);
  if (SAFE_PATH.test(dir)) tellWatchdog(`D${dir}`);
  return dir;
}

function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  if (liveDirs.delete(dir) && SAFE_PATH.test(dir)) tellWatchdog(`d${dir}`);
}

process.once('exit', () => {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const dir of liveDirs) rmSync(dir, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------
// Ports

const handedOut = new Set<number>();

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen({ port, host: HOST, exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

/** A port that is free right now (a server may still take it before us: callers retry). */
export async function freePort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = PORT_MIN + Math.floor(Math.random() * (PORT_MAX - PORT_MIN));
    if (handedOut.has(port)) continue;
    if (await canListen(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error('no free loopback port found in 20000..32767');
}

// ---------------------------------------------------------------------------------------
// TLS

let tlsCache: TlsFiles | undefined;

function openssl(args: string[], cwd: string): void {
  const r = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    throw new Error(
      `openssl ${args[0]} failed (${r.error?.message ?? r.stderr}). TLS tests need openssl: apt-get install -y openssl`,
    );
  }
}

/** A CA and a server certificate for localhost/127.0.0.1, made once per process. */
export function tlsFiles(): TlsFiles {
  if (tlsCache) return tlsCache;
  const dir = tempDir('valve-tls-');
  openssl(
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=valve test CA'].concat([
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
    ]),
    dir,
  );
  openssl(
    [
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-subj',
      '/CN=localhost',
      '-keyout',
      'server.key',
      '-out',
      'server.csr',
    ],
    dir,
  );
  writeFileSync(path.join(dir, 'ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  openssl(
    ['x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial'].concat([
      '-days',
      '2',
      '-extfile',
      'ext.cnf',
      '-out',
      'server.crt',
    ]),
    dir,
  );
  const caFile = path.join(dir, 'ca.crt');
  tlsCache = {
    ca: readFileSync(caFile, 'utf8'),
    caFile,
    certFile: path.join(dir, 'server.crt'),
    keyFile: path.join(dir, 'server.key'),
  };
  return tlsCache;
}

// ---------------------------------------------------------------------------------------
// One server process

interface Spawned {
  child: ChildProcess;
  log: () => string;
  exit: Promise<void>;
}

class PortInUse extends Error {}

function spawnServer(
  bin: Binaries,
  args: string[],
  dir: string,
  port: number,
  readyTimeoutMs: number,
): Promise<Spawned> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin.server, args, { cwd: dir, env: bin.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    let ready = false;
    let settled = false;
    const onData = (chunk: Buffer) => {
      log += chunk.toString('utf8');
      if (log.length > LOG_LIMIT) log = log.slice(-LOG_LIMIT);
      if (!ready && /Ready to accept connections/.test(log)) {
        ready = true;
        done();
      }
    };
    const exit = new Promise<void>((res) => child.once('exit', () => res()));
    const done = (err?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) {
        child.kill('SIGKILL');
        reject(err);
      } else {
        resolve({ child, log: () => log, exit });
      }
    };
    const timer = setTimeout(
      () =>
        done(new Error(`${bin.kind} on port ${port} not ready after ${readyTimeoutMs} ms. Output:\n${log}`)),
      readyTimeoutMs,
    );
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('error', (err) =>
      done(new Error(`cannot run ${bin.server}: ${err.message}. ${INSTALL_HINT}`)),
    );
    child.once('exit', (code, signal) => {
      if (/Address already in use|bind: /i.test(log)) done(new PortInUse(`port ${port} in use`));
      else done(new Error(`${bin.kind} exited (${signal ?? code}) before it was ready. Output:\n${log}`));
    });
    track(child);
    child.unref();
    (child.stdout as unknown as { unref?: () => void } | null)?.unref?.();
    (child.stderr as unknown as { unref?: () => void } | null)?.unref?.();
  });
}

function aclLine(user: AclUser): string {
  const rules = user.rules ?? ['~*', '&*', '+@all'];
  return `user ${user.name} on >${user.password} ${rules.join(' ')}`;
}

async function stopProcess(p: Spawned | undefined): Promise<void> {
  if (!p || p.child.exitCode !== null || p.child.signalCode !== null) return;
  p.child.kill('SIGTERM');
  p.child.kill('SIGCONT'); // a SIGSTOPped server handles SIGTERM only once continued
  // A ref'd timer: it also keeps the event loop alive while we wait for the (unref'd) child.
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((res) => {
    timer = setTimeout(() => res('timeout'), 3_000);
  });
  const outcome = await Promise.race([p.exit, timeout]);
  clearTimeout(timer);
  if (outcome === 'timeout') {
    p.child.kill('SIGKILL');
    const keepAlive = setInterval(() => {}, 1_000);
    await p.exit;
    clearInterval(keepAlive);
  }
}

/** Server args common to every harness server. */
function baseArgs(port: number, tls: TlsFiles | undefined): string[] {
  const args = ['--bind', HOST, '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--logfile', ''];
  args.push('--protected-mode', 'no', '--loglevel', 'notice');
  if (tls) {
    args.push('--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.certFile);
    args.push('--tls-key-file', tls.keyFile, '--tls-ca-cert-file', tls.caFile, '--tls-auth-clients', 'no');
  } else {
    args.push('--port', String(port));
  }
  return args;
}

/**
 * Starts a standalone server on a free loopback port. Fails (never skips) when the binary is
 * missing, with a message that says how to install it.
 */
export async function startRedis(opts: StartRedisOptions = {}): Promise<RedisServer> {
  return startNode(opts, () => []);
}

async function startNode(
  opts: StartRedisOptions,
  extraArgs: (dir: string) => Promise<string[]> | string[],
): Promise<RedisServer> {
  const kind = opts.kind ?? 'redis';
  const bin = binaries(kind);
  const tls = opts.tls ? tlsFiles() : undefined;
  const users = opts.aclUser === undefined ? [] : Array.isArray(opts.aclUser) ? opts.aclUser : [opts.aclUser];
  const readyTimeoutMs = opts.readyTimeoutMs ?? 15_000;
  const dir = tempDir(`valve-${kind}-`);
  const configArgs: string[] = [];
  if (users.length > 0 || opts.defaultUserOff) {
    const lines = users.map(aclLine);
    lines.push(opts.defaultUserOff ? 'user default off' : 'user default on nopass ~* &* +@all');
    writeFileSync(path.join(dir, 'users.acl'), `${lines.join('\n')}\n`);
    configArgs.push('--aclfile', path.join(dir, 'users.acl'));
  }

  let port = 0;
  let args: string[] = [];
  let proc: Spawned | undefined;
  for (let attempt = 0; ; attempt++) {
    port = attempt === 0 && opts.preferredPort ? opts.preferredPort : await freePort();
    args = [...baseArgs(port, tls), ...configArgs, ...(await extraArgs(dir)), ...(opts.args ?? [])];
    try {
      proc = await spawnServer(bin, args, dir, port, readyTimeoutMs);
      break;
    } catch (err) {
      if (!(err instanceof PortInUse) || attempt >= 10) {
        removeDir(dir);
        throw err;
      }
    }
  }

  let stopped = false;
  const target = (as?: AclUser): RespTarget => ({
    host: HOST,
    port,
    tls: tls ? { ca: tls.ca } : undefined,
    auth: as
      ? { username: as.name, password: as.password }
      : opts.defaultUserOff && users[0]
        ? { username: users[0].name, password: users[0].password }
        : undefined,
  });
  const server: RedisServer = {
    kind,
    host: HOST,
    port,
    url: `${tls ? 'rediss' : 'redis'}://${HOST}:${port}`,
    get pid() {
      return proc?.child.pid ?? -1;
    },
    dir,
    tls,
    users,
    command: (cmd, as) => respCommand(target(as), cmd),
    async stop() {
      if (stopped) return;
      stopped = true;
      await stopProcess(proc);
      handedOut.delete(port);
      removeDir(dir);
    },
    async restart() {
      if (stopped) throw new Error('restart() after stop()');
      await stopProcess(proc);
      // SO_REUSEADDR lets the server rebind at once; retry briefly if something else raced us.
      for (let attempt = 0; ; attempt++) {
        try {
          proc = await spawnServer(bin, args, dir, port, readyTimeoutMs);
          return;
        } catch (err) {
          if (!(err instanceof PortInUse) || attempt >= 20) throw err;
          await new Promise((res) => setTimeout(res, 100));
        }
      }
    },
    kill(signal = 'SIGKILL') {
      proc?.child.kill(signal);
    },
    exited: () => proc?.exit ?? Promise.resolve(),
    log: () => proc?.log() ?? '',
  };
  return server;
}

// ---------------------------------------------------------------------------------------
// Cluster

function runCli(bin: Binaries, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin.cli, args, { env: bin.env, stdio: ['ignore', 'pipe', 'pipe'] });
    track(child);
    let out = '';
    child.stdout?.on('data', (c: Buffer) => {
      out += c.toString('utf8');
    });
    child.stderr?.on('data', (c: Buffer) => {
      out += c.toString('utf8');
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${bin.cli}: ${err.message}. ${INSTALL_HINT}`));
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else
        reject(new Error(`${path.basename(bin.cli)} ${args.join(' ')} failed (${signal ?? code}):\n${out}`));
    });
  });
}

function clusterInfo(reply: RespValue): Record<string, string> {
  const info: Record<string, string> = {};
  if (typeof reply !== 'string') return info;
  for (const line of reply.split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0) info[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return info;
}

/**
 * Starts `masters` cluster nodes (no replicas), joins them with `redis-cli --cluster create`
 * (`valkey-cli` for valkey) and waits until every node reports cluster_state:ok.
 */
export async function startCluster(opts: StartClusterOptions = {}): Promise<RedisCluster> {
  const kind = opts.kind ?? 'redis';
  const masters = opts.masters ?? 3;
  const bin = binaries(kind);
  const nodeArgs = async (): Promise<string[]> => {
    const busPort = await freePort();
    return [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      'nodes.conf',
      '--cluster-port',
      String(busPort),
      '--cluster-node-timeout',
      '5000',
      '--cluster-require-full-coverage',
      'yes',
    ];
  };
  const settled = await Promise.allSettled(
    Array.from({ length: masters }, () =>
      startNode({ kind, args: opts.args ?? [], readyTimeoutMs: opts.readyTimeoutMs ?? 15_000 }, nodeArgs),
    ),
  );
  const servers = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const stop = async () => {
    await Promise.all(servers.map((s) => s.stop()));
  };
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await stop();
    throw failed.reason;
  }

  const waitForOk = async (timeoutMs = 20_000) => {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    for (;;) {
      const infos = await Promise.all(
        servers.map((s) =>
          s.command(['CLUSTER', 'INFO']).then(clusterInfo, () => ({}) as Record<string, string>),
        ),
      );
      if (infos.every((i) => i.cluster_state === 'ok' && Number(i.cluster_known_nodes) === servers.length)) {
        return;
      }
      last = JSON.stringify(infos.map((i) => [i.cluster_state, i.cluster_known_nodes]));
      if (Date.now() > deadline) throw new Error(`cluster not ok after ${timeoutMs} ms: ${last}`);
      await new Promise((res) => setTimeout(res, 50));
    }
  };

  try {
    await runCli(
      bin,
      ['--cluster', 'create', ...servers.map((s) => `${s.host}:${s.port}`)].concat([
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ]),
      60_000,
    );
    await waitForOk();
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    kind,
    nodes: servers.map((s) => ({ host: s.host, port: s.port })),
    servers,
    waitForOk,
    stop,
  };
}
