/**
 * One acquire call as the Redis store sends it (acquire.lua's header lists the keys and
 * arguments): the parts that stay the same from call to call of a valve (its shape, built once
 * per rules array), the arguments of one call, and the script's reply read back.
 */
import type { StoreRule } from '../../rules/rule.js';
import { inPrevious, recordTtlUs, sinceUs } from '../checks.js';
import type { AcquireRequest, AcquireResult, BlockReason, Lease } from '../store.js';
import type { CallShape } from './acquires.js';
import { replyArray, replyNumber, replyString } from './adapter.js';
import type { IdKeys } from './keys.js';

/** The strings of the small integers (counts and costs of a batch), made once. */
const SMALL = 128;
const SMALL_INTS: readonly string[] = Array.from({ length: SMALL + 1 }, (_, i) => String(i));

/** `n` as a string, without allocating for the small counts and costs of most calls. */
export function small(n: number): string {
  return n <= SMALL ? SMALL_INTS[n]! : String(n);
}

/** What stays the same across a valve's acquire calls (see {@link shapeOf}). */
export interface Shape extends CallShape {
  /** The store that built it: a shape is never used by another store. */
  readonly owner: object;
  readonly id: string;
  readonly record: string | undefined;
  readonly recordTtl: number | undefined;
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

const BLOCKED: readonly (BlockReason | null)[] = [null, 'pause', 'rate', 'concurrency'];

/** Reads acquire.lua's reply (see its header); `call` says what the request asked for. */
export function readAcquire(
  value: unknown,
  call: { readonly leased: boolean; readonly recorded: boolean; readonly turned: boolean },
): AcquireResult {
  const reply = replyArray(value, 'acquire');
  const granted = replyNumber(reply[0], 'acquire');
  const blockedCode = replyNumber(reply[2], 'acquire');
  const pausedUs = replyNumber(reply[3], 'acquire');
  const retryAfter = replyNumber(reply[1], 'acquire') / 1000;
  const blocked = BLOCKED[blockedCode] ?? null;
  const pausedUntil = pausedUs > 0 ? pausedUs / 1000 : null;
  const now = replyNumber(reply[4], 'acquire') / 1000;
  // The ticket held, last when the call took part in the line (a valve group's keys, every
  // call): made with the other fields, not added after them (which costs each answer a
  // second allocation for the properties that do not fit the object).
  if (call.turned && !call.leased) {
    const turnResult: AcquireResult = {
      granted,
      retryAfter,
      blocked,
      pausedUntil,
      now,
      turn: replyNumber(reply[reply.length - 1], 'acquire'),
    };
    if (call.recorded && reply.length - 1 > 6) {
      const held = replyString(reply[6], 'acquire');
      turnResult.recorded = held === '' ? [] : held.split(',');
    }
    return turnResult;
  }
  const result: AcquireResult = { granted, retryAfter, blocked, pausedUntil, now };
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

/**
 * Per rules array (a valve's, stable until its rules change), the shape of its calls: one for
 * the calls that send the rule-set record (the first, then one every quarter of its TTL) and
 * one for the others, so that neither kind rebuilds the other's.
 */
const shapes = new WeakMap<readonly StoreRule[], Shape>();
const recordShapes = new WeakMap<readonly StoreRule[], Shape>();

/** Per rule, its script arguments (kind and two numbers), computed once per rule object. */
const ruleArgsCache = new WeakMap<StoreRule, readonly string[]>();
function argsOf(rule: StoreRule): readonly string[] {
  let args = ruleArgsCache.get(rule);
  if (!args) {
    args =
      rule.algorithm === 'gcra'
        ? ['g', String(rule.emissionUs), String(rule.burst)]
        : [rule.algorithm === 'fixed-window' ? 'w' : 's', String(rule.intervalUs), String(rule.limit)];
    ruleArgsCache.set(rule, args);
  }
  return args;
}

/** Whether `shape` was built by the same store for the same id, lease limit and lease TTL. */
function sameCalls(shape: Shape, owner: object, id: string, leaseLimit: number, leaseTtlUs: number): boolean {
  return (
    shape.owner === owner &&
    shape.id === id &&
    shape.leaseLimit === leaseLimit &&
    shape.leaseTtlUs === leaseTtlUs
  );
}

/**
 * The parts of an acquire call that stay the same from call to call of a valve (its keys, its
 * rules' arguments, the record): built once per rules array and kept beside it while the
 * valve sends the same id, lease and record through the same store. A rule change in progress
 * (`previous`) builds them afresh for each call. `distinct` holds the request's `m` distinct
 * rules, its own `m0` first.
 */
export function shapeOf(
  owner: object,
  keysOf: (id: string) => IdKeys,
  request: AcquireRequest,
  distinct: readonly StoreRule[],
  m0: number,
  m: number,
  leaseTtlUs: number,
): Shape {
  const { id, lease, record, recordTtl, previous } = request;
  const cache = record === undefined ? shapes : recordShapes;
  const cached = previous === undefined ? cache.get(request.rules) : undefined;
  const leaseLimit = lease ? lease.limit : 0;
  if (
    cached !== undefined &&
    sameCalls(cached, owner, id, leaseLimit, leaseTtlUs) &&
    cached.record === record &&
    cached.recordTtl === recordTtl
  ) {
    return cached;
  }
  const tail = [
    record === undefined ? '-' : `=${record}`,
    String(Math.ceil(recordTtlUs(distinct, m0, recordTtl) / 1000)),
  ];
  // The other kind of call (with or without the record) has the same keys and rule arguments.
  const other =
    previous === undefined ? (record === undefined ? recordShapes : shapes).get(request.rules) : undefined;
  let shape: Shape;
  if (other !== undefined && sameCalls(other, owner, id, leaseLimit, leaseTtlUs)) {
    const spec = [...other.head, ...other.ruleArgs, ...tail];
    shape = { ...other, record, recordTtl, tail, spec, specKey: spec.join(' ') };
  } else {
    const keys = keysOf(id);
    const keyList = [keys.pause, keys.leases, keys.fence];
    const ruleArgs: string[] = [];
    for (let r = 0; r < m; r++) {
      const rule = distinct[r]!;
      keyList.push(keys.rulePrefix + rule.digest);
      ruleArgs.push(...argsOf(rule));
    }
    // One line per rule set, by its first rule (as the memory store's IdState.lines).
    keyList.push(keys.rules, m0 > 0 ? `${keys.line}:${distinct[0]!.digest}` : keys.line);
    const head = [String(m), lease ? String(lease.limit) : '0', String(leaseTtlUs)];
    const spec = [...head, ...ruleArgs, ...tail];
    // acquire-many.lua's short form (see its header): no leases, GCRA and fixed-window rules only.
    let short = m > 0 && !lease;
    for (let r = 0; r < m && short; r++) short = distinct[r]!.algorithm !== 'sliding-window';
    const shortKeys = short ? [keys.pause, ...keyList.slice(3, 3 + m), keys.rules] : null;
    shape = {
      owner,
      id,
      record,
      recordTtl,
      leaseLimit,
      leaseTtlUs,
      keys: keyList,
      head,
      ruleArgs,
      tail,
      spec,
      specKey: spec.join(' '),
      shortKeys,
      // With ticket 0 the line's key follows (the last of keyList).
      shortLinedKeys: shortKeys && [...shortKeys, keyList[4 + m]!],
    };
  }
  if (previous === undefined) cache.set(request.rules, shape);
  return shape;
}

/** A source's time (µs) when its conversion is not known to have happened: after any time. */
const NEVER = String(Number.MAX_SAFE_INTEGER);

/**
 * The keys and arguments of one acquire.lua call (the keys first, `shape.keys.length` of them):
 * `clock` is ARGV[1], `nonce` the lease tokens' nonce ('' without a lease); `equal` when every
 * job costs the same (one cost for all), `convert` when the call converts a rule change's
 * state, `ticket` the caller's turn in the line.
 */
export function acquireArgs(
  shape: Shape,
  request: AcquireRequest,
  distinct: readonly StoreRule[],
  m0: number,
  m: number,
  clock: string,
  nonce: string,
  equal: boolean,
  convert: boolean,
  ticket: number | undefined,
): string[] {
  const { costs, count, previous } = request;
  const { keys, head, ruleArgs, tail } = shape;
  const all = new Array<string>(
    keys.length + 6 + ruleArgs.length + (equal ? 1 : 1 + count) + tail.length + 1 + (convert ? 1 + 3 * m : 1),
  );
  let k = 0;
  for (let i = 0; i < keys.length; i++) all[k++] = keys[i]!;
  all[k++] = clock;
  all[k++] = small(count);
  all[k++] = head[0]!;
  all[k++] = head[1]!;
  all[k++] = head[2]!;
  all[k++] = nonce;
  for (let i = 0; i < ruleArgs.length; i++) all[k++] = ruleArgs[i]!;
  if (equal) {
    all[k++] = small(costs[0] as number);
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
      // A source's time from which its state counts every grant (acquire.lua: "" for always).
      const since = sinceUs(distinct[r]!, previous, request.previousSince);
      all[k++] =
        since === Number.NEGATIVE_INFINITY ? '' : since === Number.POSITIVE_INFINITY ? NEVER : String(since);
    }
  } else {
    all[k++] = '';
  }
  return all;
}
