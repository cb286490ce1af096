/**
 * What a valve group keeps of keys whose rules were changed with setRules(), once the changes
 * are over and the valves dropped: 20,000 keys of 20 characters, in a child process run with
 * --expose-gc (test/helpers/group-rules-heap-child.ts). Rules set back to the defaults leave
 * nothing; rules kept for a key cost about 370 bytes (docs/many-credentials.md).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const child = fileURLToPath(new URL('../helpers/group-rules-heap-child.ts', import.meta.url));

interface Figures {
  mode: string;
  size: number;
  perKey: number;
  perKeyClosed: number;
}

function run(mode: string): Promise<Figures> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', child, mode, '20000'],
      { timeout: 240_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${err.message}\n${stderr}`));
        else {
          const figures = JSON.parse(stdout.trim().split('\n').at(-1)!) as Figures;
          process.stderr.write(`group rules heap: ${JSON.stringify(figures)}\n`);
          resolve(figures);
        }
      },
    );
  });
}

describe('valve group: keys whose rules changed, after the change and eviction', () => {
  it.each(['set-back', 'set-back-used'])(
    '%s: nothing is kept per key',
    async (mode) => {
      const f = await run(mode);
      expect(f.size).toBe(0);
      expect(f.perKey).toBeLessThan(50);
    },
    250_000,
  );

  it('rules kept for a key (set-first): about 370 bytes per key, nothing once the group closed', async () => {
    const f = await run('set-first');
    expect(f.size).toBe(0);
    expect(f.perKey).toBeGreaterThan(250);
    expect(f.perKey).toBeLessThan(500);
    expect(f.perKeyClosed).toBeLessThan(50);
  }, 250_000);
});
