/**
 * examples/many-credentials.ts runs (memory store, and Redis with a subscriber), and the code
 * blocks of docs/many-credentials.md marked `<!-- snippet: examples/many-credentials.ts#region -->`
 * are that file's regions, with '../src/index.js' written as 'valve'.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { sharedRedis } from '../helpers/shared-servers.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const example = 'examples/many-credentials.ts';

function run(env: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', example],
      { cwd: root, env: { ...process.env, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
    );
  });
}

/** A region of the example, without its indentation, as the docs show it. */
function region(name: string): string {
  const lines = readFileSync(`${root}${example}`, 'utf8').split('\n');
  const start = lines.findIndex((l) => l.trim() === `// #region ${name}`);
  const end = lines.findIndex((l) => l.trim() === `// #endregion ${name}`);
  if (start < 0 || end < start) throw new Error(`no region ${name}`);
  return lines
    .slice(start + 1, end)
    .join('\n')
    .trim()
    .replace(/'(\.\.\/)+src\/index\.js'/g, "'valve'");
}

describe('examples/many-credentials.ts', () => {
  it('runs on the memory store', async () => {
    const out = await run({});
    expect(out).toContain('hubspot:7 paused until');
    expect(out).toContain('installations: 2 valves, 3 jobs; portals: 2 valves, 4 requests');
  }, 90_000);

  it('runs on Redis', async () => {
    const out = await run({ REDIS_URL: sharedRedis().url });
    expect(out).toContain('installations: 2 valves, 3 jobs; portals: 2 valves, 4 requests');
  }, 90_000);

  it('docs/many-credentials.md shows its regions as they are', () => {
    const doc = readFileSync(`${root}docs/many-credentials.md`, 'utf8').split('\n');
    let checked = 0;
    for (let i = 0; i < doc.length; i++) {
      const marker = /^<!-- snippet: examples\/many-credentials\.ts#(\S+) -->$/.exec(doc[i]!);
      if (!marker) continue;
      expect(doc[i + 1]).toBe('```ts');
      const end = doc.indexOf('```', i + 2);
      expect(doc.slice(i + 2, end).join('\n')).toBe(region(marker[1]!));
      checked++;
    }
    expect(checked).toBeGreaterThanOrEqual(3);
  });
});
