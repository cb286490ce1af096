/**
 * docs/api.md shows no code of its own: every ts/js block carries a `<!-- snippet: … -->` marker
 * (docs-snippets.test.ts checks that the block equals the file's region), and the files of
 * examples/api behind them are checked here:
 *
 * - examples/api/declarations.ts: the page's declarations, each checked at compile time
 *   (`npm run typecheck`) to be identical to the exported type; here, that every region has
 *   its check and is shown on the page;
 * - examples/api/import.ts and examples/api/usage.ts: the page's runnable examples, run as
 *   scripts (memory stores only, no network), with what they print.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checked } from '../../examples/api/declarations.js';
import { isValveError, RedisStoreTimeoutError, ValveError } from '../../src/index.js';
import { CODE_LANGS, docBlocks } from '../helpers/doc-blocks.js';
import { runExample } from '../helpers/run-example.js';

const root = resolve(import.meta.dirname, '../..');
const PAGE = 'docs/api.md';
const DECLARATIONS = 'examples/api/declarations.ts';
const IMPORT = 'examples/api/import.ts';
const USAGE = 'examples/api/usage.ts';

/** The names of a file's `// #region <name>` lines. */
function regions(file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  return [...new Set([...text.matchAll(/^\s*\/\/ #region (\S+)\s*$/gm)].map((m) => m[1]!))];
}

const code = docBlocks(root, PAGE).filter((b) => CODE_LANGS.has(b.lang));

describe(`${PAGE}: every code block comes from a checked file`, () => {
  it('has ts/js blocks', () => {
    expect(code.length).toBeGreaterThan(10);
  });

  it('every ts/js block carries a snippet marker', () => {
    expect(code.filter((b) => b.source === null).map((b) => `${PAGE}:${b.line}`)).toEqual([]);
  });

  it('every marker names a region of an example file', () => {
    const bad = code.filter((b) => {
      const [file, region] = b.source!.split('#');
      return !file!.startsWith('examples/') || region === undefined || !regions(file!).includes(region);
    });
    expect(bad.map((b) => `${PAGE}:${b.line} ← ${b.source}`)).toEqual([]);
  });

  it('examples/api holds only the files this test checks', () => {
    const files = readdirSync(join(root, 'examples/api')).map((f) => `examples/api/${f}`);
    expect(files.sort()).toEqual([DECLARATIONS, IMPORT, USAGE].sort());
  });

  it('every region of the example files is shown on the page', () => {
    const shown = new Set(code.map((b) => b.source));
    const unshown = [DECLARATIONS, IMPORT, USAGE].flatMap((file) =>
      regions(file)
        .map((region) => `${file}#${region}`)
        .filter((source) => !shown.has(source)),
    );
    expect(unshown).toEqual([]);
  });
});

describe(DECLARATIONS, () => {
  it('every region has its compile-time check against the exported types', () => {
    expect(Object.keys(checked).sort()).toEqual(regions(DECLARATIONS).sort());
    expect(Object.values(checked).every((ok) => ok === true)).toBe(true);
  });

  it('RedisStoreTimeoutError extends ValveError, as declared (inheritance the type check cannot see)', () => {
    expect(readFileSync(join(root, DECLARATIONS), 'utf8')).toContain(
      'class RedisStoreTimeoutError extends ValveError {',
    );
    expect(Object.getPrototypeOf(RedisStoreTimeoutError.prototype)).toBe(ValveError.prototype);
    const err = new RedisStoreTimeoutError('timed out');
    expect(err).toBeInstanceOf(ValveError);
    expect(isValveError(err, 'VALVE_REDIS_TIMEOUT')).toBe(true);
    expect([err.name, err.code]).toEqual(['RedisStoreTimeoutError', 'VALVE_REDIS_TIMEOUT']);
    expect(new ValveError('CLOSED', 'closed').name).toBe('ValveError');
  });
});

describe('the runnable examples of the page, as scripts', () => {
  it(IMPORT, async () => {
    const result = await runExample(IMPORT);
    expect(result.signal, `killed: the process did not exit by itself\n${result.stderr}`).toBeNull();
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.trim()).toBe('run 42, closed true, redisStore function');
  }, 90_000);

  it(USAGE, async () => {
    const result = await runExample(USAGE);
    expect(result.signal, `killed: the process did not exit by itself\n${result.stderr}`).toBeNull();
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.trim().split('\n')).toEqual([
      'createValve github:app-42',
      'createValveGroup 2 valves (installation:1 installation:2)',
      'wrap {"id":"7","name":"user 7"}',
      'setRules ran',
      'events paused (manual, a Date)',
      // The Redis clients of the createValve and createValveGroup examples never connected.
      'redis wait wait',
    ]);
  }, 90_000);
});
