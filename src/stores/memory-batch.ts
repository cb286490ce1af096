import { converted, convertFrom, spentSince } from '../rules/convert.js';
import { windowCount, windowEnd, windowIndex, windowWait } from '../rules/fixed-window.js';
import { gcraCharge, gcraExpiry, gcraNext, gcraWait } from '../rules/gcra.js';
import type { StoreRule } from '../rules/rule.js';
import { slidingAppend, slidingEnd, slidingExpire, slidingWait } from '../rules/sliding-window.js';
import { inPrevious, sinceUs } from './checks.js';
import { type IdState, RuleState } from './memory-state.js';
import { turnStep } from './turns.js';

/**
 * One acquire call's rules, for the memory store (memory.ts): each rule's state as of the call's
 * `now`, what each job of the batch would make of it, and the writing back of what was granted,
 * for every algorithm. The arrays are reused from call to call, so a batch allocates nothing per
 * job; `clear()` drops the references a finished call would otherwise retain.
 */
export class RuleBatch {
  /** The call's rules: its own first, then the previous rules of a rule change (filled by checkRequest). */
  readonly rules: (StoreRule | undefined)[] = [];
  private readonly st: (RuleState | undefined)[] = [];
  /** GCRA tat (as stored: maybe past) / fixed-window count / sliding-window live sum, as updated by this batch's grants. */
  private readonly a: number[] = [];
  /** Fixed-window index at `now`. */
  private readonly k: number[] = [];
  /** The value `a` takes if the current job is granted. */
  private readonly cand: number[] = [];
  /** Sliding window: the live sum before this batch. */
  private readonly pre: number[] = [];
  /** A rule change: the rule is new (converted). */
  private readonly target: boolean[] = [];

  /**
   * Reads the first `n` rules' states of `state` as of `now` (expired or missing = fresh; expired
   * ones are dropped). A GCRA tat is kept as stored (the checks take max(tat, now)); a missing one
   * reads as now − interval, the latest tat a dropped state can have had (gcraExpiry()).
   */
  read(n: number, state: IdState | undefined, now: number): void {
    const { rules, st, a, k } = this;
    for (let i = 0; i < n; i++) {
      const rule = rules[i]!;
      let s = state?.rules.get(rule.digest);
      if (s !== undefined && now >= s.expiresUs) {
        state!.rules.delete(rule.digest);
        s = undefined;
      }
      st[i] = s;
      if (rule.algorithm === 'gcra') {
        a[i] = s === undefined ? now - rule.intervalUs : s.tat;
      } else if (rule.algorithm === 'sliding-window') {
        if (s !== undefined) slidingExpire(s, now, rule.intervalUs);
        a[i] = s === undefined ? 0 : s.sum;
        this.pre[i] = a[i]!;
      } else {
        const w = windowIndex(now, rule.intervalUs);
        k[i] = w;
        a[i] = s === undefined ? 0 : windowCount(s.window, s.count, w);
      }
    }
  }

  /**
   * A rule change: adds to each new rule (among the first `m`, not in `previous`) the units the
   * previous rules' states prove may have been spent in its current window (see
   * rules/convert.ts). `pre` stays, so the units are written as one entry of a sliding window's log.
   * A previous rule whose state counts grants only since a time at or after the new rule's
   * window start (`since`, AcquireRequest.previousSince) is no source for it.
   */
  convert(
    m: number,
    n: number,
    previous: readonly StoreRule[] | undefined,
    since: readonly number[] | undefined,
    now: number,
  ): void {
    const { rules, a, k, target } = this;
    for (let i = 0; i < m; i++) target[i] = !inPrevious(rules[i]!, previous);
    for (let i = 0; i < m; i++) {
      if (!target[i]) continue;
      const rule = rules[i]!;
      const start = convertFrom(rule, now, k[i]!);
      let units = Number.POSITIVE_INFINITY;
      for (let j = 0; j < n; j++) {
        if (j < m && target[j]) continue; // a new rule is no source
        if (sinceUs(rules[j]!, previous, since) >= start) continue; // too young to tell
        const u = spentSince(rules[j]!, a[j]!, k[j]!, now, start);
        if (u < units) units = u;
      }
      a[i] = converted(rule, a[i]!, units, now);
    }
  }

  /** µs until one more job of cost `c` fits all of the first `n` rules (0: it fits now); `take()` grants it. */
  wait(n: number, c: number, now: number): number {
    const { rules, a, k, cand } = this;
    let worst = 0;
    for (let i = 0; i < n; i++) {
      const rule = rules[i]!;
      let w: number;
      if (rule.algorithm === 'gcra') {
        const next = gcraNext(a[i]!, now, gcraCharge(c, rule.emissionUs, rule.burst));
        cand[i] = next;
        w = gcraWait(next, now, rule.burst, rule.emissionUs);
      } else if (rule.algorithm === 'sliding-window') {
        cand[i] = a[i]! + c;
        w = 0;
        if (cand[i]! > rule.limit) {
          const s = this.st[i];
          w = s === undefined ? rule.intervalUs : slidingWait(s, cand[i]! - rule.limit, now, rule.intervalUs);
        }
      } else {
        cand[i] = a[i]! + c;
        w = windowWait(a[i]!, c, rule.limit, k[i]!, rule.intervalUs, now);
      }
      if (w > worst) worst = w;
    }
    return worst;
  }

  /** Grants the job the last `wait()` found fitting. */
  take(n: number): void {
    for (let i = 0; i < n; i++) this.a[i] = this.cand[i]!;
  }

  /** Writes the first `n` rules' states, as updated by this batch, into `state`. */
  write(n: number, state: IdState, now: number): void {
    const { rules, st, a, k } = this;
    for (let i = 0; i < n; i++) {
      const rule = rules[i]!;
      let s = st[i];
      // A missing GCRA state neither spent nor converted stays missing (as on Redis).
      if (s === undefined && rule.algorithm === 'gcra' && a[i]! <= now) continue;
      if (s === undefined) {
        s = new RuleState(rule.algorithm === 'sliding-window');
        state.rules.set(rule.digest, s);
      }
      if (rule.algorithm === 'gcra') {
        s.tat = a[i]!;
        s.expiresUs = gcraExpiry(a[i]!, rule.intervalUs);
      } else if (rule.algorithm === 'sliding-window') {
        if (a[i]! > this.pre[i]!) slidingAppend(s, now, a[i]! - this.pre[i]!);
        s.expiresUs = slidingEnd(s, rule.intervalUs);
      } else {
        s.window = k[i]!;
        s.count = a[i]!;
        s.expiresUs = windowEnd(k[i]!, rule.intervalUs);
      }
    }
  }

  /** Whether the first `n` rules are all GCRA (the line of turns applies only then). */
  allGcra(n: number): boolean {
    for (let i = 0; i < n; i++) if (this.rules[i]!.algorithm !== 'gcra') return false;
    return true;
  }

  /** µs until one more job of cost `c` fits every (GCRA) rule, as updated by this call's grants. */
  openAfter(n: number, c: number, now: number): number {
    let open = 0;
    for (let i = 0; i < n; i++) {
      const rule = this.rules[i]!;
      const w = gcraWait(
        gcraNext(this.a[i]!, now, gcraCharge(c, rule.emissionUs, rule.burst)),
        now,
        rule.burst,
        rule.emissionUs,
      );
      if (w > open) open = w;
    }
    return open;
  }

  /** The spacing of turns for a refused job of cost `c`: from the (GCRA) rule that keeps it waiting longest. */
  stepFor(n: number, c: number, now: number): number {
    let worst = -1;
    let step = 1;
    for (let i = 0; i < n; i++) {
      const rule = this.rules[i]!;
      const inc = gcraCharge(c, rule.emissionUs, rule.burst);
      const cap = rule.burst * rule.emissionUs;
      const w = Math.max(this.a[i]!, now) + inc - now - cap;
      if (w > worst) {
        worst = w;
        step = turnStep(inc, cap);
      }
    }
    return step;
  }

  /** Drops the references to rules and states, so a finished call retains nothing. */
  clear(n: number): void {
    for (let i = 0; i < n; i++) {
      this.rules[i] = undefined;
      this.st[i] = undefined;
    }
  }
}
