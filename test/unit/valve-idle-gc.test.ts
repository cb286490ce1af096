/**
 * A valve that is never closed is freed once idle and unreferenced: it holds no registration
 * in its store. Measured in a child process run with --expose-gc (test/helpers/idle-valves-script.ts).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../helpers/idle-valves-script.ts', import.meta.url));

describe('idle valves are garbage-collected', () => {
  it('20k throwaway valves on one memoryStore retain < 100 B each after GC (never closed)', async () => {
    const result = await new Promise<{ perValve: number; count: number }>((resolve, reject) => {
      execFile(
        process.execPath,
        ['--expose-gc', '--import', 'tsx', script, '', '20000'],
        { timeout: 90_000 },
        (err, stdout, stderr) => {
          if (err) reject(new Error(`${err.message}\n${stderr}`));
          else resolve(JSON.parse(stdout.trim().split('\n').at(-1)!));
        },
      );
    });
    expect(result.count).toBe(20_000);
    expect(result.perValve).toBeLessThan(100);
  }, 120_000);
});
