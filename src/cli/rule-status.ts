/**
 * `valve status`'s reading of each key's raw value (as status.lua answers it): checked as
 * strictly as the store's scripts check it (lua/lib/acquire-one.lua, lua/window.lua), so a key
 * the scripts refuse (VALVE_CORRUPT_STATE) is reported, never shown as a wait; then units left
 * and waits computed with the stores' own arithmetic (src/rules).
 */
import { windowCount, windowEnd, windowIndex } from '../rules/fixed-window.js';
import { gcraIncrement, gcraNext, gcraWait } from '../rules/gcra.js';
import { type Rule, ruleFromDigest } from '../rules/rule.js';
import { type SlidingState, slidingEnd, slidingExpire, slidingWait } from '../rules/sliding-window.js';
import { replyString } from '../stores/redis/adapter.js';

/** The farthest ahead of the clock (µs) valve writes a time: 365 days and a day of slack (AHEAD). */
export const AHEAD_US = 366 * 86_400_000_000;
/** The longest interval (µs): a GCRA time runs at most the burst tolerance plus this ahead (SPAN). */
const SPAN_US = 365 * 86_400_000_000;
/** The farthest a line's turns go (µs): acquire-one.lua's LINE_AHEAD. */
const LINE_AHEAD_US = 3 * AHEAD_US;
/** An unused turn is skipped this long (µs) after it came (turns.ts TURN_GRACE_US). */
const GRACE_US = 2000;

export const us = (ms: number) => Math.round(ms * 1000) / 1000;

/** status.lua's answer for a key that holds an empty string (a missing key: ""). */
export const EMPTY = '!empty';

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

/** The fleet window wrapFetch learnt from the provider's answers (`<prefix>:{<id>}:window`). */
export interface WindowStatus {
  /** Requests the provider's window still allows, or null when no window is known (expired or not yet learnt). */
  left: number | null;
  /** Requests sent with a ticket whose answer has not been reported. */
  inFlight: number;
  /** ms until the known window resets, or null. */
  resetIn: number | null;
  /** ms the probe (the one request sent to learn a window) may still be in flight, or null. */
  probeIn: number | null;
  /** True when a ticket asked now would wait (window spent, or a probe's answer awaited). */
  waiting: boolean;
}

/** A line of turns (`<prefix>:{<id>}:line:<digest>`): callers a tight GCRA rule turned away. */
export interface LineStatus {
  /** The digest of the first rule of the rule set the line is for. */
  digest: string;
  /** Tickets waiting for their turn (late ones skipped). */
  waiting: number;
  /** ms until the head ticket's turn (0: now). */
  nextTurnIn: number;
  /** ms between turns. */
  step: number;
}

const ms = (waitUs: number) => us(waitUs / 1000);

export function ruleStatus(digest: string, state: unknown, nowUs: number, recorded: boolean): RuleStatus {
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
  if (state === '!type') return bad('a key of another type');
  if (state === EMPTY) return bad('an empty string');
  if (rule.algorithm === 'gcra') {
    const raw = replyString(state, 'status');
    const emissionUs = Math.ceil(intervalUs / limit);
    const capUs = capacity * emissionUs;
    if (raw !== '' && (!/^\d+$/.test(raw) || Number(raw) > nowUs + capUs + SPAN_US))
      return bad(
        `${JSON.stringify(raw.slice(0, 40))}, a time further ahead than the burst tolerance and an interval`,
      );
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
      const m = /^(\d+):(\d+(?:\.\d*)?)$/.exec(raw);
      if (!m || Number(m[2]) > limit)
        return bad(`${JSON.stringify(raw.slice(0, 40))}, not a count from 0 to the limit`);
      count = windowCount(Number(m[1]), Number(m[2]), k);
    }
    const left = Math.max(0, Math.floor(limit - count));
    const windowStart = (k * intervalUs) / 1000;
    if (count <= 0) return { ...base, left, nextUnitIn: null, allBackIn: null, recent: null, windowStart };
    const end = ms(windowEnd(k, intervalUs) - nowUs);
    return { ...base, left, nextUnitIn: end, allBackIn: end, recent: null, windowStart };
  }
  // Sliding window: [sum, t1, c1, t2, c2, ...], oldest first; checked as acquire-one.lua does.
  const list = Array.isArray(state)
    ? state.map((v) => {
        const text = replyString(v, 'status');
        return text.trim() === '' ? Number.NaN : Number(text);
      })
    : [];
  let total = 0;
  if (list.length > 0) {
    const sum = list[0]!;
    let ok = list.length % 2 === 1 && sum >= 0 && sum < Number.POSITIVE_INFINITY;
    for (let i = 1; ok && i < list.length; i += 2) {
      const t = list[i]!;
      const c = list[i + 1]!;
      ok = t >= 0 && t <= nowUs + AHEAD_US && c > 0 && c < Number.POSITIVE_INFINITY;
      total += c;
    }
    if (!ok) return bad('a malformed log, or a time further ahead than valve writes');
    // The scripts use the stored sum, never the entries' (and refuse a sum that cannot be theirs).
    let high = 0;
    for (let i = 2; i < list.length; i += 2) high = Math.max(high, list[i]!);
    if (sum !== total || high > limit)
      return bad(
        `sum ${JSON.stringify(String(sum))}: not the sum of its entries' costs, or an entry above the limit`,
      );
  }
  // The stored sum, as the scripts read it (equal to its entries' costs, checked above).
  const s: SlidingState = { log: list.slice(1), head: 0, sum: list.length > 0 ? list[0]! : 0 };
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

/** The fleet window from its raw value ("" missing), or a string: what the scripts refuse. */
export function windowStatus(raw: string, nowUs: number): WindowStatus | null | string {
  if (raw === '') return null;
  const expected = 'nine integers separated by commas';
  if (raw === '!type') return expected;
  // window.lua: the non-empty parts between commas, each an integer within the clock's reach.
  const parts = raw.split(',').filter((p) => p !== '');
  if (parts.length !== 9) return expected;
  const n = parts.map((p) => (/\S/.test(p) ? Number(p) : Number.NaN));
  if (n.some((v) => !Number.isInteger(v) || Math.abs(v) > nowUs + AHEAD_US)) return expected;
  const [, reset, left, , , , probe, , flight] = n as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const live = reset > nowUs;
  return {
    left: live ? Math.max(0, left) : null,
    inFlight: Math.max(0, flight),
    resetIn: live ? ms(reset - nowUs) : null,
    probeIn: probe > nowUs ? ms(probe - nowUs) : null,
    waiting: probe > nowUs || (live && left <= 0),
  };
}

/** A line from its raw value ("" missing, or every ticket late: null), or a string: what the scripts refuse. */
export function lineStatus(digest: string, raw: string, nowUs: number): LineStatus | null | string {
  if (raw === '') return null;
  const expected = 'a line "<head>:<tail>:<turn µs>:<step µs>" with head < tail';
  const m = /^(\d+):(\d+):(\d+):(\d+)$/.exec(raw);
  if (!m) return expected;
  let [h, t, a, s] = [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])];
  const gap = s + (s < 800 ? Math.floor(s / 8) : 100);
  if (h >= t || t > Number.MAX_SAFE_INTEGER || s < 1 || a > nowUs + LINE_AHEAD_US || s > LINE_AHEAD_US)
    return expected;
  if ((t - h - 1) * gap > LINE_AHEAD_US) return expected;
  if (nowUs > a + (t - h - 1) * gap + GRACE_US) return null;
  const late = nowUs - a - GRACE_US;
  if (late > 0) {
    const k = Math.min(Math.floor((late - 1) / gap) + 1, t - h);
    h += k;
    a += k * gap;
  }
  if (h >= t) return null;
  return { digest, waiting: t - h, nextTurnIn: ms(Math.max(0, a - nowUs)), step: ms(s) };
}
