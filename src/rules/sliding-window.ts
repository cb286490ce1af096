/**
 * Sliding-window arithmetic in integer microseconds on the store's clock (see
 * docs/architecture.md, "The arithmetic"). The memory store runs these functions; the Redis
 * Lua script mirrors them.
 *
 * The bound: at most `limit` units in any half-open window [s, s + intervalUs). The state is
 * a log of grants (t, c), oldest first, one entry per store call that granted (a batch is
 * granted at one instant, so its jobs share an entry). An entry is live while
 * t > now − intervalUs. Because grants never come before `now`, the fullest window that
 * contains `now` is (now − intervalUs, now]: a job of cost c fits iff live + c ≤ limit.
 *
 * When it does not fit, it must wait until the oldest entries have left: with need =
 * live + c − limit, the first entry p at which the running sum of the oldest entries reaches
 * need leaves at t_p + intervalUs, so the wait is t_p + intervalUs − now. Exact: at that instant
 * entries 1..p are out and the job fits; 1 µs earlier entry p and every later one still count.
 * Entries of cost ≥ 1 mean p ≤ c, so the scan is short; live ≤ limit bounds the log's length.
 */

/** A rule's log: `log` holds [t, c, t, c, ...] from index `head`; `sum` is the live total. */
export interface SlidingState {
  log: number[];
  /** Index in `log` of the oldest live entry's time (even). */
  head: number;
  /** Sum of the costs of the entries from `head` on. */
  sum: number;
}

/** Drops the entries that left the window ending at `nowUs` (t ≤ now − intervalUs). */
export function slidingExpire(s: SlidingState, nowUs: number, intervalUs: number): void {
  const log = s.log;
  const cut = nowUs - intervalUs;
  let head = s.head;
  while (head < log.length && log[head]! <= cut) {
    s.sum -= log[head + 1]!;
    head += 2;
  }
  if (head === log.length) {
    log.length = 0;
    head = 0;
    s.sum = 0;
  } else if (head >= 64 && head * 2 >= log.length) {
    // Amortised compaction: each entry is moved at most once per halving.
    log.copyWithin(0, head);
    log.length -= head;
    head = 0;
  }
  s.head = head;
}

/**
 * How long (µs) a job must wait until `need` units of the oldest entries have left. `need` > 0
 * is at most the live sum plus the units granted at `nowUs` in this call and not yet in the log
 * (a job never costs more than the limit); those leave one interval from now.
 */
export function slidingWait(s: SlidingState, need: number, nowUs: number, intervalUs: number): number {
  const log = s.log;
  let acc = 0;
  for (let i = s.head; i < log.length; i += 2) {
    acc += log[i + 1]!;
    if (acc >= need) return log[i]! + intervalUs - nowUs;
  }
  // Only the grants of this very call (`pending`) can make room: they leave one interval from
  // now. (Also the safe answer should float sums of fractional costs ever fall short of `need`.)
  return intervalUs;
}

/** Records `amount` units granted at `nowUs` (merged into the newest entry when it has that time). */
export function slidingAppend(s: SlidingState, nowUs: number, amount: number): void {
  const log = s.log;
  const n = log.length;
  if (n > s.head && log[n - 2]! >= nowUs) {
    log[n - 1]! += amount;
  } else {
    log.push(nowUs, amount);
  }
  s.sum += amount;
}

/** When the state equals a fresh one: one interval after its newest entry. */
export function slidingEnd(s: SlidingState, intervalUs: number): number {
  const n = s.log.length;
  return n > s.head ? s.log[n - 2]! + intervalUs : 0;
}
