/**
 * Client adapters, detected by shape. valve imports no Redis client at runtime (they are
 * optional peer dependencies): it recognises the objects users pass in.
 *
 * - ioredis 5/6 and iovalkey (Redis and Cluster): `evalsha(sha, numkeys, [...keys, ...args])`
 *   (they flatten one array argument: no call ever spreads a batch's arguments, so a large
 *   renew or a batch of mixed costs cannot overflow the stack); `isCluster` tells a Cluster apart.
 * - node-redis 5/6 (client and cluster): `evalSha(sha, { keys, arguments })`; a cluster has
 *   `getSlotMaster()`.
 *
 * Replies are normalised from RESP2 or RESP3 (numbers may arrive as numbers, strings,
 * bigints or Buffers, strings as strings or Buffers).
 */
import type { LuaScript } from './scripts.generated.js';

/** What the store needs from a command connection. */
export interface CommandAdapter {
  /** 'ioredis' (also iovalkey) or 'node-redis'. */
  readonly family: 'ioredis' | 'node-redis';
  /** True for a cluster client. */
  readonly cluster: boolean;
  /** Runs a script by SHA1, falling back to EVAL when the server does not have it cached. */
  run(script: LuaScript, keys: readonly string[], args: readonly string[]): Promise<unknown>;
}

type Fn = (...args: unknown[]) => unknown;

function method(target: object, name: string): Fn | undefined {
  const value = (target as Record<string, unknown>)[name];
  return typeof value === 'function' ? (value as Fn) : undefined;
}

/** True for errors meaning "the server has no script with this SHA1" (restart, failover, SCRIPT FLUSH). */
export function isNoScript(err: unknown): boolean {
  const message = err instanceof Error ? err.message : typeof err === 'string' ? err : '';
  return message.startsWith('NOSCRIPT') || message.includes('NOSCRIPT ');
}

export function detectCommandClient(client: unknown): CommandAdapter {
  if (typeof client !== 'object' || client === null) {
    throw new TypeError(
      `Expected \`client\` to be an ioredis, iovalkey or node-redis client (or cluster), got ${client === null ? 'null' : typeof client}`,
    );
  }
  const evalSha = method(client, 'evalSha');
  const evalNode = method(client, 'eval');
  if (evalSha && evalNode) {
    const cluster = typeof method(client, 'getSlotMaster') === 'function';
    return {
      family: 'node-redis',
      cluster,
      async run(script, keys, args) {
        const options = { keys: keys.slice(), arguments: args.slice() };
        try {
          return await evalSha.call(client, script.sha, options);
        } catch (err) {
          if (!isNoScript(err)) throw err;
          return await evalNode.call(client, script.source, options);
        }
      },
    };
  }
  const evalsha = method(client, 'evalsha');
  if (evalsha && evalNode) {
    const cluster = (client as { isCluster?: unknown }).isCluster === true;
    return {
      family: 'ioredis',
      cluster,
      async run(script, keys, args) {
        const all = keys.concat(args);
        try {
          return await evalsha.call(client, script.sha, keys.length, all);
        } catch (err) {
          if (!isNoScript(err)) throw err;
          return await evalNode.call(client, script.source, keys.length, all);
        }
      },
    };
  }
  throw new TypeError(
    'Expected `client` to be an ioredis, iovalkey or node-redis client (or cluster): it has neither `evalsha` (ioredis) nor `evalSha` (node-redis)',
  );
}

/** A reply element as a number (RESP2/RESP3: number, numeric string, bigint or Buffer). */
export function replyNumber(value: unknown, what: string): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  if (typeof value === 'string') {
    const n = Number(value);
    if (value !== '' && Number.isFinite(n)) return n;
  }
  if (value instanceof Uint8Array) return replyNumber(Buffer.from(value).toString('utf8'), what);
  throw new TypeError(`valve: unexpected Redis reply for ${what}: ${String(value)}`);
}

/** A reply element as a string. */
export function replyString(value: unknown, what: string): string {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  throw new TypeError(`valve: unexpected Redis reply for ${what}: ${String(value)}`);
}

/** A reply as an array. */
export function replyArray(value: unknown, what: string): unknown[] {
  if (Array.isArray(value)) return value;
  throw new TypeError(`valve: unexpected Redis reply for ${what}: expected an array, got ${typeof value}`);
}
