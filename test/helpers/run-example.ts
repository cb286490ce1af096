/**
 * Runs a TypeScript file of the repository as its own process (`node --import tsx <file>`),
 * from the repository's root, and collects its exit and output. The file must end by itself:
 * it is killed only after `killAfterMs` (60 s by default: a guard against a hang, never a speed
 * check; a 2.5 s example took over 20 s on a 2-core machine loaded to 11). Tests that use the
 * default give themselves at least 90 s.
 */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

const root = resolve(import.meta.dirname, '../..');

export interface ExampleRun {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

export function runExample(
  file: string,
  env: Record<string, string> = {},
  killAfterMs = 60_000,
): Promise<ExampleRun> {
  return new Promise<ExampleRun>((done, fail) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    const killer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    child.on('error', fail);
    child.on('exit', (code, signal) => {
      clearTimeout(killer);
      done({ code, signal, stdout, stderr });
    });
  });
}
