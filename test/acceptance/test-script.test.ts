/**
 * `npm test` (scripts/test.mjs) on fixture files (test/fixtures/test-script/): its closing line
 * counts failed tests, not the describe blocks around them; a file that fails outside its tests
 * (a throwing hook, an import error) counts once; the exit code fails the run; and output that
 * is not a terminal is plain (no colour codes, no slow-test lines for a 400 ms test) while it
 * still names the test that failed.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const dir = mkdtempSync(join(tmpdir(), 'valve-test-script-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function runScript(...args: string[]): Promise<{ code: number | null; out: string; stdout: string }> {
  return new Promise((done, fail) => {
    const child = spawn(
      process.execPath,
      ['scripts/test.mjs', '--config', 'test/fixtures/test-script/vitest.config.ts', ...args],
      {
        cwd: root,
        env: { ...process.env, VALVE_TEST_REPORT: join(dir, `report-${args.length}.json`), FORCE_COLOR: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let stdout = '';
    child.stdout.on('data', (d) => {
      out += d;
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    child.on('error', fail);
    child.on('exit', (code) => done({ code, out, stdout }));
  });
}

describe('npm test (scripts/test.mjs)', () => {
  it('counts failed tests once each, and a file failing outside its tests once; exits non-zero', async () => {
    const { code, out, stdout } = await runScript();
    const lines = stdout.trim().split('\n');
    // nested: 1 failed, 1 passed; hook: 2 skipped, 1 passed, the file failed once; import: the file
    // failed once; slow: 1 passed.
    expect(lines.at(-1)).toBe('3 passed, 3 failed, 2 skipped');
    expect(code).not.toBe(0);
    expect(out).toMatch(/hook\.fixture\.ts failed outside its tests/);
    expect(out).toMatch(/import\.fixture\.ts failed outside its tests: .*broken at import/);
    // Plain output, even with FORCE_COLOR in the environment: no escape codes.
    expect(out).not.toContain('\u001b[');
    // The failed test is named, with its describe blocks.
    expect(out).toMatch(/FAIL +nested\.fixture\.ts > outer > inner > fails/);
    // A 400 ms test is not listed as slow.
    expect(out).not.toContain('takes 400 ms');
  }, 60_000);

  it('a run where everything passes closes with "N passed, 0 failed" and exits 0', async () => {
    // The closing line is the script's last on stdout. (A child's warning on stderr, written
    // earlier, can reach this pipe reader after it: two pipes keep no order between them.)
    const { code, stdout } = await runScript('slow');
    expect(stdout.trim().split('\n').at(-1)).toBe('1 passed, 0 failed');
    expect(code).toBe(0);
  }, 60_000);
});
