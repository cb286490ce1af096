/**
 * `valve status`: one id's state read at one instant of the store's clock (status.lua, no
 * writes), then units left and waits computed with the stores' own arithmetic (src/rules).
 */

import { ruleFromDigest } from '../rules/rule.js';
import { checkId } from '../stores/checks.js';
import { isNoScript, replyArray, replyString } from '../stores/redis/adapter.js';
import { idKeys } from '../stores/redis/keys.js';
import { STATUS } from '../stores/redis/scripts.generated.js';
import type { Conn } from './connect.js';
import { usageError } from './errors.js';
import {
  AHEAD_US,
  EMPTY,
  type LineStatus,
  lineStatus,
  type RuleStatus,
  ruleStatus,
  us,
  type WindowStatus,
  windowStatus,
} from './rule-status.js';

export type { LineStatus, RuleStatus, WindowStatus };

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
  /** The application client's keyPrefix (--key-prefix) before every key read, '' for none. */
  keyPrefix: string;
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
  /** The fleet window wrapFetch learnt (`<prefix>:{<id>}:window`), or null. */
  window: WindowStatus | null;
  /** Live lines of turns (`<prefix>:{<id>}:line:<digest>`): callers waiting for their turn. */
  lines: LineStatus[];
  /** True when the store holds nothing for this id. */
  unknown: boolean;
}

/** Beyond this, a pause end is not valve's (it writes at most 365 days ahead; a day of slack). */
const AHEAD_MS = AHEAD_US / 1000;

/** SCAN MATCH pattern: the glob characters of `text` escaped. */
function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

interface Discovered {
  /** Digests of rule state keys (`r:<digest>`) and of lines (`line:<digest>`). */
  rules: string[];
  lines: string[];
  /** False when the deadline ended the SCAN first. */
  complete: boolean;
  /** Keys the SCAN walked (about: 1000 per round). */
  walked: number;
}

/**
 * Every key of the id (one SCAN over the node that owns its slot), until `deadline` (epoch ms):
 * on a large keyspace the SCAN stops there, and what it found so far is kept.
 */
async function discoverKeys(conn: Conn, base: string, deadline: number): Promise<Discovered> {
  const node = await conn.nodeFor(base);
  const pattern = `${globEscape(base)}*`;
  const rules = new Set<string>();
  const lines = new Set<string>();
  let cursor = '0';
  let walked = 0;
  do {
    if (walked > 0 && Date.now() >= deadline)
      return { rules: [...rules], lines: [...lines], complete: false, walked };
    const reply = replyArray(await node.call(['SCAN', cursor, 'MATCH', pattern, 'COUNT', '1000']), 'SCAN');
    walked += 1000;
    cursor = replyString(reply[0], 'SCAN');
    for (const raw of replyArray(reply[1], 'SCAN')) {
      const key = replyString(raw, 'SCAN').slice(base.length);
      if (key.startsWith('r:')) rules.add(key.slice(2));
      else if (key.startsWith('line:')) lines.add(key.slice(5));
    }
  } while (cursor !== '0');
  return { rules: [...rules], lines: [...lines], complete: true, walked };
}

/** Clients whose user may not run EVALSHA_RO (an ACL rule without it), or a server without it: EVAL each time. */
const evalOnly = new WeakSet<object>();

/**
 * Runs status.lua so that it answers while the server pauses writes (CLIENT PAUSE WRITE, as
 * FAILOVER does): EVALSHA_RO, which is never held, and which a server without the script (a
 * restart, a promoted replica, SCRIPT FLUSH) answers NOSCRIPT at once; then EVAL of the source,
 * which its flags=no-writes let run (and which caches it). A plain EVALSHA of a script the
 * server does not have is held until the pause ends: the server cannot tell whether it writes.
 * Routed by the first key (a cluster: the master of the id's slot).
 */
async function runStatus(conn: Conn, numKeys: number, all: readonly string[]): Promise<unknown> {
  const args = [String(numKeys), ...all];
  if (!evalOnly.has(conn.client)) {
    try {
      return await conn.call(['EVALSHA_RO', STATUS.sha, ...args], all[0]);
    } catch (err) {
      const message = String((err as Error)?.message ?? err);
      if (/^NOPERM.*evalsha_ro|unknown command/i.test(message)) evalOnly.add(conn.client);
      else if (!isNoScript(err)) throw err;
    }
  }
  return conn.call(['EVAL', STATUS.source, ...args], all[0]);
}

function checkedId(id: string): string {
  try {
    return checkId(id);
  } catch (err) {
    throw usageError((err as Error).message.replace('`id`', '<id>'));
  }
}

export interface ReadOptions {
  /** Rule digests to read besides the recorded and found ones (watch: the last reading's). */
  known?: readonly string[];
  /** Search for unrecorded rules and lines (a SCAN; watch skips it on most readings). Default true. */
  scan?: boolean;
  /** ms the SCAN may take before it stops (the rest is read anyway). Default: no limit. */
  scanMs?: number;
  /** Read the rules' state (default true); pause and resume need only the pause, and never the record. */
  rules?: boolean;
}

const RECORD_EXPECTED = 'a rule set ("<until µs>:" and rule digests joined by commas)';

/** Reads one id's state. */
export async function readStatus(
  conn: Conn,
  prefix: string,
  rawId: string,
  o: ReadOptions = {},
): Promise<IdStatus> {
  const id = checkedId(rawId);
  // Keys as the server names them: the keyPrefix (an ioredis client's, --key-prefix) first.
  const keys = idKeys(conn.keyPrefix + prefix, id);
  const scan = o.scan ?? true;
  let record: { digests: string[] } | null = null;
  if (o.rules ?? true) {
    // A record of another type is reported below (status.lua reads it type-checked).
    const recordRaw = await conn.call(['GET', keys.rules], keys.rules).catch((err: unknown) => {
      if (/WRONGTYPE/.test(String((err as Error)?.message))) return null;
      throw err;
    });
    record = parseRecord(recordRaw == null ? '' : replyString(recordRaw, 'GET'));
  }
  let checked = scan;
  let note: string | undefined;
  let found: Discovered = { rules: [], lines: [], complete: true, walked: 0 };
  if (scan && (o.rules ?? true)) {
    const limit = o.scanMs ?? Number.POSITIVE_INFINITY;
    try {
      found = await discoverKeys(conn, keys.rulePrefix.slice(0, -2), Date.now() + limit);
      if (!found.complete) {
        checked = false;
        note = `not finished: SCAN stopped after about ${found.walked} keys (its share of --timeout, ${Math.round(limit)} ms); rules it did not reach are not shown`;
      }
    } catch (err) {
      checked = false;
      note = `not checked: SCAN failed (${(err as Error).message.split('\n')[0]})`;
    }
  }
  // Sets: a record may hold many digests (what valve never writes, but status must answer).
  const digests = [
    ...new Set([...(record?.digests ?? []), ...(o.known ?? []), ...found.rules.sort()]),
  ].filter((d) => ruleFromDigest(d));
  // A line is named by the first rule of its rule set: every rule we know of, and those found.
  const lineDigests = [...new Set([...digests, ...found.lines.sort()])].filter((d) => ruleFromDigest(d));
  const statusKeys = [
    keys.pause,
    keys.leases,
    keys.fence,
    keys.rules,
    keys.pauseBy,
    keys.window,
    ...digests.map((d) => keys.rulePrefix + d),
    ...lineDigests.map((d) => `${keys.line}:${d}`),
  ];
  const all = [...statusKeys, ...digests.map((d) => d[0]!)];
  const reply = replyArray(await runStatus(conn, statusKeys.length, all), 'status');
  const nowUs = Number(replyString(reply[0], 'status'));
  const now = nowUs / 1000;
  const pauseRaw = replyString(reply[1], 'status');
  const fenceRaw = replyString(reply[2], 'status');
  // The record as the script read it (the same instant as the states).
  const recordRaw = replyString(reply[3], 'status');
  const leaseReply = reply[4];
  const states = replyArray(reply[5], 'status');
  const pauseBy = replyString(reply[6], 'status');
  const windowRaw = replyString(reply[7], 'status');
  const lineRaws = replyArray(reply[8], 'status').map((v) => replyString(v, 'status'));

  const problems: string[] = [];
  const corrupt = (key: string, raw: string, expected: string) =>
    problems.push(
      `${key} holds ${raw === '!type' ? 'a value of another type' : raw === EMPTY ? 'an empty string' : JSON.stringify(raw.slice(0, 64))}, not ${expected} (valve never writes that; delete the key)`,
    );
  // The checks of the store's scripts (lua/lib/acquire-one.lua, pause.lua, window.lua).
  const recorded = recordRaw === '!type' ? null : parseRecord(recordRaw, nowUs);
  const shape = parseRecord(recordRaw);
  if (recordRaw !== '' && (shape === null || shape.until * 1000 > nowUs + AHEAD_US))
    corrupt(keys.rules, recordRaw, RECORD_EXPECTED);
  let pauseUntil = /^\d+(\.\d+)?$/.test(pauseRaw) ? Number(pauseRaw) : null;
  if (pauseRaw !== '' && (pauseUntil === null || pauseUntil > now + AHEAD_MS)) {
    corrupt(keys.pause, pauseRaw, 'a pause end in epoch ms at most 365 days ahead');
    pauseUntil = null;
  }
  if (!Array.isArray(leaseReply) && replyString(leaseReply, 'status') === '!type')
    corrupt(keys.leases, '!type', 'a sorted set of leases');
  const fenceOk = /^\d+$/.test(fenceRaw) && Number(fenceRaw) <= nowUs + AHEAD_US;
  if (fenceRaw !== '' && !fenceOk)
    corrupt(keys.fence, fenceRaw, 'a fencing number (an integer near the clock in µs)');
  const leases: LeaseStatus[] = [];
  if (Array.isArray(leaseReply)) {
    let far = '';
    for (let i = 0; i + 1 < leaseReply.length; i += 2) {
      const token = replyString(leaseReply[i], 'status');
      const score = replyString(leaseReply[i + 1], 'status');
      // Redis answers an infinite score as "inf" / "-inf" (Number() reads NaN).
      const expiresAt = score === 'inf' ? Number.POSITIVE_INFINITY : score === '-inf' ? 0 : Number(score);
      if (expiresAt <= now) continue; // expired, not yet purged
      if (!(expiresAt <= now + AHEAD_MS)) {
        far ||= `${token} ${score}`;
        continue;
      }
      leases.push({
        token,
        fence: Number(token.slice(token.lastIndexOf('.') + 1)),
        expiresAt,
        ttl: us(expiresAt - now),
      });
    }
    if (far) corrupt(keys.leases, far, 'lease expiries in epoch ms at most 365 days ahead');
  }
  const window = windowStatus(windowRaw, nowUs);
  if (typeof window === 'string') corrupt(keys.window, windowRaw, window);
  const lines: LineStatus[] = [];
  lineDigests.forEach((digest, l) => {
    const line = lineStatus(digest, lineRaws[l] ?? '', nowUs);
    if (typeof line === 'string') corrupt(`${keys.line}:${digest}`, lineRaws[l]!, line);
    else if (line) lines.push(line);
  });
  const inRecord = new Set(recorded?.digests ?? []);
  const rules = digests.map((digest, r) => ruleStatus(digest, states[r], nowUs, inRecord.has(digest)));
  const live = rules.filter((r) => !r.recorded && (r.nextUnitIn !== null || r.problem !== undefined));
  const unknown =
    recorded === null &&
    live.length === 0 &&
    found.rules.length === 0 &&
    pauseRaw === '' &&
    fenceRaw === '' &&
    leases.length === 0 &&
    window === null &&
    lines.length === 0 &&
    problems.length === 0;
  const mismatch: IdStatus['mismatch'] = {
    checked,
    digests: recorded === null ? [] : live.map((r) => r.digest),
  };
  if (note) mismatch.note = note;
  return {
    id,
    prefix,
    keyPrefix: conn.keyPrefix,
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
            by: pauseBy === '' || pauseBy === '!type' || pauseBy === EMPTY ? null : pauseBy,
          }
        : null,
    leases: leases.sort((a, b) => a.expiresAt - b.expiresAt),
    fence: fenceOk ? Number(fenceRaw) : null,
    problems,
    window: typeof window === 'string' ? null : window,
    lines,
    unknown,
  };
}

/**
 * "<until µs>:<digests>" → the record, or null when malformed, further ahead than valve writes
 * (checked against `nowUs` when given, as check_record() does), or expired at `nowUs`.
 */
function parseRecord(raw: string, nowUs?: number): { digests: string[]; until: number } | null {
  const m = /^(\d+):([gws0-9.,]*)$/.exec(raw);
  if (!m) return null;
  const untilUs = Number(m[1]);
  if (nowUs !== undefined && (untilUs <= nowUs || untilUs > nowUs + AHEAD_US)) return null;
  return { digests: m[2] === '' ? [] : m[2]!.split(','), until: untilUs / 1000 };
}
