/**
 * A valve group's cost after eviction: 100,000 keys used once each through one group, then, after
 * its idleTimeout, the heap is back to its baseline within 5 MB and no timer is left, in a child
 * process run with --expose-gc (test/helpers/group-heap-child.ts). On Redis, every key of those
 * ids has expired too.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { respCommand } from '../helpers/resp.js';
import { sharedRedis, uniquePrefix } from '../helpers/shared-servers.js';

const child = fileURLToPath(new URL('../helpers/group-heap-child.ts', import.meta.url));
const MB = 1024 * 1024;

interface Figures {
  keys: number;
  baseline: number;
  peak: number;
  after: number;
  sizeAtPeak: number;
  size: number;
  evicted: number;
  timersBefore: number;
  timersAfter: number;
}

function run(args: string[]): Promise<Figures> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', child, ...args],
      { timeout: 240_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${err.message}\n${stderr}`));
        else {
          const figures = JSON.parse(stdout.trim().split('\n').at(-1)!) as Figures;
          process.stderr.write(`group heap: ${JSON.stringify(figures)}\n`);
          resolve(figures);
        }
      },
    );
  });
}

/** `allLive`: every key was still live at the peak (the run was shorter than idleTimeout). */
function expectBack(f: Figures, allLive: boolean): void {
  if (allLive) {
    expect(f.sizeAtPeak).toBe(100_000);
    expect(f.peak - f.baseline).toBeGreaterThan(100 * MB); // the measure sees 100k live valves
  }
  expect(f.size).toBe(0);
  expect(f.evicted).toBeGreaterThanOrEqual(100_000);
  expect(f.after - f.baseline).toBeLessThan(5 * MB);
  expect(f.timersAfter).toBe(f.timersBefore);
}

describe('valve group: 100,000 keys used once', () => {
  it('memory store: after idleTimeout the heap is back to its baseline within 5 MB, no timer left', async () => {
    const f = await run(['100000', '500']);
    expectBack(f, true);
  }, 250_000);

  it('Redis store with a subscriber: the same, and every Redis key of those ids expired', async () => {
    const server = sharedRedis();
    const prefix = uniquePrefix('group-heap');
    // Slower than idleTimeout: valves are dropped while later keys are used.
    const f = await run(['100000', '500', server.url, prefix]);
    expectBack(f, false);
    const keys = await respCommand(server, [
      'EVAL',
      "return #redis.call('KEYS', ARGV[1])",
      '0',
      `${prefix}:*`,
    ]);
    expect(keys).toBe(0);
    const channels = await respCommand(server, ['PUBSUB', 'CHANNELS', `${prefix}:*`]);
    expect(channels).toEqual([]);
  }, 250_000);
});
