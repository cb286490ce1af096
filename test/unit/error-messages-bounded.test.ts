/**
 * Error messages quote at most 200 UTF-16 units of a value the caller passed (an id, a group key,
 * a duration string, a prefix, an option or attribute name), then `…` and its length: a 1 MB
 * bad value gives a message of a few hundred characters, not one of a megabyte.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { describe as describeValue, parseDuration, quote } from '../../src/duration.js';
import { createValve, createValveGroup, memoryStore } from '../../src/index.js';
import { checkOptions } from '../../src/otel/instruments.js';
import { normalizeRule } from '../../src/rules/rule.js';
import { checkId, checkKnownKeys } from '../../src/stores/checks.js';
import { validatePrefix } from '../../src/stores/redis/keys.js';

const MB = 1_000_000;

/** The message of the error `fn` throws (it must throw a TypeError or RangeError). */
function messageOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err instanceof TypeError || err instanceof RangeError, String(err)).toBe(true);
    return (err as Error).message;
  }
  throw new Error('did not throw');
}

/** A message that quotes the start of a 1 MB value, cut, with its length. */
function expectCut(message: string, characters = MB + 1): void {
  expect(message.length).toBeLessThan(1000);
  expect(message).toContain(`… (${characters} characters)`);
}

describe('error messages quote a long value cut to 200 UTF-16 units', () => {
  it('quote(): short strings whole, long ones cut (never inside a surrogate pair) with their length', () => {
    expect(quote('abc')).toBe('"abc"');
    expect(quote('a'.repeat(200))).toBe(JSON.stringify('a'.repeat(200)));
    expect(quote('a'.repeat(201))).toBe(`${JSON.stringify('a'.repeat(200))}… (201 characters)`);
    // 199 units, then an emoji (2 units): cut before it, and the emoji counts as one character.
    expect(quote(`${'a'.repeat(199)}😀${'b'.repeat(10)}`)).toBe(
      `${JSON.stringify('a'.repeat(199))}… (210 characters)`,
    );
    expect(describeValue('x'.repeat(MB))).toBe(`${JSON.stringify('x'.repeat(200))}… (${MB} characters)`);
  });

  it('a 1 MB group key with a brace or a lone surrogate: valve(), run(), wrapFetch()', async () => {
    const g = createValveGroup({ rules: { limit: 10, interval: '1s' } });
    for (const key of [`${'a'.repeat(MB)}{`, `${'a'.repeat(MB)}\ud800`, `{${'a'.repeat(MB)}`]) {
      const m = messageOf(() => g.valve(key));
      expect(m).toMatch(/^Expected `key` to/);
      expectCut(m);
      const run = await g.run(key, () => 1).catch((err: Error) => err.message);
      expectCut(run as string);
      const f = g.wrapFetch(async (_url: string) => new Response(''), { key: () => key });
      expectCut((await f('https://x.test/').catch((err: Error) => err.message)) as string);
    }
    expect(g.size).toBe(0);
    await g.close();
  });

  it('ids: createValve(), a store call, checkId()', () => {
    const id = `${'i'.repeat(MB)}}`;
    expectCut(messageOf(() => createValve({ id })));
    expectCut(messageOf(() => memoryStore().pause(id, 10)));
    expectCut(messageOf(() => checkId(`${'i'.repeat(MB)}\udc00`, 'request.id')));
  });

  it('durations, described values, prefixes, option and attribute names', () => {
    expectCut(messageOf(() => parseDuration(`${'9'.repeat(MB)}x`, 'maxWait')));
    expectCut(messageOf(() => createValve({ id: 'a', maxWait: `${' '.repeat(MB)}x` })));
    // A described value (a string where a number belongs).
    expectCut(messageOf(() => createValve({ id: 'a', concurrency: 'c'.repeat(MB + 1) as never })));
    // A valid duration string beyond 365 days.
    expectCut(
      messageOf(() => normalizeRule({ limit: 1, interval: `${'0'.repeat(MB - 3)}400d` }, 'rules[0]')),
    );
    expectCut(messageOf(() => validatePrefix(`${'p'.repeat(MB)}{`)));
    expectCut(messageOf(() => checkKnownKeys({ ['o'.repeat(MB + 1)]: 1 }, ['rules'], 'createValve()')));
    expectCut(messageOf(() => checkOptions({ attributes: { ['k'.repeat(MB + 1)]: {} } }, 'instrument()')));
  });
});

describe('docs/errors.md', () => {
  it('shows the real messages: a long string quoted cut, an id too long by its length alone', () => {
    const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8').replace(/\s+/g, ' ');
    const big = 'a'.repeat(MB + 1);
    // The doc shortens the 200 quoted units to four.
    const cut = describeValue(big).replace(/^"a{200}"/, '"aaaa"');
    expect(cut).toBe(`"aaaa"… (${MB + 1} characters)`);
    expect(doc).toContain(`got ${cut}`);
    const id = messageOf(() => createValve({ id: big, store: memoryStore() }));
    expect(doc).toContain(id);
  });
});
