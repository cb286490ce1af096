/**
 * Key and channel names. Every key of one valve id carries the hash tag `{<id>}`, so all of
 * them (and the sharded wake channel) live in one Redis Cluster slot. Names are built only
 * from the validated prefix, the validated id and fixed suffixes.
 */

/** The keys and channel of one valve id under one prefix. */
export interface IdKeys {
  /** `<prefix>:{<id>}:pause`: pausedUntil (epoch ms). */
  readonly pause: string;
  /** `<prefix>:{<id>}:leases`: sorted set of lease token → expiresAt (epoch ms). */
  readonly leases: string;
  /** `<prefix>:{<id>}:fence`: the last fencing number. */
  readonly fence: string;
  /** `<prefix>:{<id>}:wake`: pub/sub channel for wake-ups. */
  readonly wake: string;
  /** `<prefix>:{<id>}:r:` + a rule digest: one rule's state. */
  readonly rulePrefix: string;
}

export function idKeys(prefix: string, id: string): IdKeys {
  const base = `${prefix}:{${id}}:`;
  return {
    pause: `${base}pause`,
    leases: `${base}leases`,
    fence: `${base}fence`,
    wake: `${base}wake`,
    rulePrefix: `${base}r:`,
  };
}

/** Validates a key prefix: a non-empty string without `{`, `}` (which would change the hash tag). */
export function validatePrefix(prefix: unknown): string {
  if (typeof prefix !== 'string') {
    throw new TypeError(`Expected \`prefix\` to be a string, got ${typeof prefix}`);
  }
  if (prefix.length === 0 || prefix.length > 200 || /[{}\s]/.test(prefix)) {
    throw new TypeError(
      `Expected \`prefix\` to be 1 to 200 characters without '{', '}' or whitespace, got ${JSON.stringify(prefix)}`,
    );
  }
  return prefix;
}

/**
 * Validates an id at the store boundary (the valve validates it first; a user calling the
 * store directly gets the same rule): 1..200 characters, no `{` or `}`.
 */
export function validateId(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > 200 || /[{}]/.test(id)) {
    throw new TypeError(
      `Expected \`id\` to be a string of 1 to 200 characters without '{' or '}', got ${JSON.stringify(id)}`,
    );
  }
  return id;
}
