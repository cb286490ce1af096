import { randomBytes } from 'node:crypto';
import type { Clock } from '../../clock.js';
import { describe } from '../../duration.js';
import { RedisStoreTimeoutError } from '../../errors.js';
import type { StoreRule } from '../../rules/rule.js';
import {
  checkChange,
  checkId,
  checkKnownKeys,
  checkLease,
  checkMs,
  checkRequest,
  checkTokens,
  checkTurn,
  inPrevious,
  MAX_BATCH,
  recordTtlUs,
} from '../checks.js';
import type {
  AcquireRequest,
  AcquireResult,
  BlockReason,
  Lease,
  Store,
  WakeEvent,
  WakeStatus,
  WindowTicket,
} from '../store.js';
import { checkWindowInt } from '../window-record.js';
import { Acquires, type CallShape } from './acquires.js';
import { type CommandAdapter, detectCommandClient, replyArray, replyNumber, replyString } from './adapter.js';
import { Deadlines } from './deadlines.js';
import { type IdKeys, idKeys, validatePrefix } from './keys.js';
import { type LuaScript, PAUSE, PROBE, RELEASE, RENEW, RESUME, WINDOW } from './scripts.generated.js';
import { type PubSubMode, type WakeHub, wakeHub } from './subscriber.js';

/** Options of {@link redisStore}. */
export interface RedisStoreOptions {
  /**
   * The command connection: an ioredis or iovalkey `Redis` or `Cluster`, or a node-redis
   * client or cluster (connected). valve never closes it.
   */
  client: object;
  /**
   * Optional second connection for pub/sub wake-ups (pause, resume, slot release), e.g.
   * `client.duplicate()`. Without it everything still works, other processes' changes are
   * only noticed later. On a cluster, pass an ioredis Cluster created with
   * `shardedSubscribers: true`, or a node-redis cluster.
   */
  subscriber?: object | undefined;
  /** Key prefix; two stores share state only with the same server and prefix. Default 'valve'. */
  prefix?: string | undefined;
  /**
   * valve's own deadline per store call, in ms (default 2000). A call past it rejects; the
   * scheduler treats that as a store failure. The command may still execute on the server.
   */
  timeout?: number | undefined;
  /**
   * Pub/sub flavour for wake-ups: 'classic' (PUBLISH/SUBSCRIBE) or 'sharded'
   * (SPUBLISH/SSUBSCRIBE, Redis/Valkey 7+). Default: 'sharded' on a cluster client,
   * 'classic' otherwise. Every process sharing an id must use the same flavour.
   */
  pubsub?: PubSubMode | undefined;
  /**
   * TEST ONLY. Makes the scripts take the time from this clock instead of Redis `TIME`, so a
   * test can run the Lua on a virtual clock. Never set it in production: processes with
   * different clocks would break every bound.
   */
  unsafeTestClock?: Clock | undefined;
}

const OPTION_NAMES = ['client', 'subscriber', 'prefix', 'timeout', 'pubsub', 'unsafeTestClock'];
/** How many ids keep their key names cached (about 0.4 KB each); the cache empties when full. */
const KEYS_CACHED = 1000;

/** The longest `timeout`: Node runs a longer timer after 1 ms. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

function checkTimeout(value: unknown): number {
  if (value === undefined) return 2000;
  if (typeof value !== 'number') {
    throw new TypeError(`Expected \`timeout\` to be a number of milliseconds, got ${describe(value)}`);
  }
  if (!(value > 0 && value <= MAX_TIMEOUT_MS)) {
    throw new RangeError(
      `Expected \`timeout\` to be a positive number of milliseconds up to ${MAX_TIMEOUT_MS} (about 24.8 days), got ${String(value)}`,
    );
  }
  return value;
}

/** The strings of the small integers (counts and costs of a batch), made once. */
const SMALL = 128;
const SMALL_INTS: readonly string[] = Array.from({ length: SMALL + 1 }, (_, i) => String(i));

/** What stays the same across a valve's acquire calls (see RedisStore.shapeOf). */
interface Shape extends CallShape {
  readonly store: RedisStore;
  readonly id: string;
  readonly record: string | undefined;
  readonly leaseLimit: number;
  readonly leaseTtlUs: number;
  /** Every key of the call: pause, leases, fence, one per rule, the rule-set record, the line. */
  readonly keys: readonly string[];
  /** ARGV[3..5]: the number of rules, the lease limit and the lease TTL. */
  readonly head: readonly string[];
  /** Three arguments per rule. */
  readonly ruleArgs: readonly string[];
  /** The record argument and its TTL. */
  readonly tail: readonly string[];
}

/** Reads acquire.lua's reply (see its header); `call` says what the request asked for. */
function readAcquire(
  value: unknown,
  call: { readonly leased: boolean; readonly recorded: boolean; readonly turned: boolean },
): AcquireResult {
  const reply = replyArray(value, 'acquire');
  const granted = replyNumber(reply[0], 'acquire');
  const blockedCode = replyNumber(reply[2], 'acquire');
  const pausedUs = replyNumber(reply[3], 'acquire');
  const result: AcquireResult = {
    granted,
    retryAfter: replyNumber(reply[1], 'acquire') / 1000,
    blocked: BLOCKED[blockedCode] ?? null,
    pausedUntil: pausedUs > 0 ? pausedUs / 1000 : null,
    now: replyNumber(reply[4], 'acquire') / 1000,
  };
  if (call.leased) {
    const expiresAt = replyNumber(reply[5], 'acquire') / 1000;
    const leases: Lease[] = [];
    for (let i = 0; i < granted; i++) {
      leases.push({
        token: replyString(reply[6 + 2 * i], 'acquire'),
        fence: replyNumber(reply[7 + 2 * i], 'acquire'),
        expiresAt,
      });
    }
    result.leases = leases;
  }
  const at = call.leased ? 6 + 2 * granted : 6;
  // The ticket held, last when the call took part in the line; `recorded` before it.
  const end = call.turned ? reply.length - 1 : reply.length;
  if (call.turned) result.turn = replyNumber(reply[end], 'acquire');
  if (call.recorded && end > at) {
    const held = replyString(reply[at], 'acquire');
    result.recorded = held === '' ? [] : held.split(',');
  }
  return result;
}

/** Per rules array (a valve's, stable until its rules change), the shape of its calls. */
const shapes = new WeakMap<readonly StoreRule[], Shape>();

const BLOCKED: readonly (BlockReason | null)[] = [null, 'pause', 'rate', 'concurrency'];

/** Per rule, its script arguments (kind and two numbers), computed once per rule object. */
const ruleArgs = new WeakMap<StoreRule, readonly string[]>();
function argsOf(rule: StoreRule): readonly string[] {
  let args = ruleArgs.get(rule);
  if (!args) {
    args =
      rule.algorithm === 'gcra'
        ? ['g', String(rule.emissionUs), String(rule.burst)]
        : [rule.algorithm === 'fixed-window' ? 'w' : 's', String(rule.intervalUs), String(rule.limit)];
    ruleArgs.set(rule, args);
  }
  return args;
}

class RedisStore implements Store {
  private readonly cmd: CommandAdapter;
  private readonly prefix: string;
  private readonly timeout: number;
  /** 'p' PUBLISH or 's' SPUBLISH, passed to the scripts. */
  private readonly publish: string;
  private readonly hub: WakeHub | undefined;
  private readonly testClock: Clock | undefined;
  /** Keys of the ids used lately (at most KEYS_CACHED: a store used by many throwaway ids keeps no more). */
  private readonly keys = new Map<string, IdKeys>();
  /** Random per store instance; with a counter it makes each call's lease tokens unique. */
  private readonly nonceBase = randomBytes(6).toString('hex');
  private nonceSeq = 0;
  /** Scratch for acquire()'s distinct rules, emptied before the call awaits. */
  private readonly distinct: StoreRule[] = [];
  /** valve's deadline on every call, one timer for all. */
  private readonly deadlines: Deadlines;
  /** Acquire calls: in order, bounded in flight, several ids per script call when standalone. */
  private readonly acquires: Acquires;

  constructor(options: RedisStoreOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new TypeError('Expected redisStore() options to be an object like { client }');
    }
    checkKnownKeys(options, OPTION_NAMES, 'redisStore()');
    this.cmd = detectCommandClient(options.client);
    this.prefix = validatePrefix(options.prefix === undefined ? 'valve' : options.prefix);
    this.timeout = checkTimeout(options.timeout);
    this.deadlines = new Deadlines(
      this.cmd,
      this.timeout,
      (script, id) =>
        new RedisStoreTimeoutError(
          `valve: Redis ${script} for id ${JSON.stringify(id)} did not answer within ${this.timeout} ms ` +
            '(the command may still execute on the server)',
        ),
    );
    this.acquires = new Acquires(
      this.deadlines,
      !this.cmd.cluster,
      this.timeout,
      () => this.clockArg(),
      readAcquire,
      (id, sent) =>
        new RedisStoreTimeoutError(
          sent
            ? `valve: Redis acquire for id ${JSON.stringify(id)} did not answer within ${this.timeout} ms ` +
                '(the command may still execute on the server)'
            : `valve: Redis acquire for id ${JSON.stringify(id)} was not sent: it waited ${this.timeout} ms ` +
                'behind calls the server did not answer',
        ),
    );
    const mode = options.pubsub ?? (this.cmd.cluster ? 'sharded' : 'classic');
    if (mode !== 'classic' && mode !== 'sharded') {
      throw new TypeError(`Expected \`pubsub\` to be 'classic' or 'sharded', got ${String(mode)}`);
    }
    this.publish = mode === 'sharded' ? 's' : 'p';
    if (options.subscriber !== undefined) {
      if (typeof options.subscriber !== 'object' || options.subscriber === null) {
        throw new TypeError('Expected `subscriber` to be a Redis connection');
      }
      if (options.subscriber === options.client && !this.cmd.cluster) {
        throw new TypeError(
          'Expected `subscriber` to be a second connection (e.g. client.duplicate()): a connection that subscribes cannot run the scripts',
        );
      }
      const hub = wakeHub(options.subscriber, mode);
      this.hub = hub;
      if (!hub.supported && !hub.warned) {
        hub.warned = true;
        // A subscriber that cannot follow sharded channels (iovalkey Cluster, or an ioredis
        // Cluster without shardedSubscribers) would be ignored silently: say so once.
        process.emitWarning(
          'valve: this subscriber cannot subscribe to sharded channels (iovalkey Cluster, or an ioredis Cluster ' +
            "without shardedSubscribers: true), so wake-ups are off. Pass pubsub: 'classic' in every process, or " +
            'an ioredis Cluster with shardedSubscribers: true. See docs/redis.md.',
          { code: 'VALVE_REDIS_NO_SHARDED_SUBSCRIBER' },
        );
      }
      if (hub.supported) {
        this.subscribe = (id, onWake, onStatus) => {
          if (typeof onWake !== 'function') {
            throw new TypeError(`Expected \`onWake\` to be a function, got ${describe(onWake)}`);
          }
          if (onStatus !== undefined && typeof onStatus !== 'function') {
            throw new TypeError(`Expected \`onStatus\` to be a function, got ${describe(onStatus)}`);
          }
          const keys = this.keysOf(id);
          const probe = (message: string) =>
            this.run(PROBE, id, 1, [keys.pause, keys.wake, this.publish, message]);
          return hub.subscribe(keys.wake, onWake, probe, onStatus);
        };
        this.listening = (id) => hub.listening(this.keysOf(id).wake);
      }
    }
    const clock = options.unsafeTestClock;
    if (clock !== undefined && (typeof clock !== 'object' || typeof clock.now !== 'function')) {
      throw new TypeError('Expected `unsafeTestClock` to be a Clock');
    }
    this.testClock = clock;
  }

  /**
   * Present only with a subscriber that can deliver wake-ups in this store's pub/sub flavour
   * (a store without one has no subscribe(), like a Store that cannot notify).
   */
  declare subscribe?: (
    id: string,
    onWake: (event: WakeEvent) => void,
    onStatus?: (status: WakeStatus) => void,
  ) => () => void;

  /** With a subscriber: whether the id's wake-ups are confirmed (see Store.listening). */
  declare listening?: (id: string) => boolean;

  get notifies(): boolean {
    return this.hub?.live ?? false;
  }

  private keysOf(id: string): IdKeys {
    let keys = this.keys.get(id);
    if (!keys) {
      keys = idKeys(this.prefix, checkId(id));
      if (this.keys.size >= KEYS_CACHED) this.keys.clear();
      this.keys.set(id, keys);
    }
    return keys;
  }

  /** The test clock's last reading in µs: like the memory store's, it never goes backwards. */
  private lastTestUs = 0;

  /** ARGV[1] of the time-taking scripts: '' (Redis TIME) unless a test clock is set. */
  private clockArg(): string {
    if (!this.testClock) return '';
    const us = Math.round(this.testClock.now() * 1000);
    if (us > this.lastTestUs) this.lastTestUs = us;
    return String(this.lastTestUs);
  }

  /** Runs a script under valve's deadline: `all` is its keys (the first `numKeys`), then its arguments. */
  private run(script: LuaScript, id: string, numKeys: number, all: readonly string[]): Promise<unknown> {
    return this.deadlines.send(script, id, numKeys, all);
  }

  /**
   * The parts of an acquire call that stay the same from call to call of a valve (its keys, its
   * rules' arguments, the record): built once per rules array and kept beside it while the
   * valve sends the same id, lease and record. A rule change in progress (`previous`) builds
   * them afresh for each call.
   */
  private shapeOf(
    request: AcquireRequest,
    distinct: readonly StoreRule[],
    m0: number,
    m: number,
    leaseTtlUs: number,
  ): Shape {
    const { id, lease, record, previous } = request;
    const cached = previous === undefined ? shapes.get(request.rules) : undefined;
    if (
      cached !== undefined &&
      cached.store === this &&
      cached.id === id &&
      cached.record === record &&
      cached.leaseLimit === (lease ? lease.limit : 0) &&
      cached.leaseTtlUs === leaseTtlUs
    ) {
      return cached;
    }
    const keys = this.keysOf(id);
    const keyList = [keys.pause, keys.leases, keys.fence];
    const ruleArgs: string[] = [];
    for (let r = 0; r < m; r++) {
      const rule = distinct[r]!;
      keyList.push(keys.rulePrefix + rule.digest);
      ruleArgs.push(...argsOf(rule));
    }
    keyList.push(keys.rules, keys.line);
    const head = [String(m), lease ? String(lease.limit) : '0', String(leaseTtlUs)];
    const tail = [
      record === undefined ? '-' : `=${record}`,
      String(Math.ceil(recordTtlUs(distinct, m0) / 1000)),
    ];
    const spec = [...head, ...ruleArgs, ...tail];
    const shape: Shape = {
      store: this,
      id,
      record,
      leaseLimit: lease ? lease.limit : 0,
      leaseTtlUs,
      keys: keyList,
      head,
      ruleArgs,
      tail,
      spec,
      specKey: spec.join(' '),
    };
    if (previous === undefined) shapes.set(request.rules, shape);
    return shape;
  }

  acquire(request: AcquireRequest): Promise<AcquireResult> {
    try {
      return this.sendAcquire(request);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** acquire(): checks the request (throws) and sends the call. */
  private sendAcquire(request: AcquireRequest): Promise<AcquireResult> {
    const distinct = this.distinct;
    const m0 = checkRequest(request, distinct);
    // A rule change's previous rules (checked and spent too) follow the request's own.
    const m = checkChange(request, distinct, m0);
    const { costs, count, lease, previous } = request;
    const leaseTtlUs = checkLease(lease);
    const shape = this.shapeOf(request, distinct, m0, m, leaseTtlUs);
    // Equal costs (the common case) travel as one cost for all `count` jobs, which the script
    // grants arithmetically; otherwise "" and then each job's cost.
    const first = costs[0] as number;
    let equal = true;
    for (let i = 1; i < count; i++) {
      if (costs[i] !== first) {
        equal = false;
        break;
      }
    }
    const convert = request.convert === true && previous !== undefined;
    const ticket = checkTurn(request.turn);
    if (equal && !convert && this.acquires.many) {
      // Jobs of one cost, nothing converted: it may go with other ids' calls (acquires.ts).
      distinct.length = 0;
      return this.acquires.sendShaped(
        request.id,
        shape,
        count <= SMALL ? SMALL_INTS[count]! : String(count),
        lease ? `${this.nonceBase}${(this.nonceSeq++).toString(36)}` : '',
        first <= SMALL ? SMALL_INTS[first]! : String(first),
        ticket === undefined ? '' : String(ticket),
        lease !== undefined,
        request.record !== undefined,
        ticket !== undefined,
      );
    }
    const { keys, head, ruleArgs, tail } = shape;
    const all = new Array<string>(
      keys.length +
        6 +
        ruleArgs.length +
        (equal ? 1 : 1 + count) +
        tail.length +
        1 +
        (convert ? 1 + 2 * m : 1),
    );
    let k = 0;
    for (let i = 0; i < keys.length; i++) all[k++] = keys[i]!;
    all[k++] = this.clockArg();
    all[k++] = count <= SMALL ? SMALL_INTS[count]! : String(count);
    all[k++] = head[0]!;
    all[k++] = head[1]!;
    all[k++] = head[2]!;
    all[k++] = lease ? `${this.nonceBase}${(this.nonceSeq++).toString(36)}` : '';
    for (let i = 0; i < ruleArgs.length; i++) all[k++] = ruleArgs[i]!;
    if (equal) {
      all[k++] = first <= SMALL ? SMALL_INTS[first]! : String(first);
    } else {
      all[k++] = '';
      for (let i = 0; i < count; i++) all[k++] = String(costs[i]);
    }
    // The tail: the rule-set record, and a rule change's conversion (see acquire.lua).
    all[k++] = tail[0]!;
    all[k++] = tail[1]!;
    all[k++] = ticket === undefined ? '' : String(ticket);
    if (convert) {
      let roles = '';
      for (let r = 0; r < m; r++) roles += r >= m0 ? 'o' : inPrevious(distinct[r]!, previous) ? 'b' : 'n';
      all[k++] = roles;
      for (let r = 0; r < m; r++) {
        all[k++] = String(distinct[r]!.intervalUs);
        all[k++] = String(distinct[r]!.limit);
      }
    } else {
      all[k++] = '';
    }
    distinct.length = 0;
    return this.acquires.send(
      request.id,
      keys.length,
      all,
      lease !== undefined,
      request.record !== undefined,
      ticket !== undefined,
    );
  }

  async windowSend(id: string, probeTtl: number): Promise<WindowTicket> {
    const keys = this.keysOf(id);
    const us = checkMs(probeTtl, 'probeTtl', true);
    const reply = replyArray(
      await this.run(WINDOW, id, 1, [keys.window, this.clockArg(), 's', String(us)]),
      'window',
    );
    return {
      seq: replyNumber(reply[0], 'window'),
      wait: replyNumber(reply[1], 'window') / 1000,
      probe: replyNumber(reply[2], 'window') === 1,
    };
  }

  async windowReport(id: string, seq: number, remaining: number, resetMs: number): Promise<number> {
    const keys = this.keysOf(id);
    checkWindowInt(seq, 'seq', 0);
    checkWindowInt(remaining, 'remaining', -1);
    const us = checkMs(resetMs, 'resetMs', true);
    const reply = replyArray(
      await this.run(WINDOW, id, 1, [
        keys.window,
        this.clockArg(),
        'r',
        String(seq),
        String(remaining),
        String(us),
      ]),
      'window',
    );
    return replyNumber(reply[0], 'window') / 1000;
  }

  async pause(id: string, ms: number, by?: string): Promise<number> {
    const keys = this.keysOf(id);
    const us = checkMs(ms, 'ms', true);
    if (by !== undefined && typeof by !== 'string') {
      throw new TypeError(`Expected \`by\` to be a string, got ${describe(by)}`);
    }
    const reply = replyArray(
      await this.run(PAUSE, id, 2, [
        keys.pause,
        keys.pauseBy,
        this.clockArg(),
        String(us),
        keys.wake,
        this.publish,
        by === undefined ? '' : by.slice(0, 200),
      ]),
      'pause',
    );
    return replyNumber(reply[0], 'pause') / 1000;
  }

  async resume(id: string): Promise<void> {
    const keys = this.keysOf(id);
    await this.run(RESUME, id, 2, [keys.pause, keys.pauseBy, keys.wake, this.publish]);
  }

  async renew(id: string, tokens: readonly string[], ttl: number): Promise<boolean[]> {
    const keys = this.keysOf(id);
    checkTokens(tokens);
    const us = checkMs(ttl, 'ttl', false);
    if (tokens.length === 0) return [];
    // At most MAX_BATCH tokens per script call: node-redis spreads a call's arguments, which
    // overflows the stack somewhere above 100 000. Each token's renewal stands alone.
    const calls: Promise<unknown>[] = [];
    for (let from = 0; from < tokens.length; from += MAX_BATCH) {
      const all = [keys.leases, keys.fence, this.clockArg(), String(us)];
      for (let i = from; i < tokens.length && i < from + MAX_BATCH; i++) all.push(tokens[i]!);
      calls.push(this.run(RENEW, id, 2, all));
    }
    const replies = await Promise.all(calls);
    const held = new Array<boolean>(tokens.length);
    for (let i = 0; i < tokens.length; i++) {
      const reply = replyArray(replies[Math.floor(i / MAX_BATCH)], 'renew');
      held[i] = replyNumber(reply[2 + (i % MAX_BATCH)], 'renew') === 1;
    }
    return held;
  }

  async release(id: string, tokens: readonly string[]): Promise<void> {
    const keys = this.keysOf(id);
    checkTokens(tokens);
    const calls: Promise<unknown>[] = [];
    for (let from = 0; from < tokens.length; from += MAX_BATCH) {
      const all = [keys.leases, keys.wake, this.publish];
      for (let i = from; i < tokens.length && i < from + MAX_BATCH; i++) all.push(tokens[i]!);
      calls.push(this.run(RELEASE, id, 1, all));
    }
    await Promise.all(calls);
  }
}

/**
 * A store shared by every process connected to the same Redis or Valkey (standalone or
 * cluster) with the same key prefix. See docs/redis.md.
 */
export function redisStore(options: RedisStoreOptions): Store {
  return new RedisStore(options);
}
