/**
 * A lenient parser for the RFC 8941 structured-field shapes the IETF RateLimit drafts use.
 * One pass over the text: every token is matched by a sticky expression at the current
 * position, so the work is linear in the length of the field.
 */

const SF_NUMBER = /-?\d+(?:\.\d+)?/y;
const SF_TOKEN = /[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*/y;
const SF_KEY = /[a-z*][a-z0-9_\-.*]*/y;

/** The parameters of every member that has none (never written). */
const NO_PARAMS: ReadonlyMap<string, SfBare> = new Map();

/** The match of a sticky expression at `at`, or undefined. */
function matchAt(re: RegExp, s: string, at: number): string | undefined {
  re.lastIndex = at;
  const m = re.exec(s);
  return m ? m[0] : undefined;
}

export type SfBare = string | number | boolean;
export interface SfMember {
  /** The item's value (a string or token), or for a dictionary member its key. */
  readonly name: string;
  /** A dictionary member's value (`limit=10`); undefined for list items. */
  readonly value: SfBare | undefined;
  readonly params: ReadonlyMap<string, SfBare>;
}

/**
 * A lenient parser for the RFC 8941 shapes the RateLimit drafts use: a List of items
 * with parameters (`"default";r=0;t=30, "day";r=10;t=3600`, drafts 08+) or a Dictionary
 * (`limit=10, remaining=0, reset=5`, draft 07). Returns undefined when malformed.
 */
export function parseStructured(text: string): SfMember[] | undefined {
  const members: SfMember[] = [];
  let i = 0;
  const s = text;
  const skipWs = () => {
    while (i < s.length && (s[i] === ' ' || s[i] === '\t')) i++;
  };
  const bare = (): SfBare | undefined => {
    if (s[i] === '"') {
      const parts: string[] = [];
      i++;
      let from = i;
      while (i < s.length && s[i] !== '"') {
        if (s[i] === '\\' && i + 1 < s.length) {
          parts.push(s.slice(from, i));
          i++;
          from = i;
        }
        i++;
      }
      if (s[i] !== '"') return undefined;
      parts.push(s.slice(from, i));
      i++;
      return parts.join('');
    }
    if (s[i] === '?') {
      i++;
      const b = s[i++];
      return b === '1' ? true : b === '0' ? false : undefined;
    }
    const num = matchAt(SF_NUMBER, s, i);
    if (num !== undefined) {
      i += num.length;
      return Number(num);
    }
    const tok = matchAt(SF_TOKEN, s, i);
    if (tok !== undefined) {
      i += tok.length;
      return tok;
    }
    return undefined;
  };
  const key = (): string | undefined => {
    const k = matchAt(SF_KEY, s, i);
    if (k !== undefined) i += k.length;
    return k;
  };
  skipWs();
  if (i >= s.length) return undefined;
  while (i < s.length) {
    skipWs();
    let name: string;
    let value: SfBare | undefined;
    const start = i;
    const k = s[i] === '"' ? undefined : key();
    if (k !== undefined && s[i] === '=') {
      i++;
      const v = bare();
      if (v === undefined) return undefined;
      name = k;
      value = v;
    } else {
      i = start;
      const v = bare();
      if (typeof v !== 'string') return undefined;
      name = v;
      value = undefined;
    }
    const params = s[i] === ';' ? new Map<string, SfBare>() : NO_PARAMS;
    while (s[i] === ';') {
      i++;
      skipWs();
      const pk = key();
      if (pk === undefined) return undefined;
      if (s[i] === '=') {
        i++;
        const pv = bare();
        if (pv === undefined) return undefined;
        (params as Map<string, SfBare>).set(pk, pv);
      } else {
        (params as Map<string, SfBare>).set(pk, true);
      }
    }
    members.push({ name, value, params });
    skipWs();
    if (i >= s.length) break;
    if (s[i] !== ',') return undefined;
    i++;
    skipWs();
    if (i >= s.length) return undefined;
  }
  return members;
}
