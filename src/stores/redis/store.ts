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
  emptyRules,
  MAX_BATCH,
} from '../checks.js';
import {
  ACQUIRE_WITH,
  type AcquireRequest,
  type AcquireResult,
  type AcquireWith,
  type Store,
  type WakeEvent,
  type WakeStatus,
  type WindowTicket,
} from '../store.js';
import { checkWindowInt } from '../window-record.js';
import { acquireArgs, readAcquire, shapeOf, small } from './acquire-call.js';
import { Acquires } from './acquires.js';
import {
  type CommandAdapter,
  checkClients,
  detectCommandClient,
  replyArray,
  replyNumber,
} from './adapter.js';
import { Deadlines } from './deadlines.js';
import { type IdKeys, idKeys, validatePrefix } from './keys.js';
import { type LuaScript, PAUSE, PROBE, RELEASE, RENEW, RESUME, WINDOW } from './scripts.generated.js';
import { type PubSubMode, type WakeHub, wakeHub } from './subscriber.js';

/** Options of {@link redisStore}. */
export interface RedisStoreOptions {
  /**
   * The command connection: an ioredis or iovalkey `Redis` or `Cluster`, or a node-redis
   * client or cluster (connected; an ioredis or iovalkey client still making its first
   * connection is waited for, within `timeout`). valve never closes it.
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
  /**
   * Scratch for acquire()'s distinct rules, emptied slot by slot before the call awaits (an
   * array's length set to 0 drops its storage in V8, which every call would then allocate).
   */
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
    // An acquire answered after its deadline: its leases are given back instead of held for their TTL.
    this.deadlines.releaseLate = (id, tokens) => {
      this.release(id, tokens).catch(() => {});
    };
    const mode = options.pubsub === undefined ? (this.cmd.cluster ? 'sharded' : 'classic') : options.pubsub;
    if (mode !== 'classic' && mode !== 'sharded') {
      throw new TypeError(`Expected \`pubsub\` to be 'classic' or 'sharded', got ${describe(mode)}`);
    }
    this.publish = mode === 'sharded' ? 's' : 'p';
    checkClients(options.client, this.cmd, options.subscriber, mode);
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
    if (
      clock !== undefined &&
      (typeof clock !== 'object' || clock === null || typeof clock.now !== 'function')
    ) {
      throw new TypeError(`Expected \`unsafeTestClock\` to be a Clock with now(), got ${describe(clock)}`);
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

  /** keysOf, bound once (shapeOf calls it when it builds a shape). */
  private readonly keysOfFn = (id: string): IdKeys => this.keysOf(id);

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

  acquire(request: AcquireRequest): Promise<AcquireResult> {
    return new Promise((resolve, reject) => this.sendAcquire(request, resolve, reject));
  }

  /** acquire() without its promise (see ACQUIRE_WITH): a bad request fails through `onFail`, later. */
  acquireWith(
    request: AcquireRequest,
    onAnswer: (result: AcquireResult) => void,
    onFail: (err: unknown) => void,
  ): void {
    try {
      this.sendAcquire(request, onAnswer, onFail);
    } catch (err) {
      // As a rejected acquire() promise would: in a microtask.
      queueMicrotask(() => onFail(err));
    }
  }

  /** acquire(): checks the request (throws) and sends the call, answered through the callbacks. */
  private sendAcquire(
    request: AcquireRequest,
    onAnswer: (result: AcquireResult) => void,
    onFail: (err: unknown) => void,
  ): void {
    const distinct = this.distinct;
    const m0 = checkRequest(request, distinct);
    // A rule change's previous rules (checked and spent too) follow the request's own.
    const m = checkChange(request, distinct, m0);
    const { costs, count, lease, previous } = request;
    const leaseTtlUs = checkLease(lease);
    const shape = shapeOf(this, this.keysOfFn, request, distinct, m0, m, leaseTtlUs);
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
      emptyRules(distinct, m);
      this.acquires.sendShaped(
        request.id,
        shape,
        small(count),
        lease ? `${this.nonceBase}${(this.nonceSeq++).toString(36)}` : '',
        small(first),
        ticket === undefined ? '' : small(ticket),
        lease !== undefined,
        request.record !== undefined,
        ticket !== undefined,
        onAnswer,
        onFail,
      );
      return;
    }
    const all = acquireArgs(
      shape,
      request,
      distinct,
      m0,
      m,
      this.clockArg(),
      lease ? `${this.nonceBase}${(this.nonceSeq++).toString(36)}` : '',
      equal,
      convert,
      ticket,
    );
    emptyRules(distinct, m);
    this.acquires.send(
      request.id,
      shape.keys.length,
      all,
      lease !== undefined,
      request.record !== undefined,
      ticket !== undefined,
      onAnswer,
      onFail,
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

// acquire()'s callback form, found through acquire itself (see ACQUIRE_WITH).
Object.defineProperty(RedisStore.prototype.acquire, ACQUIRE_WITH, {
  value: RedisStore.prototype.acquireWith satisfies AcquireWith,
});

/**
 * A store shared by every process connected to the same Redis or Valkey (standalone or
 * cluster) with the same key prefix. See docs/redis.md.
 */
export function redisStore(options: RedisStoreOptions): Store {
  return new RedisStore(options);
}
