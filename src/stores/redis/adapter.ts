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
  /** Runs a script by SHA1 (EVALSHA): rejects with NOSCRIPT when the server does not have it cached. */
  call(script: LuaScript, numKeys: number, all: readonly string[]): Promise<unknown>;
  /** After a NOSCRIPT from call(): loads the script (one load at a time) and runs the call. */
  recover(script: LuaScript, numKeys: number, all: readonly string[]): Promise<unknown>;
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

/** A script call: the SHA1 or the source, then its keys (the first `numKeys` of `all`) and arguments. */
type ScriptCall = (text: string, numKeys: number, all: readonly string[]) => Promise<unknown>;

/** Rounds of "wait for the load in flight, then EVALSHA again" before a call sends its own EVAL. */
const MAX_LOAD_ROUNDS = 32;

/**
 * Runs scripts by SHA1 and loads each one at most once at a time. Without it, a server that lost
 * its script cache (a restart, a failover, SCRIPT FLUSH, or simply the first use) answers every
 * call in flight with NOSCRIPT, and each would send the whole script (acquire.lua is 27 KB) with
 * EVAL: 10,000 valves of a group starting at once sent 270 MB, and the server spent seconds
 * hashing them while every call timed out. Here the first NOSCRIPT sends EVAL (which loads the
 * script as it runs the call); the calls refused meanwhile wait for it, then EVALSHA again. On a
 * cluster another node may still lack the script: the next NOSCRIPT loads it there, one node per
 * round.
 */
class ScriptLoads {
  /** The EVAL in flight per script (settled ones are removed). */
  private readonly inFlight = new Map<LuaScript, Promise<unknown>>();

  constructor(
    /** EVALSHA with the script's SHA1. */
    private readonly evalsha: ScriptCall,
    /** EVAL with the script's source. */
    private readonly evalSource: ScriptCall,
  ) {}

  call(script: LuaScript, numKeys: number, all: readonly string[]): Promise<unknown> {
    return this.evalsha(script.sha, numKeys, all);
  }

  /** The call was answered NOSCRIPT: waits for the load in flight, or loads the script itself. */
  async recover(script: LuaScript, numKeys: number, all: readonly string[]): Promise<unknown> {
    for (let round = 0; round < MAX_LOAD_ROUNDS; round++) {
      const loading = this.inFlight.get(script);
      if (loading === undefined) return this.load(script, numKeys, all);
      await loading.catch(() => {});
      try {
        return await this.evalsha(script.sha, numKeys, all);
      } catch (err) {
        if (!isNoScript(err)) throw err;
      }
    }
    return this.evalSource(script.source, numKeys, all);
  }

  private async load(script: LuaScript, numKeys: number, all: readonly string[]): Promise<unknown> {
    const loading = this.evalSource(script.source, numKeys, all);
    this.inFlight.set(script, loading);
    try {
      return await loading;
    } finally {
      if (this.inFlight.get(script) === loading) this.inFlight.delete(script);
    }
  }
}

/** One adapter per client, so that every store on a client shares its script loads. */
const adapters = new WeakMap<object, CommandAdapter>();

export function detectCommandClient(client: unknown): CommandAdapter {
  if (typeof client !== 'object' || client === null) {
    throw new TypeError(
      `Expected \`client\` to be an ioredis, iovalkey or node-redis client (or cluster), got ${client === null ? 'null' : typeof client}`,
    );
  }
  let adapter = adapters.get(client);
  if (adapter === undefined) {
    adapter = adapt(client);
    adapters.set(client, adapter);
  }
  return adapter;
}

function adapt(client: object): CommandAdapter {
  const evalSha = method(client, 'evalSha');
  const evalNode = method(client, 'eval');
  if (evalSha && evalNode) {
    const cluster = typeof method(client, 'getSlotMaster') === 'function';
    const loads = new ScriptLoads(
      (text, numKeys, all) =>
        evalSha.call(client, text, {
          keys: all.slice(0, numKeys),
          arguments: all.slice(numKeys),
        }) as Promise<unknown>,
      (text, numKeys, all) =>
        evalNode.call(client, text, {
          keys: all.slice(0, numKeys),
          arguments: all.slice(numKeys),
        }) as Promise<unknown>,
    );
    return {
      family: 'node-redis',
      cluster,
      call: (script, numKeys, all) => loads.call(script, numKeys, all),
      recover: (script, numKeys, all) => loads.recover(script, numKeys, all),
    };
  }
  const evalsha = method(client, 'evalsha');
  if (evalsha && evalNode) {
    const cluster = (client as { isCluster?: unknown }).isCluster === true;
    const loads = new ScriptLoads(
      (!cluster && directEvalsha(client)) ||
        ((text, numKeys, all) => evalsha.call(client, text, numKeys, all) as Promise<unknown>),
      (text, numKeys, all) => evalNode.call(client, text, numKeys, all) as Promise<unknown>,
    );
    return {
      family: 'ioredis',
      cluster,
      call: (script, numKeys, all) => loads.call(script, numKeys, all),
      recover: (script, numKeys, all) => loads.recover(script, numKeys, all),
    };
  }
  throw new TypeError(
    'Expected `client` to be an ioredis, iovalkey or node-redis client (or cluster): it has neither `evalsha` (ioredis) nor `evalSha` (node-redis)',
  );
}

/** An ioredis (or iovalkey) `Command`: its arguments and its promise. */
interface IoCommand {
  args: unknown[];
  readonly promise: Promise<unknown>;
}
type IoCommandClass = new (name: string, args: unknown[], options: { replyEncoding: string }) => IoCommand;
const NO_ARGS: unknown[] = [];

/**
 * EVALSHA through a standalone ioredis client's own `Command` and `sendCommand()`, with the
 * arguments set as one array: `client.evalsha(...)` builds its command with `args.flat()`,
 * which cost about 100 ns per argument (an acquire-many call carries hundreds). What evalsha
 * adds is kept or excluded: the reply as UTF-8 strings; a `keyPrefix`, friendly error stacks
 * or auto-pipelining (which that path applies) leave this path off. Null when the client has
 * no `Command` class or `sendCommand()` (then `evalsha()` is used).
 */
function directEvalsha(client: object): ScriptCall | null {
  const Command = commandClass(client);
  const send = method(client, 'sendCommand');
  const options = (client as { options?: Record<string, unknown> }).options;
  if (
    typeof Command !== 'function' ||
    send === undefined ||
    typeof options !== 'object' ||
    options === null ||
    options.keyPrefix ||
    options.showFriendlyErrorStack ||
    options.enableAutoPipelining
  ) {
    return null;
  }
  const Cmd = Command as IoCommandClass;
  return (sha, numKeys, all) => {
    const command = new Cmd('evalsha', NO_ARGS, { replyEncoding: 'utf8' });
    const args = new Array<unknown>(all.length + 2);
    args[0] = sha;
    args[1] = String(numKeys);
    for (let i = 0; i < all.length; i++) args[i + 2] = all[i];
    command.args = args;
    return send.call(client, command) as Promise<unknown>;
  };
}

/**
 * The client's `Command` class: its class's static `Command`, or (ioredis 5 and iovalkey, whose
 * prototype gets EventEmitter's members mixed in, `constructor` among them, so that
 * `client.constructor` is EventEmitter) the class of a command made by one of the client's
 * pipelines, which is never executed: its sendCommand() only takes the command, nothing is
 * queued or sent. Undefined when neither way finds one.
 */
export function commandClass(client: object): unknown {
  const own = (client.constructor as { Command?: unknown } | undefined)?.Command;
  if (typeof own === 'function') return own;
  const pipeline = method(client, 'pipeline');
  if (pipeline === undefined) return undefined;
  try {
    const p = pipeline.call(client) as { sendCommand?: unknown; evalsha?: unknown };
    if (typeof p !== 'object' || p === null || typeof p.evalsha !== 'function') return undefined;
    let made: unknown;
    p.sendCommand = (command: unknown): unknown => {
      made = (command as { constructor?: unknown } | null)?.constructor;
      return undefined;
    };
    (p.evalsha as Fn).call(p, '0', '0');
    const proto = typeof made === 'function' ? (made as { prototype?: unknown }).prototype : undefined;
    return typeof (proto as { toWritable?: unknown } | undefined)?.toWritable === 'function'
      ? made
      : undefined;
  } catch {
    return undefined;
  }
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
