/**
 * Runs `npm run demo` (examples/demo/demo.ts) as a child process with small numbers and
 * checks what a user would: it exits 0, its summary reports no 429 from the quota, the
 * induced 429s were retried after a shared pause, and it wrote a well-formed SVG.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const demo = join(root, 'examples/demo/demo.ts');
const dir = mkdtempSync(join(tmpdir(), 'valve-demo-'));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runDemo(args: string[]): Promise<Run> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ['--import', 'tsx', demo, ...args], {
      cwd: root,
      env: { ...process.env, NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    child.on('error', fail);
    child.on('close', (code) => done({ code, stdout, stderr }));
  });
}

/** Reads one number from the summary line that starts with `label`. */
function figure(stdout: string, pattern: RegExp): number {
  const match = pattern.exec(stdout);
  if (!match) throw new Error(`summary line ${pattern} not found in:\n${stdout}`);
  return Number(match[1]);
}

/** A small well-formedness check: one root <svg>, every tag closed in order, no stray '<' or '&'. */
function checkWellFormed(svg: string): void {
  expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
  expect(svg.trimEnd().endsWith('</svg>')).toBe(true);
  const stack: string[] = [];
  const tag = /<(\/?)([a-zA-Z][\w-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/g;
  let last = 0;
  for (let m = tag.exec(svg); m !== null; m = tag.exec(svg)) {
    const text = svg.slice(last, m.index);
    expect(text, `text before ${m[0]}`).not.toMatch(/[<>]|&(?!#\d+;|amp;|lt;|gt;|quot;|apos;)/);
    last = m.index + m[0].length;
    const [, closing, name, , selfClosing] = m;
    if (closing) expect(stack.pop(), `closing </${name}>`).toBe(name);
    else if (!selfClosing) stack.push(name!);
    if (stack.length === 0) expect(svg.slice(last).trim(), 'content after the root').toBe('');
  }
  expect(stack).toEqual([]);
}

describe('npm run demo', () => {
  it('--help lists the options and exits 0', async () => {
    const run = await runDemo(['--help']);
    expect(run.code).toBe(0);
    for (const option of ['--requests', '--callers', '--rate', '--out', '--no-induced-429']) {
      expect(run.stdout).toContain(option);
    }
  });

  it('rejects an unknown option with exit code 2', async () => {
    const run = await runDemo(['--frobnicate']);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--frobnicate');
  });

  it('sends every request without a 429 from the quota, recovers from the induced 429s, writes the SVG', async () => {
    const out = join(dir, 'nested', 'timeline.svg');
    const run = await runDemo([
      '--requests',
      '60',
      '--rate',
      '50',
      '--callers',
      '4',
      '--retry-after',
      '1',
      '--latency',
      '40',
      // Starts are checked exactly below (busiest second); the provider, which counts
      // arrivals, gets extra tolerance for a CI machine under load.
      '--grace',
      '150',
      '--out',
      out,
    ]);
    expect(run.stderr).toBe('');
    expect(run.code, run.stdout).toBe(0);

    expect(figure(run.stdout, /requests\s+(\d+) succeeded/)).toBe(60);
    expect(figure(run.stdout, /succeeded, (\d+) failed/)).toBe(0);
    expect(figure(run.stdout, /429s\s+(\d+) from the quota/)).toBe(0);
    const induced = figure(run.stdout, /(\d+) from the induced secondary limit/);
    expect(induced).toBeGreaterThanOrEqual(1);
    expect(figure(run.stdout, /(\d+) retried by wrapFetch/)).toBe(induced);
    expect(figure(run.stdout, /pauses\s+(\d+) shared pause/)).toBeGreaterThanOrEqual(1);
    expect(figure(run.stdout, /busiest\s+(\d+) starts in any 1 s/)).toBeLessThanOrEqual(50);
    expect(figure(run.stdout, /achieved ([\d.]+) requests\/s/)).toBeGreaterThan(0);
    expect(run.stdout).toContain(`timeline   ${out}`);
    expect(run.stdout).toContain('OK: every request succeeded');

    const svg = readFileSync(out, 'utf8');
    checkWellFormed(svg);
    expect(svg).toContain('limit 50 per second');
    expect(svg).toContain('shared pause');
  }, 60_000);

  it("its rules sustain the provider's rate: >= 95% of 20/s after the induced pause, no 429 from the quota", async () => {
    // The default quota (25 in any 1 s, 200 in any 10 s: 20/s sustained), with enough requests
    // to keep the valve busy for the 10 s after the pause, where the 10 s window binds.
    const out = join(dir, 'sustained.svg');
    const run = await runDemo(['--plain', '--requests', '400', '--grace', '150', '--out', out]);
    expect(run.stderr).toBe('');
    expect(run.code, run.stdout).toBe(0);
    expect(figure(run.stdout, /requests\s+(\d+) succeeded/)).toBe(400);
    expect(figure(run.stdout, /429s\s+(\d+) from the quota/)).toBe(0);
    expect(figure(run.stdout, /pauses\s+(\d+) shared pause/)).toBeGreaterThanOrEqual(1);
    // The summary tells the truth: the quota and valve's rules sustain the same rate.
    expect(figure(run.stdout, /([\d.]+)\/s sustained/)).toBe(20);
    expect(figure(run.stdout, /valve's rules sustain ([\d.]+)\/s/)).toBe(20);
    expect(figure(run.stdout, /busiest\s+\d+ starts in any 1 s \(limit 25\); (\d+) starts in any 10 s/)).toBe(
      200,
    );
    expect(figure(run.stdout, /\(([\d.]+)\/s in the 10\.0 s after the pause\)/)).toBeGreaterThanOrEqual(
      0.95 * 20,
    );
    expect(figure(run.stdout, /busiest\s+(\d+) starts in any 1 s/)).toBeLessThanOrEqual(25);
  }, 90_000);

  it('--no-induced-429: no pause and no 429 at all', async () => {
    const out = join(dir, 'plain.svg');
    const run = await runDemo([
      '--requests',
      '30',
      '--rate',
      '50',
      '--no-induced-429',
      '--grace',
      '150',
      '--out',
      out,
    ]);
    expect(run.code, run.stdout).toBe(0);
    expect(figure(run.stdout, /429s\s+(\d+) from the quota/)).toBe(0);
    expect(figure(run.stdout, /(\d+) from the induced secondary limit/)).toBe(0);
    expect(figure(run.stdout, /pauses\s+(\d+) shared pause/)).toBe(0);
    checkWellFormed(readFileSync(out, 'utf8'));
  }, 60_000);
});
