/**
 * Key and channel names. Every key of one valve id carries the hash tag `{<id>}`, so all of
 * them (and the sharded wake channel) live in one Redis Cluster slot. Names are built only
 * from the validated prefix, the validated id and fixed suffixes.
 */
import { describe, quote } from '../../duration.js';
import { checkId } from '../checks.js';

/** The keys and channel of one valve id under one prefix. */
export interface IdKeys {
  /** `<prefix>:{<id>}:pause`: pausedUntil (epoch ms). */
  readonly pause: string;
  /** `<prefix>:{<id>}:pause-by`: what wrote the current pause (for operators), same TTL. */
  readonly pauseBy: string;
  /** `<prefix>:{<id>}:leases`: sorted set of lease token → expiresAt (epoch ms). */
  readonly leases: string;
  /** `<prefix>:{<id>}:fence`: the last fencing number. */
  readonly fence: string;
  /**
   * `<prefix>:{<id>}:wake`: pub/sub channel for wake-ups. Server-wide: not per database, nor
   * prefixed by ioredis' keyPrefix (classic pub/sub), so its messages are only cues.
   */
  readonly wake: string;
  /** `<prefix>:{<id>}:r:` + a rule digest: one rule's state. */
  readonly rulePrefix: string;
  /** `<prefix>:{<id>}:rules`: the rule set recorded for the id (digests joined by ','). */
  readonly rules: string;
  /** `<prefix>:{<id>}:line`: the id's lines of turns (stores/turns.ts), `:<digest of the first rule>` after it. */
  readonly line: string;

  /** `<prefix>:{<id>}:window`: the provider window wrapFetch learnt (window.lua). */
  readonly window: string;
}

export function idKeys(prefix: string, id: string): IdKeys {
  const base = `${prefix}:{${id}}:`;
  return {
    pause: `${base}pause`,
    pauseBy: `${base}pause-by`,
    leases: `${base}leases`,
    fence: `${base}fence`,
    wake: `${base}wake`,
    rulePrefix: `${base}r:`,
    rules: `${base}rules`,
    line: `${base}line`,

    window: `${base}window`,
  };
}

/**
 * Validates a key prefix: 1 to 200 characters, counted as an id's are (code points: an emoji is
 * one), of well-formed Unicode (no lone surrogate) without `{` or `}` (which would change the
 * hash tag), whitespace, or the glob characters `*`, `?`, `[`, `]` and `\` (which would widen the
 * ACL patterns `~<prefix>:{*` and `&<prefix>:{*` that docs/redis.md recommends).
 */
export function validatePrefix(prefix: unknown): string {
  if (typeof prefix !== 'string') {
    throw new TypeError(`Expected \`prefix\` to be a string, got ${describe(prefix)}`);
  }
  if (/[{}\s]/.test(prefix)) {
    throw new TypeError(`Expected \`prefix\` to contain no '{', '}' or whitespace, got ${quote(prefix)}`);
  }
  if (/[*?[\]\\]/.test(prefix)) {
    throw new TypeError(
      `Expected \`prefix\` to contain none of the ACL glob characters '*', '?', '[', ']' or '\\', got ${quote(prefix)}`,
    );
  }
  // The length in code points, as for an id; and a lone surrogate: UTF-8 cannot encode it, so
  // 'p\ud800' and 'p\udfff' would name the same keys.
  return checkId(prefix, 'prefix');
}
