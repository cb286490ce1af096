/**
 * `valve status`: one id's state read at one instant of the store's clock (status.lua, no
 * writes), then units left and waits computed with the stores' own arithmetic (src/rules).
 */

import { windowCount, windowEnd, windowIndex } from '../rules/fixed-window.js';
import { gcraIncrement, gcraNext, gcraWait } from '../rules/gcra.js';
import { type Rule, ruleFromDigest } from '../rules/rule.js';
import { type SlidingState, slidingEnd, slidingExpire, slidingWait } from '../rules/sliding-window.js';
import { checkId } from '../stores/checks.js';
import { detectCommandClient, isNoScript, replyArray, replyString } from '../stores/redis/adapter.js';
import { idKeys } from '../stores/redis/keys.js';
import { STATUS } from '../stores/redis/scripts.generated.js';
import type { Conn } from './connect.js';
import { usageError } from './errors.js';

/** One rule whose state the store holds (or that is recorded for the id). */
export interface RuleStatus {
  /** The rule's digest, as in its state key `<prefix>:{<id>}:r:<digest>`. */
  digest: string;
  /** The rule, read back from the digest (interval in ms). */
  rule: Rule & { interval: number };
  /** E.g. "10 per 1000ms (gcra, burst 1)". */
  label: string;
  /** In the rule set recorded for the id. */
  recorded: boolean;
  /** Units that may start back to back when nothing is spent: burst (GCRA) or limit (windows). */
  capacity: number;
  /** Units that could start now (cost 1 each); null when the state is unreadable. */
  left: number | null;
  /** ms until one more unit is available than now; null when every unit is available. */
  nextUnitIn: number | null;
  /** ms until every unit is available again; null when every unit is available. */
  allBackIn: number | null;
  /** Sliding window: units started in the last second (exact, from its log); null otherwise. */
  recent: number | null;
  /** Fixed window: the current window's start (store-clock epoch ms). */
  windowStart?: number;
  /** Set when the key holds what valve never writes. */
  problem?: string;
}

export interface LeaseStatus {
  token: string;
  /** The fencing number the lease was granted with. */
  fence: number;
  /** Store-clock epoch ms. */
  expiresAt: number;
  /** ms left. */
  ttl: number;
}

export interface IdStatus {
  id: string;
  prefix: string;
  /** The store's clock at the reading, epoch ms. */
  now: number;
  /** The rule set recorded for the id (the last valve to call), or null. */
  recorded: { digests: string[]; until: number } | null;
  rules: RuleStatus[];
  /** Rules with live state that are not recorded: another rule set in use, or a change within its interval. */
  mismatch: { checked: boolean; digests: string[]; note?: string };
  /**
   * The shared pause, or null. `by`: what wrote it (the pause event's source, with the header
   * in parentheses), or null when the pausing process did not say (an older valve, a custom store).
   */
  pause: { until: number; in: number; by: string | null } | null;
  /** Global-concurrency leases held now, earliest expiry first. */
  leases: LeaseStatus[];
  /** The last fencing number handed out, or null. */
  fence: number | null;
  /**
   * Keys of the id that hold what valve never writes (a value of another type, a malformed or
   * impossible time): valve's scripts refuse to use them (VALVE_CORRUPT_STATE) until deleted.
   */
  problems: string[];
  /** True when the store holds nothing for this id. */
  unknown: boolean;
}

/** Beyond this, a pause end is not valve's (it writes at most 365 days ahead; a day of slack). */
const AHEAD_MS = 366 * 86_400_000;

const us = (ms: number) => Math.round(ms * 1000) / 1000;

/** SCAN MATCH pattern: the glob characters of `text` escaped. */
function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/** Digests of every rule state key of the id (one SCAN over the node that owns its slot). */
async function discoverRules(conn: Conn, rulePrefix: string): Promise<string[]> {
  const node = await conn.nodeFor(rulePrefix);
  const pattern = `${globEscape(rulePrefix)}*`;
  const found = new Set<string>();
  let cursor = '0';
  do {
    const reply = replyArray(await node.call(['SCAN', cursor, 'MATCH', pattern, 'COUNT', '1000']), 'SCAN');
    cursor = replyString(reply[0], 'SCAN');
    for (const key of replyArray(reply[1], 'SCAN'))
      found.add(replyString(key, 'SCAN').slice(rulePrefix.length));
  } while (cursor !== '0');
  return [...found];
}

function checkedId(id: string): string {
  try {
    return checkId(id);
  } catch (err) {
    throw usageError((err as Error).message.replace('`id`', '<id>'));
  }
}

/** Reads one id's state. `scan: false` skips the search for unrecorded rules (watch's later ticks). */
export async function readStatus(
  conn: Conn,
  prefix: string,
  rawId: string,
  known: readonly string[] = [],
  scan = true,
): Promise<IdStatus> {
  const id = checkedId(rawId);
  const keys = idKeys(prefix, id);
  const recordRaw = await conn.call(['GET', keys.rules], keys.rules);
  const record = parseRecord(recordRaw == null ? '' : replyString(recordRaw, 'GET'));
  let checked = scan;
  let note: string | undefined;
  let found: string[] = [];
  if (scan) {
    try {
      found = await discoverRules(conn, keys.rulePrefix);
    } catch (err) {
      checked = false;
      note = `not checked: SCAN failed (${(err as Error).message.split('\n')[0]})`;
    }
  }
  const digests: string[] = [];
  for (const d of [...(record?.digests ?? []), ...known, ...found.sort()]) {
    if (!digests.includes(d) && ruleFromDigest(d)) digests.push(d);
  }
  const adapter = detectCommandClient(conn.client);
  const statusKeys = [
    keys.pause,
    keys.leases,
    keys.fence,
    keys.rules,
    keys.pauseBy,
    ...digests.map((d) => keys.rulePrefix + d),
  ];
  const all = [...statusKeys, ...digests.map((d) => d[0]!)];
  // By SHA1; a server that does not have the script yet loads it (adapter.recover).
  const answer = await adapter.call(STATUS, statusKeys.length, all).catch((err: unknown) => {
    if (isNoScript(err)) return adapter.recover(STATUS, statusKeys.length, all);
    throw err;
  });
  const reply = replyArray(answer, 'status');
  const nowUs = Number(replyString(reply[0], 'status'));
  const now = nowUs / 1000;
  const pauseRaw = replyString(reply[1], 'status');
  const fenceRaw = replyString(reply[2], 'status');
  // The record as the script read it (the same instant as the states).
  const recorded = parseRecord(replyString(reply[3], 'status'), nowUs);
  const leaseReply = reply[4];
  const states = replyArray(reply[5], 'status');
  const pauseBy = replyString(reply[6], 'status');

  const problems: string[] = [];
  const corrupt = (key: string, raw: string, expected: string) =>
    problems.push(
      `${key} holds ${raw === '!type' ? 'a value of another type' : JSON.stringify(raw.slice(0, 64))}, not ${expected} (valve never writes that; delete the key)`,
    );
  let pauseUntil = /^\d+(\.\d+)?$/.test(pauseRaw) ? Number(pauseRaw) : null;
  if (pauseRaw !== '' && (pauseUntil === null || pauseUntil > now + AHEAD_MS)) {
    corrupt(keys.pause, pauseRaw, 'a pause end in epoch ms at most 365 days ahead');
    pauseUntil = null;
  }
  if (!Array.isArray(leaseReply) && replyString(leaseReply, 'status') === '!type')
    corrupt(keys.leases, '!type', 'a sorted set of leases');
  if (fenceRaw !== '' && !/^\d+$/.test(fenceRaw)) corrupt(keys.fence, fenceRaw, 'a fencing number');
  const leases: LeaseStatus[] = [];
  if (Array.isArray(leaseReply)) {
    for (let i = 0; i + 1 < leaseReply.length; i += 2) {
      const token = replyString(leaseReply[i], 'status');
      const expiresAt = Number(replyString(leaseReply[i + 1], 'status'));
      if (!(expiresAt > now)) continue; // expired, not yet purged
      leases.push({
        token,
        fence: Number(token.slice(token.lastIndexOf('.') + 1)),
        expiresAt,
        ttl: us(expiresAt - now),
      });
    }
  }
  const inRecord = new Set(recorded?.digests ?? []);
  const rules = digests.map((digest, r) => ruleStatus(digest, states[r], nowUs, inRecord.has(digest)));
  const live = rules.filter((r) => !r.recorded && (r.nextUnitIn !== null || r.problem !== undefined));
  const unknown =
    recorded === null &&
    live.length === 0 &&
    found.length === 0 &&
    pauseRaw === '' &&
    fenceRaw === '' &&
    leases.length === 0 &&
    problems.length === 0;
  const mismatch: IdStatus['mismatch'] = {
    checked,
    digests: recorded === null ? [] : live.map((r) => r.digest),
  };
  if (note) mismatch.note = note;
  return {
    id,
    prefix,
    now,
    recorded,
    // Recorded rules, and others only while their state is live.
    rules: rules.filter((r) => r.recorded || recorded === null || r.nextUnitIn !== null || r.problem),
    mismatch,
    pause:
      pauseUntil !== null && pauseUntil > now
        ? {
            until: pauseUntil,
            in: us(pauseUntil - now),
            by: pauseBy === '' || pauseBy === '!type' ? null : pauseBy,
          }
        : null,
    leases: leases.sort((a, b) => a.expiresAt - b.expiresAt),
    fence: /^\d+$/.test(fenceRaw) ? Number(fenceRaw) : null,
    problems,
    unknown,
  };
}

/** "<until µs>:<digests>" → the record, or null when missing or expired (at `nowUs`). */
function parseRecord(raw: string, nowUs?: number): { digests: string[]; until: number } | null {
  const m = /^(\d+):([gws0-9.,]*)$/.exec(raw);
  if (!m) return null;
  const untilUs = Number(m[1]);
  if (nowUs !== undefined && untilUs <= nowUs) return null;
  return { digests: m[2] === '' ? [] : m[2]!.split(','), until: untilUs / 1000 };
}

function ruleStatus(digest: string, state: unknown, nowUs: number, recorded: boolean): RuleStatus {
  const rule = ruleFromDigest(digest)!;
  const limit = rule.limit;
  const intervalUs = Math.round(rule.interval * 1000);
  const capacity = rule.algorithm === 'gcra' ? rule.burst! : limit;
  const base = {
    digest,
    rule,
    label:
      rule.algorithm === 'gcra'
        ? `${limit} per ${rule.interval}ms (gcra, burst ${rule.burst})`
        : `${limit} per ${rule.interval}ms (${rule.algorithm})`,
    recorded,
    capacity,
  };
  const bad = (what: string): RuleStatus => ({
    ...base,
    left: null,
    nextUnitIn: null,
    allBackIn: null,
    recent: null,
    problem: `unreadable state (${what}): valve never writes that`,
  });
  const ms = (waitUs: number) => us(waitUs / 1000);
  if (state === '!type') return bad('a key of another type');
  if (rule.algorithm === 'gcra') {
    const raw = replyString(state, 'status');
    const emissionUs = Math.ceil(intervalUs / limit);
    const capUs = capacity * emissionUs;
    if (raw !== '' && !/^\d+$/.test(raw)) return bad(JSON.stringify(raw.slice(0, 40)));
    const tat = raw === '' ? nowUs : Math.max(Number(raw), nowUs);
    // Job j (cost 1 each) fits while tat + j × T − now ≤ capacity (gcraNext / gcraWait).
    let left = Math.floor((capUs - (tat - nowUs)) / emissionUs);
    left = Math.max(0, Math.min(capacity, left));
    while (
      left > 0 &&
      gcraWait(gcraNext(tat, nowUs, gcraIncrement(left, emissionUs)), nowUs, capacity, emissionUs) > 0
    ) {
      left--;
    }
    if (left >= capacity) return { ...base, left, nextUnitIn: null, allBackIn: null, recent: null };
    const next = gcraWait(
      gcraNext(tat, nowUs, gcraIncrement(left + 1, emissionUs)),
      nowUs,
      capacity,
      emissionUs,
    );
    return { ...base, left, nextUnitIn: ms(next), allBackIn: ms(tat - nowUs), recent: null };
  }
  if (rule.algorithm === 'fixed-window') {
    const raw = replyString(state, 'status');
    const k = windowIndex(nowUs, intervalUs);
    let count = 0;
    if (raw !== '') {
      const m = /^(\d+):(\d+(?:\.\d+)?)$/.exec(raw);
      if (!m) return bad(JSON.stringify(raw.slice(0, 40)));
      count = windowCount(Number(m[1]), Number(m[2]), k);
    }
    const left = Math.max(0, Math.floor(limit - count));
    const windowStart = (k * intervalUs) / 1000;
    if (count <= 0) return { ...base, left, nextUnitIn: null, allBackIn: null, recent: null, windowStart };
    const end = ms(windowEnd(k, intervalUs) - nowUs);
    return { ...base, left, nextUnitIn: end, allBackIn: end, recent: null, windowStart };
  }
  // Sliding window: [sum, t1, c1, t2, c2, ...], oldest first.
  const list = Array.isArray(state) ? state.map((v) => Number(replyString(v, 'status'))) : [];
  if (list.some((n) => !Number.isFinite(n))) return bad('a malformed log');
  const s: SlidingState = { log: list.slice(1), head: 0, sum: 0 };
  for (let i = 1; i < s.log.length; i += 2) s.sum += s.log[i]!;
  slidingExpire(s, nowUs, intervalUs);
  const left = Math.max(0, Math.floor(limit - s.sum));
  let recent = 0;
  for (let i = s.head; i < s.log.length; i += 2) if (s.log[i]! > nowUs - 1_000_000) recent += s.log[i + 1]!;
  if (s.sum <= 0) return { ...base, left, nextUnitIn: null, allBackIn: null, recent };
  // One more unit is available once the oldest live entry has left.
  const need = Math.max(1, s.sum + 1 - limit);
  return {
    ...base,
    left,
    nextUnitIn: ms(slidingWait(s, need, nowUs, intervalUs)),
    allBackIn: ms(slidingEnd(s, intervalUs) - nowUs),
    recent,
  };
}
