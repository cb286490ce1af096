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
import { quote } from '../../duration.js';
import { FirstReady } from './first-ready.js';
import type { LuaScript } from './scripts.generated.js';

/** What the store needs from a command connection. */
export interface CommandAdapter {
  /** 'ioredis' (also iovalkey) or 'node-redis'. */
  readonly family: 'ioredis' | 'node-redis';
  /** True for a cluster client. */
  readonly cluster: boolean;
  /**
   * Runs a script by SHA1 (EVALSHA): rejects with NOSCRIPT when the server does not have it
   * cached. On an ioredis or iovalkey client still making its first connection, waits for it
   * (see FirstReady), and is not sent if `call.done` by then.
   */
  call(script: LuaScript, numKeys: number, all: readonly string[], call?: Gone): Promise<unknown>;
  /**
   * After a NOSCRIPT from call(): loads the script (one load at a time per server) and runs the
   * call, unless `call.done` (valve gave up on it) by the time it would be sent.
   */
  recover(script: LuaScript, numKeys: number, all: readonly string[], call?: Gone): Promise<unknown>;
}

/** A call's state as recover() reads it: once done (answered elsewhere or timed out), it is never sent again. */
export interface Gone {
  readonly done: boolean;
}

/** The rejection of recover() for a call valve gave up on before it was sent again (nobody hears it). */
const GAVE_UP = new Error('valve: the call timed out before its script was loaded; not sent again');
const NEVER_DONE: Gone = { done: false };

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

/** Where a call goes: the server of its first key's slot on a cluster (see ScriptLoads). */
type NodeOf = (key: string) => string;

/**
 * Runs scripts by SHA1 and loads each one at most once at a time per server. Without it, a
 * server that lost its script cache (a restart, a failover, SCRIPT FLUSH, or simply the first
 * use) answers every call in flight with NOSCRIPT, and each would send the whole script
 * (acquire.lua is 27 KB) with EVAL: 10,000 valves of a group starting at once sent 270 MB, and
 * the server spent seconds hashing them while every call timed out. Here the first NOSCRIPT
 * sends EVAL (which loads the script as it runs the call); the calls to the same server refused
 * meanwhile wait for it, then EVALSHA again. On a cluster the loads are tracked per node (the
 * master of the call's slot): a call never waits for another node's load, so one slow node
 * does not hold back the others. A call valve gave up on meanwhile is not sent again.
 */
class ScriptLoads {
  /** The EVAL in flight per script and server (settled ones are removed). */
  private readonly inFlight = new Map<LuaScript, Map<string, Promise<unknown>>>();

  constructor(
    /** EVALSHA with the script's SHA1. */
    private readonly evalsha: ScriptCall,
    /** EVAL with the script's source. */
    private readonly evalSource: ScriptCall,
    /** The server a key's call goes to ('' for a standalone client). */
    private readonly nodeOf: NodeOf,
  ) {}

  call(script: LuaScript, numKeys: number, all: readonly string[]): Promise<unknown> {
    return this.evalsha(script.sha, numKeys, all);
  }

  /** The call was answered NOSCRIPT: waits for its server's load in flight, or loads the script itself. */
  async recover(
    script: LuaScript,
    numKeys: number,
    all: readonly string[],
    call: Gone = NEVER_DONE,
  ): Promise<unknown> {
    let loads = this.inFlight.get(script);
    if (loads === undefined) {
      loads = new Map();
      this.inFlight.set(script, loads);
    }
    for (let round = 0; round < MAX_LOAD_ROUNDS; round++) {
      if (call.done) throw GAVE_UP;
      const node = numKeys > 0 ? this.nodeOf(all[0]!) : '';
      const loading = loads.get(node);
      if (loading === undefined) return this.load(loads, node, script, numKeys, all);
      await loading.catch(() => {});
      if (call.done) throw GAVE_UP;
      try {
        return await this.evalsha(script.sha, numKeys, all);
      } catch (err) {
        if (!isNoScript(err)) throw err;
      }
    }
    if (call.done) throw GAVE_UP;
    return this.evalSource(script.source, numKeys, all);
  }

  private async load(
    loads: Map<string, Promise<unknown>>,
    node: string,
    script: LuaScript,
    numKeys: number,
    all: readonly string[],
  ): Promise<unknown> {
    const loading = this.evalSource(script.source, numKeys, all);
    loads.set(node, loading);
    try {
      return await loading;
    } finally {
      if (loads.get(node) === loading) loads.delete(node);
    }
  }
}

/** CRC16 (XMODEM) table of Redis Cluster's key slots. */
const CRC16 = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let b = 0; b < 8; b++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  CRC16[i] = crc;
}

/** A key's Redis Cluster slot: CRC16 of its hash tag (or of the whole key) mod 16384. */
export function keySlot(key: string): number {
  let bytes = Buffer.from(key, 'utf8');
  const open = bytes.indexOf(0x7b);
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (let i = 0; i < bytes.length; i++)
    crc = ((crc << 8) & 0xffff) ^ CRC16[((crc >> 8) ^ bytes[i]!) & 0xff]!;
  return crc & 0x3fff;
}

/**
 * The server a cluster client sends a key's call to: the master of its slot in the client's
 * slot map (ioredis and iovalkey: `slots[slot][0]`, "host:port"; node-redis:
 * `getSlotMaster(slot).address`), or the slot itself while the map does not know it.
 */
function clusterNodeOf(client: object, family: 'ioredis' | 'node-redis'): NodeOf {
  return (key) => {
    const slot = keySlot(key);
    try {
      if (family === 'ioredis') {
        const owners = (client as { slots?: unknown }).slots;
        const first = Array.isArray(owners) ? (owners[slot] as unknown[] | undefined)?.[0] : undefined;
        if (typeof first === 'string') return first;
      } else {
        const master = (client as { getSlotMaster: (slot: number) => unknown }).getSlotMaster(slot) as
          | { address?: unknown; host?: unknown; port?: unknown }
          | undefined;
        if (typeof master?.address === 'string') return master.address;
        if (master?.host !== undefined) return `${String(master.host)}:${String(master.port)}`;
      }
    } catch {
      // No slot map yet: fall through.
    }
    return `slot ${slot}`;
  };
}

const STANDALONE: NodeOf = () => '';

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
      cluster ? clusterNodeOf(client, 'node-redis') : STANDALONE,
    );
    return {
      family: 'node-redis',
      cluster,
      call: (script, numKeys, all) => loads.call(script, numKeys, all),
      recover: (script, numKeys, all, call) => loads.recover(script, numKeys, all, call),
    };
  }
  const evalsha = method(client, 'evalsha');
  if (evalsha && evalNode) {
    const cluster = (client as { isCluster?: unknown }).isCluster === true;
    const loads = new ScriptLoads(
      (!cluster && directEvalsha(client)) ||
        ((text, numKeys, all) => evalsha.call(client, text, numKeys, all) as Promise<unknown>),
      (text, numKeys, all) => evalNode.call(client, text, numKeys, all) as Promise<unknown>,
      cluster ? clusterNodeOf(client, 'ioredis') : STANDALONE,
    );
    const first = FirstReady.of(client);
    return {
      family: 'ioredis',
      cluster,
      call: (script, numKeys, all, call) =>
        first === null || first.open
          ? loads.call(script, numKeys, all)
          : first.run(() => loads.call(script, numKeys, all), call),
      recover: (script, numKeys, all, call) => loads.recover(script, numKeys, all, call),
    };
  }
  throw new TypeError(
    'Expected `client` to be an ioredis, iovalkey or node-redis client (or cluster): it has neither `evalsha` (ioredis) nor `evalSha` (node-redis)',
  );
}

/** The `keyPrefix` of an ioredis or iovalkey connection (Redis or Cluster), '' for none or another client. */
function ioKeyPrefix(client: object): string {
  if (typeof (client as { evalsha?: unknown }).evalsha !== 'function') return '';
  const prefix = (client as { options?: { keyPrefix?: unknown } }).options?.keyPrefix;
  return typeof prefix === 'string' ? prefix : '';
}

/** The process warned once about an ioredis Cluster that resends commands (see checkClusterClient). */
let resendWarned = false;

/**
 * Checks the connections of a store. A subscriber with an ioredis `keyPrefix` cannot follow
 * sharded channels: ioredis prefixes SSUBSCRIBE's channels (they are keys to it), while the
 * scripts publish the names valve built: refused. An ioredis or iovalkey Cluster command client:
 * a `keyPrefix` with a hash tag puts every
 * key in the prefix's slot and the wake channel in the id's (the scripts' publish would be
 * cross-slot): refused. A `retryDelayOnFailover` above 0 (ioredis' default is 100) resends a
 * command whose node connection closed before its answer came, though it may have run (an
 * acquire twice, its budget spent twice): warned once per process.
 */
export function checkClients(client: object, cmd: CommandAdapter, subscriber: unknown, mode: string): void {
  if (
    mode === 'sharded' &&
    typeof subscriber === 'object' &&
    subscriber !== null &&
    ioKeyPrefix(subscriber)
  ) {
    throw new TypeError(
      "Expected `subscriber` to have no ioredis `keyPrefix` with sharded pub/sub: ioredis prefixes the channels it SSUBSCRIBEs, not the ones valve's scripts publish to, so wake-ups would never arrive. Use valve's `prefix` option instead, or pubsub: 'classic' in every process",
    );
  }
  if (cmd.family !== 'ioredis' || !cmd.cluster) return;
  const keyPrefix = ioKeyPrefix(client);
  if (/[{}]/.test(keyPrefix)) {
    throw new TypeError(
      `Expected the Cluster's \`keyPrefix\` to contain no '{' or '}', got ${quote(keyPrefix)}: a hash tag in it puts every key in one slot and the wake-up channels in others. Use valve's \`prefix\` option instead`,
    );
  }
  const retry = (client as { options?: { retryDelayOnFailover?: unknown } }).options?.retryDelayOnFailover;
  if (typeof retry === 'number' && retry > 0 && !resendWarned) {
    resendWarned = true;
    process.emitWarning(
      `valve: this ioredis/iovalkey Cluster has retryDelayOnFailover: ${retry} (ioredis' default is 100): when a node ` +
        'connection closes after a script ran and before its answer came, the Cluster sends it again, so an acquire can ' +
        'run twice (its budget spent twice). Pass retryDelayOnFailover: 0; see docs/timeouts-and-reconnection.md.',
      { code: 'VALVE_REDIS_CLUSTER_RESEND' },
    );
  }
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
