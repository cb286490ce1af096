/**
 * A caller's signal that lives as long as the process (a shutdown signal given to every request)
 * keeps nothing per request: wrapFetch() and valve/octokit combine it with each attempt's own
 * signal without AbortSignal.any, whose source signal (Node 20) kept a WeakRef per combined
 * signal for good (about 60 bytes per request through wrapFetch, 85 through Octokit). Measured
 * in a child process run with --expose-gc (test/helpers/long-signal-heap-child.ts).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../helpers/long-signal-heap-child.ts', import.meta.url));

interface Figures {
  perRequest: number;
  count: number;
  listeners: number;
}

function measure(mode: 'fetch' | 'octokit', count: number): Promise<Figures> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', script, mode, String(count)],
      { timeout: 150_000 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${err.message}\n${stderr}`));
        else resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as Figures);
      },
    );
  });
}

describe('a long-lived caller signal', () => {
  it('wrapFetch: 30k requests that all carry it retain < 20 B each after GC; it has 2 abort listeners at most (not one per request)', async () => {
    const result = await measure('fetch', 30_000);
    expect(result.count).toBe(30_000);
    expect(result.perRequest).toBeLessThan(20);
    expect(result.listeners).toBeLessThanOrEqual(2);
  }, 180_000);

  it('valve/octokit: 10k requests that all carry it retain < 20 B each after GC', async () => {
    const result = await measure('octokit', 10_000);
    expect(result.count).toBe(10_000);
    expect(result.perRequest).toBeLessThan(20);
    expect(result.listeners).toBeLessThanOrEqual(2);
  }, 180_000);
});
