const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PATTERN = /^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d)\s*$/;

/**
 * Parses a duration: a positive finite number of milliseconds, or a string such as
 * '250ms', '1s', '1.5s', '5m', '1h', '1d'. Throws TypeError/RangeError naming `option`.
 */
export function parseDuration(value: unknown, option: string): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value <= 0) {
      throw new RangeError(
        `Expected \`${option}\` to be a positive finite number of milliseconds, got ${String(value)}`,
      );
    }
    return value;
  }
  if (typeof value === 'string') {
    const match = PATTERN.exec(value);
    if (match) {
      const ms = Number(match[1]) * UNITS[match[2]!]!;
      if (ms > 0 && Number.isFinite(ms)) return ms;
    }
    throw new RangeError(
      `Expected \`${option}\` to be a duration such as '250ms', '1s', '1.5s', '5m', '1h' or '1d', got ${quote(value)}`,
    );
  }
  throw new TypeError(
    `Expected \`${option}\` to be a number of milliseconds or a duration string such as '1s', got ${describe(value)}`,
  );
}

/** Short description of a received value for error messages. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return quote(value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'undefined')
    return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'function') return 'a function';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** The most UTF-16 units of a string an error message quotes. */
const QUOTE_MAX = 200;

/**
 * A string as an error message quotes it: JSON-quoted, and beyond 200 UTF-16 units cut there
 * (never inside a surrogate pair) with `…` and its length in characters (code points), so a
 * 1 MB value makes a message of a few hundred characters, not of a megabyte.
 */
export function quote(value: string): string {
  if (value.length <= QUOTE_MAX) return JSON.stringify(value);
  let end = QUOTE_MAX;
  const last = value.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  let characters = 0;
  for (let i = 0; i < value.length; i++) {
    const unit = value.charCodeAt(i);
    // A high surrogate followed by a low one is one character.
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = value.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
    }
    characters++;
  }
  return `${JSON.stringify(value.slice(0, end))}… (${characters} characters)`;
}
