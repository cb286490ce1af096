import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * Worker side of the ready/go handshake: resolves with the epoch ms of the first line
 * "go <epoch ms>" on stdin (sent by `RunningWorker.go()`, or by a test's own harness), then
 * stops reading stdin so it does not keep the process alive. Print your "ready" first.
 */
export function waitForGo(): Promise<number> {
  return new Promise<number>((resolve) => {
    let buffer = '';
    const onData = (chunk: Buffer | string) => {
      buffer += chunk;
      const m = /^go (\d+)$/m.exec(buffer);
      if (!m) return;
      process.stdin.off('data', onData);
      process.stdin.pause();
      resolve(Number(m[1]));
    };
    process.stdin.on('data', onData);
  });
}

/** A worker process started with a ready/go handshake. */
export interface RunningWorker<Report> {
  /** Resolves when the worker printed "ready" (it has connected and warmed up), or exited. */
  ready: Promise<void>;
  /** Tells the worker to start at `startAt` (epoch ms), so every worker starts together. */
  go(startAt: number): void;
  /** The JSON object the worker printed as its last line; rejects when it failed. */
  report: Promise<Report>;
}

/**
 * Spawns `node --import tsx <file>` with `config` as JSON in the environment variable
 * `envVar`. The worker prints "ready", waits for "go <epoch ms>" on stdin, and ends by
 * printing its report as one JSON line. Killed after `killAfterMs` if it has not exited.
 */
export function spawnWorker<Report>(
  file: string,
  envVar: string,
  config: { name: string },
  killAfterMs: number,
): RunningWorker<Report> {
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: root,
    env: { ...process.env, [envVar]: JSON.stringify(config) },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let markReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => {
    markReady = resolve;
  });
  child.stdout.on('data', (d) => {
    out += d;
    if (out.startsWith('ready\n')) markReady();
  });
  child.stderr.on('data', (d) => {
    err += d;
  });
  const killer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
  const report = new Promise<Report>((resolve, reject) => {
    child.on('exit', (code) => {
      clearTimeout(killer);
      markReady();
      const line = out.trim().split('\n').pop() ?? '';
      if (code !== 0 || !line.startsWith('{')) {
        reject(new Error(`worker ${config.name} exited ${code}: ${err.slice(-2000)} ${out.slice(-500)}`));
        return;
      }
      resolve(JSON.parse(line) as Report);
    });
  });
  return {
    ready,
    go: (startAt) => {
      child.stdin.end(`go ${Math.round(startAt)}\n`);
    },
    report,
  };
}
