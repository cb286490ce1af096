/**
 * Code blocks in the docs come from files the suite runs. A block marked
 *
 *   <!-- snippet: examples/redis.ts#readme -->
 *
 * must equal that file's `// #region readme` … `// #endregion readme` parts (joined by a blank
 * line, each without its common indentation; the whole file without `#name`), with the examples'
 * source imports ('../src/index.js') written as the package's name ('valve'), and those of a
 * subpath ('../src/undici.js') as its export ('valve/undici'). Every marked file is run by a test (or is
 * one), and in the files listed in FULLY_CHECKED (every page) every ts/js block is marked.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CODE_LANGS, docBlocks } from '../helpers/doc-blocks.js';

const root = resolve(import.meta.dirname, '../..');

const docs = [
  'README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
// Every page (docs/api.md's declarations come from examples/api/, type-checked against the
// real types by test/acceptance/api-docs.test.ts and `npm run typecheck`).
const FULLY_CHECKED = docs;

/** The parts of `file` the snippet names, as the docs show them. */
function extract(source: string): string {
  const [file, region] = source.split('#') as [string, string | undefined];
  const lines = readFileSync(join(root, file), 'utf8').split('\n');
  const parts: string[][] = [];
  if (region === undefined) parts.push(lines.filter((l) => !/^\s*\/\/ #(end)?region\b/.test(l)));
  else {
    let current: string[] | null = null;
    for (const line of lines) {
      if (line.trim() === `// #region ${region}`) current = [];
      else if (line.trim() === `// #endregion ${region}`) {
        if (current) parts.push(current);
        current = null;
      } else current?.push(line);
    }
  }
  if (parts.length === 0) throw new Error(`${source}: no region "${region}"`);
  const trimmed = parts.map((p) => {
    const copy = p.filter((l) => !/^\s*\/\/ #(end)?region\b/.test(l));
    while (copy.length > 0 && copy.at(-1)!.trim() === '') copy.pop();
    while (copy.length > 0 && copy[0]!.trim() === '') copy.shift();
    // A region inside a function shows without the function's indentation.
    const indent = Math.min(...copy.filter((l) => l.trim() !== '').map((l) => /^ */.exec(l)![0].length));
    return copy.map((l) => l.slice(indent)).join('\n');
  });
  return trimmed
    .join('\n\n')
    .replace(/'(\.\.\/)+src\/index\.js'/g, "'valve'")
    .replace(/'(\.\.\/)+src\/testing\.js'/g, "'valve/testing'")
    .replace(/'(\.\.\/)+src\/(otel|undici|axios)\.js'/g, "'valve/$2'")
    .replace(/'(\.\.\/)+src\/integrations\/octokit\/index\.js'/g, "'valve/octokit'");
}

/** Every test file's text, to check that a snippet's file is run by one of them. */
function testSources(dir = join(root, 'test')): string {
  let text = '';
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) text += testSources(path);
    else if (entry.name.endsWith('.test.ts')) text += readFileSync(path, 'utf8');
  }
  return text;
}

const all = docs.flatMap((doc) => docBlocks(root, doc));
const marked = all.filter((b) => b.source !== null);

describe('docs snippets', () => {
  it('finds the marked snippets', () => {
    expect(marked.length).toBeGreaterThan(0);
  });

  it.each(marked.map((b) => [`${b.doc}:${b.line} ← ${b.source}`, b] as const))('%s', (_, b) => {
    expect(b.code).toBe(extract(b.source!));
  });

  it('every file a snippet comes from is run by a test', () => {
    const tests = testSources();
    const files = [...new Set(marked.map((b) => b.source!.split('#')[0]!))];
    // A test file (docs/testing.md's blocks come from one) runs by itself.
    const unrun = files.filter(
      (f) => !(f.startsWith('test/') && f.endsWith('.test.ts')) && !tests.includes(f),
    );
    expect(unrun).toEqual([]);
  });

  it(`every code block of ${FULLY_CHECKED.join(', ')} comes from a file`, () => {
    const bare = all
      .filter((b) => FULLY_CHECKED.includes(b.doc) && CODE_LANGS.has(b.lang) && b.source === null)
      .map((b) => `${b.doc}:${b.line}`);
    expect(bare).toEqual([]);
  });
});
