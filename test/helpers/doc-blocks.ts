import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** A fenced code block of a docs page, and the snippet marker on the line before it. */
export interface DocBlock {
  doc: string;
  /** The line of its opening fence (1-based). */
  line: number;
  lang: string;
  code: string;
  /** What `<!-- snippet: <source> -->` names, or null without a marker. */
  source: string | null;
}

/** The language tags of the blocks that must come from a file. */
export const CODE_LANGS = new Set(['ts', 'js', 'mjs', 'cjs', 'typescript', 'javascript']);

/** Every fenced block of `doc` (a path under `root`), in order. */
export function docBlocks(root: string, doc: string): DocBlock[] {
  const lines = readFileSync(join(root, doc), 'utf8').split('\n');
  const out: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const start = i;
    let end = i + 1;
    while (end < lines.length && lines[end] !== '```') end++;
    const marker = /^<!-- snippet: (\S+) -->$/.exec(lines[start - 1] ?? '');
    out.push({
      doc,
      line: start + 1,
      lang: open[1] ?? '',
      code: lines.slice(start + 1, end).join('\n'),
      source: marker?.[1] ?? null,
    });
    i = end;
  }
  return out;
}
