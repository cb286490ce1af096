/**
 * A closed valve group holds none of its valves: after `await group.close()`, while the group
 * object is still referenced, every valve it had can be garbage-collected. Measured in a child
 * process run with --expose-gc (test/helpers/group-close-heap-child.ts).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const child = fileURLToPath(new URL('../helpers/group-close-heap-child.ts', import.meta.url));
const MB = 1024 * 1024;

interface Figures {
  keys: number;
  aliveOpen: number;
  aliveClosed: number;
  openBytes: number;
  closedBytes: number;
  size: number;
  closed: boolean;
  started: number;
}

describe('valve group: close() lets go of its valves', () => {
  it('5,000 live valves: all reachable while open, none once closed (the group still referenced), heap back within 2 MB', async () => {
    const f = await new Promise<Figures>((resolve, reject) => {
      execFile(
        process.execPath,
        ['--expose-gc', '--import', 'tsx', child, '5000'],
        { timeout: 90_000, maxBuffer: 1 << 20 },
        (err, stdout, stderr) => {
          if (err) reject(new Error(`${err.message}\n${stderr}`));
          else resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as Figures);
        },
      );
    });
    expect(f).toMatchObject({ keys: 5000, aliveOpen: 5000, size: 0, closed: true, started: 5000 });
    expect(f.openBytes).toBeGreaterThan(10 * MB); // the measure sees 5,000 live valves
    expect(f.aliveClosed).toBe(0);
    expect(f.closedBytes).toBeLessThan(2 * MB);
  }, 120_000);
});
