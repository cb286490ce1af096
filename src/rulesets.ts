import type { MismatchedRule, RuleMismatchEvent } from './events.js';
import { ruleFromDigest, type StoreRule } from './rules/rule.js';
import type { AcquireResult } from './stores/store.js';

/*
 * The rules a valve sends and their changes (valve.setRules(), docs/architecture.md, "Rule
 * changes"). Owned by the admission room, which copies them into each store call and hands
 * each answer back. After a change, one call at a time asks the store to convert the new rules'
 * states from the old ones (until one such call is answered, whatever the answer: a store
 * converts even when paused; a call that failed is followed by another), and every call keeps
 * spending the old rules too until one interval of the longest of them has passed since the
 * conversion, on the store's clock or on the local one counted from its answer (so a window
 * that contains the change holds what the stricter set allows). Calls carry the
 * rule set's record (a valve group's key: the first, those of a change, then one per quarter
 * of its recordTtl; see fill()); the first answer that reports another set recorded for the id
 * (per change) gives a 'rule-mismatch', unless it is the conversion's finding this valve's own
 * earlier set.
 */

/** How many earlier records a valve remembers as its own during a change (see RuleSet.previousRecords). */
const MAX_PREVIOUS_RECORDS = 8;

/** The digests of `rules`, distinct, sorted and joined by ',': the id's record in the store. */
export function recordOf(rules: readonly StoreRule[]): string {
  return [...new Set(rules.map((r) => r.digest))].sort().join(',');
}

/** The fields of a store request this room fills. */
export interface RulesRequest {
  rules: readonly StoreRule[];
  previous: readonly StoreRule[] | undefined;
  previousSince: readonly number[] | undefined;
  convert: boolean | undefined;
  record: string | undefined;
  recordTtl: number | undefined;
}

/**
 * What a valve group keeps of an evicted key's RuleSet for the key's next valve (see carry()):
 * a change in progress (its old rules, still spent, and whether its conversion is still to be
 * asked for) and the times from which the rules a change introduced count. The same clock
 * (the group's) reads `previousEnd` in both valves.
 */
export interface RulesCarry {
  readonly record: string;
  /**
   * `since` of the rules, in the record's order of digests (-Infinity: none), and then of the
   * change's old rules not among them, in its `previous` order (a group keeps many of these).
   */
  readonly since: readonly number[];
  /** A change in progress, if any. */
  readonly change: ChangeCarry | undefined;
}

interface ChangeCarry {
  readonly previous: StoreRule[];
  readonly previousSince: number[] | undefined;
  readonly previousRecords: readonly string[];
  readonly convert: boolean;
  readonly previousUntil: number;
  readonly previousEnd: number;
  readonly previousSpan: number;
  readonly previousMaxCost: number;
  /** A call asked for the conversion and none was answered (RuleSet.unconfirmed). */
  readonly unconfirmed: boolean;
}

/**
 * A carried record as the key's next valve would take it at local ms `now`: the change dropped
 * once it is over (its transition has passed), or when it changes nothing (its old rules are
 * the rules: a change set back before it reached the store), keeping the times from
 * which the rules count; undefined when nothing is left to carry. A change set back after a
 * call that asked for its conversion went unanswered is kept whole: that call may have left
 * the set-back record in the store, which the next valve's conversion tells for its own (a
 * valve without the change would report the key's own earlier rules as a 'rule-mismatch').
 */
export function settleCarry(carry: RulesCarry, now: number): RulesCarry | undefined {
  const { record, since, change } = carry;
  const digests = record === '' ? [] : record.split(',');
  if (change !== undefined) {
    // The same rules as before it (a rule added or removed is a change to carry out).
    const noop =
      !change.unconfirmed &&
      change.previous.length === digests.length &&
      change.previous.every((r) => digests.includes(r.digest));
    if (!noop && now < change.previousEnd) return carry;
  }
  const own = since.length > digests.length ? since.slice(0, digests.length) : since;
  if (own.every((t) => t === Number.NEGATIVE_INFINITY)) return undefined;
  return change === undefined && own === since ? carry : { record, since: own, change: undefined };
}

export class RuleSet {
  /** The rules every call is checked against. */
  rules: readonly StoreRule[];
  /** Their record (see recordOf). */
  private record: string;
  /** The old rules, still spent while a change is in progress; undefined otherwise. */
  private previous: StoreRule[] | undefined;
  /** Per old rule, the store time from which its state counts every grant (see `since`). */
  private previousSince: number[] | undefined;
  /**
   * Per digest of a rule a change introduced (among `rules` and `previous`), the store-clock ms
   * of the conversion that introduced it: its state has counted every grant since then only, so
   * it cannot bound a later rule's window that starts earlier (AcquireRequest.previousSince).
   * Infinity while that conversion is not known to have happened. A rule missing here has
   * counted every grant (the valve's first rules).
   */
  private readonly since = new Map<string, number>();
  /**
   * The store is to convert (until a call that asked is answered). No call is pipelined behind
   * the one that asks (`unconverted`), so one asks at a time: two would count the old spend twice.
   */
  private convert = false;
  /** Store-clock ms from which the old rules are dropped; NaN until the conversion is answered. */
  private previousUntil = Number.NaN;
  /**
   * Local ms from which the old rules are dropped (the conversion's answer + previousSpan: the
   * store's clock has passed previousUntil by then); Infinity until the conversion is answered.
   */
  private previousEnd = Number.POSITIVE_INFINITY;
  /** The longest interval of the old rules, ms. */
  private previousSpan = 0;
  /** The largest cost every old rule can admit (the smallest maxCost among them). */
  private previousMaxCost = Number.POSITIVE_INFINITY;
  /** The last answer ended a change: its call still carried the old rules (see `ended`). */
  private endedNow = false;
  /** 'rule-mismatch' was emitted for the current rules. */
  private mismatched = false;
  /**
   * The records of the rule sets this valve used before the change in progress (the last one
   * first; more than one when a change came during another): the store may still hold one of
   * them when the conversion is answered, and that is no other process's. Each at most once,
   * and the latest MAX_PREVIOUS_RECORDS only.
   */
  private previousRecords: string[] = [];
  /** Local ms of the last call that carried the record (with recordTtl); -Infinity: the next one does. */
  private recordSentAt = Number.NEGATIVE_INFINITY;
  /**
   * A call that asked for the conversion was sent and none has been answered (across changes
   * made meanwhile): the store may hold a record of this valve's that no answer told about
   * (carried, see settleCarry()).
   */
  private unconfirmed = false;

  constructor(
    rules: readonly StoreRule[],
    /** The least time (ms) the store keeps the record (AcquireRequest.recordTtl), or undefined. */
    private readonly recordTtl: number | undefined = undefined,
    /** The local clock (the valve's); without it, only the answers' store clock ends a change. */
    private readonly clock: { now(): number } | undefined = undefined,
    /** What an earlier valve of a group's key left (carry()); taken when its rules are these. */
    carried: RulesCarry | undefined = undefined,
  ) {
    this.rules = rules;
    this.record = recordOf(rules);
    if (carried !== undefined && carried.record === this.record) {
      const { since, change } = carried;
      const digests = this.sinceOrder(this.record, change?.previous);
      for (let i = 0; i < digests.length; i++) {
        if (since[i] !== Number.NEGATIVE_INFINITY) this.since.set(digests[i]!, since[i]!);
      }
      if (change !== undefined) {
        this.previous = change.previous;
        this.previousSince = change.previousSince;
        this.previousRecords = [...change.previousRecords];
        this.convert = change.convert;
        this.previousUntil = change.previousUntil;
        this.previousEnd = change.previousEnd;
        this.previousSpan = change.previousSpan;
        this.previousMaxCost = change.previousMaxCost;
        this.unconfirmed = change.unconfirmed;
      }
    }
  }

  /**
   * What the next valve of a group's key needs to go on where this one stops (a change in
   * progress, the rules' times), or undefined when that is nothing: its first rules, no change.
   */
  carry(): RulesCarry | undefined {
    if (this.previous !== undefined && this.clock !== undefined && this.clock.now() >= this.previousEnd) {
      this.dropPrevious();
    }
    if (this.previous === undefined && this.since.size === 0) return undefined;
    const previous = this.previous;
    const since = this.sinceOrder(this.record, previous).map(
      (d) => this.since.get(d) ?? Number.NEGATIVE_INFINITY,
    );
    return {
      record: this.record,
      since,
      change:
        previous === undefined
          ? undefined
          : {
              previous,
              previousSince: this.previousSince,
              previousRecords: this.previousRecords,
              convert: this.convert,
              previousUntil: this.previousUntil,
              previousEnd: this.previousEnd,
              previousSpan: this.previousSpan,
              previousMaxCost: this.previousMaxCost,
              unconfirmed: this.unconfirmed,
            },
    };
  }

  /** The rules change: the old ones (and those of a change still in progress) become previous. */
  set(rules: readonly StoreRule[]): void {
    // A change whose conversion no answer confirmed: the rules it introduced are no old rules
    // (their state was never known converted, so it proves nothing): left out, and those the
    // new set keeps are converted by it from the old rules that are (a conversion the store
    // applied but never answered is then counted twice: the safe side).
    const seen = new Set<string>();
    if (this.previous !== undefined && this.convert) {
      const old = this.previous;
      for (const rule of this.rules) if (!old.some((p) => p.digest === rule.digest)) seen.add(rule.digest);
    }
    const previous: StoreRule[] = [];
    for (const rule of [...this.rules, ...(this.previous ?? [])]) {
      if (seen.has(rule.digest)) continue;
      seen.add(rule.digest);
      previous.push(rule);
    }
    if (this.previous === undefined) this.previousRecords = [this.record];
    else if (!this.previousRecords.includes(this.record)) {
      // The latest few (a valve changing its rules on every answer keeps no growing list).
      this.previousRecords.unshift(this.record);
      if (this.previousRecords.length > MAX_PREVIOUS_RECORDS) this.previousRecords.pop();
    }
    this.rules = rules;
    this.record = recordOf(rules);
    this.previous = previous;
    this.previousSince = previous.map((r) => this.since.get(r.digest) ?? Number.NEGATIVE_INFINITY);
    this.forgetSince();
    this.previousSpan = 0;
    this.previousMaxCost = Number.POSITIVE_INFINITY;
    for (const rule of previous) {
      this.previousSpan = Math.max(this.previousSpan, rule.intervalUs / 1000);
      this.previousMaxCost = Math.min(this.previousMaxCost, rule.maxCost);
    }
    this.convert = true;
    this.previousUntil = Number.NaN;
    this.previousEnd = Number.POSITIVE_INFINITY;
    this.mismatched = false;
    this.recordSentAt = Number.NEGATIVE_INFINITY;
  }

  /** The digests RulesCarry.since follows: the record's, then the old rules' not among them. */
  private sinceOrder(record: string, previous: readonly StoreRule[] | undefined): string[] {
    const digests = record === '' ? [] : record.split(',');
    if (previous !== undefined) {
      for (const rule of previous) if (!digests.includes(rule.digest)) digests.push(rule.digest);
    }
    return digests;
  }

  /** The change is over: the old rules are no longer sent. */
  private dropPrevious(): void {
    this.previous = undefined;
    this.previousSince = undefined;
    this.forgetSince();
  }

  /** Keeps `since` for the rules still sent only. */
  private forgetSince(): void {
    for (const digest of this.since.keys()) {
      if (this.rules.some((r) => r.digest === digest)) continue;
      if (this.previous?.some((r) => r.digest === digest)) continue;
      this.since.delete(digest);
    }
  }

  /**
   * Fills a request before it is sent (`now`: local ms). Every call carries the record, except
   * with a recordTtl (a valve group's key): then the first call, every call of a rule change,
   * and one call per quarter of recordTtl carry it, so the store reads the record a few times
   * a minute instead of at every admission, and keeps it alive while the key is in use.
   */
  fill(request: RulesRequest, now: number): void {
    // The change is over on the local clock (an answer may be long in coming: a job no old rule
    // can ever admit is told to wait, and would otherwise be refused once more after that).
    if (this.previous !== undefined && now >= this.previousEnd) this.dropPrevious();
    request.rules = this.rules;
    request.previous = this.previous;
    request.previousSince = this.previous === undefined ? undefined : this.previousSince;
    // Until a call that asked is answered, every call asks (one that failed is followed by one).
    request.convert = this.previous === undefined ? undefined : this.convert;
    if (request.convert === true) this.unconfirmed = true;
    const ttl = this.recordTtl;
    if (ttl === undefined || this.previous !== undefined || now - this.recordSentAt >= ttl / 4) {
      request.record = this.record;
      request.recordTtl = ttl;
      this.recordSentAt = now;
    } else {
      request.record = undefined;
      request.recordTtl = undefined;
    }
  }

  /**
   * A rule change waits for its conversion (no call that asked for it has been answered): no
   * second call is pipelined meanwhile (Admission), since one that is answered while the call
   * that asked fails would be checked against the new rules' unconverted state.
   */
  get unconverted(): boolean {
    return this.convert;
  }

  /**
   * Local ms at which the old rules of a change in progress stop being spent (fill() drops
   * them): the conversion's answer plus one interval of the longest of them; Infinity with no
   * change in progress or before its conversion is answered. A rate wait told by an answer that
   * was checked against them never needs to last past it (Admission caps it there).
   */
  get transitionEnd(): number {
    return this.previous === undefined ? Number.POSITIVE_INFINITY : this.previousEnd;
  }

  /**
   * Whether a job of `cost` is one some old rule of the change in progress can never admit: its
   * rate refusal may be that rule's alone (charged a wait past the transition), not the new
   * rules'.
   */
  oldRulesCannotAdmit(cost: number): boolean {
    return this.previous !== undefined && cost > this.previousMaxCost;
  }

  /**
   * The last answer (see answered()) ended a rule change: its call was still checked against the
   * old rules, so a refusal on rate in it may be theirs alone (a job no old rule can ever admit
   * is told to wait as if it could): the next call, with the new rules alone, may go at once.
   */
  get ended(): boolean {
    return this.endedNow;
  }

  /**
   * A call filled by fill() was answered: the conversion is done, the change may be over, and a
   * mismatch is returned once per change.
   */
  answered(request: RulesRequest, result: AcquireResult, id: string): RuleMismatchEvent | undefined {
    this.endedNow = false;
    if (this.previous !== undefined && request.previous === this.previous) {
      if (request.convert === true && this.convert) {
        this.convert = false;
        this.unconfirmed = false;
        this.previousUntil = result.now + this.previousSpan;
        if (this.clock !== undefined) this.previousEnd = this.clock.now() + this.previousSpan;
        // The rules it introduced count every grant from the conversion on.
        const previous = this.previous;
        for (const rule of this.rules) {
          if (!previous.some((p) => p.digest === rule.digest)) this.since.set(rule.digest, result.now);
        }
      } else if (result.now >= this.previousUntil) {
        this.dropPrevious();
        this.endedNow = true;
      }
    }
    const recorded = result.recorded;
    if (recorded === undefined || this.mismatched || request.record !== this.record) return undefined;
    if (!Array.isArray(recorded)) return undefined;
    // The conversion (the first call of the change to reach the store) finding this valve's own
    // earlier record: no other process's rules. The store holds the new record from now on, so
    // a later call that finds an old one again meets a process that still uses it.
    if (request.convert === true && this.previousRecords.includes(recorded.join(','))) {
      return undefined;
    }
    this.mismatched = true;
    return { id, rules: decode(this.record.split(',')), recorded: decode(recorded) };
  }
}

function decode(digests: readonly unknown[]): MismatchedRule[] {
  const out: MismatchedRule[] = [];
  for (const d of digests) {
    const rule = typeof d === 'string' ? ruleFromDigest(d) : undefined;
    if (rule !== undefined) out.push(rule);
  }
  return out;
}
