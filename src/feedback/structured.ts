/**
 * A lenient parser for the RFC 8941 structured-field shapes the IETF RateLimit drafts use.
 */

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
      let out = '';
      i++;
      while (i < s.length && s[i] !== '"') {
        if (s[i] === '\\' && i + 1 < s.length) i++;
        out += s[i];
        i++;
      }
      if (s[i] !== '"') return undefined;
      i++;
      return out;
    }
    if (s[i] === '?') {
      i++;
      const b = s[i++];
      return b === '1' ? true : b === '0' ? false : undefined;
    }
    const num = /^-?\d+(?:\.\d+)?/.exec(s.slice(i));
    if (num) {
      i += num[0].length;
      return Number(num[0]);
    }
    const tok = /^[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*/.exec(s.slice(i));
    if (tok) {
      i += tok[0].length;
      return tok[0];
    }
    return undefined;
  };
  const key = (): string | undefined => {
    const k = /^[a-z*][a-z0-9_\-.*]*/.exec(s.slice(i));
    if (!k) return undefined;
    i += k[0].length;
    return k[0];
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
    const params = new Map<string, SfBare>();
    while (s[i] === ';') {
      i++;
      skipWs();
      const pk = key();
      if (pk === undefined) return undefined;
      if (s[i] === '=') {
        i++;
        const pv = bare();
        if (pv === undefined) return undefined;
        params.set(pk, pv);
      } else {
        params.set(pk, true);
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
