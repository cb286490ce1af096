import { checkAcquireAnswer } from './answers.js';
import type { Clock } from './clock.js';
import { isThenable } from './maybe-promise.js';
import type { AcquireResult, Store } from './stores/store.js';

/*
 * The store's clock as the pauses room (pauses.ts) knows it. A pause write's answer is the
 * pause's end on the store's clock: the write's own end (the store's time plus the pause), or
 * the end of a longer pause already there (another process's). Which one, only the store's
 * time tells. When the answer ends later than the write's own end could by the valve's
 * estimate of the store's clock (or, before any store call told that clock, later or earlier
 * than the valve's own clock explains), the valve reads the store's clock once. The read goes
 * out after the write's answer came, so the store decided the write before it: the write's own
 * end is at most the read's time plus the pause.
 */

/**
 * How far (ms) a write's answer may end from its own end by the valve's estimate of the store's
 * clock (beyond the estimate's error) and still be taken for its own without reading the clock.
 */
const SLACK_MS = 5;

/** The store's rounding of a pause up to whole µs (ms). */
const ROUNDING_MS = 0.001;

/** The valve's estimate of the store's clock. */
export class StoreOffset {
  /** Store clock minus local clock (ms), from the last store call that told the store's time. */
  value = 0;
  /** At most how far `value` may be off: half the round trip of the call that told it. */
  private error = 0;
  /** Whether a store call told the store's time yet: until then a pause write's answer estimates `value`. */
  private known = false;
  /** The end (store clock) the last write of this valve was answered with as its own, kept or not. */
  private ownAnswered = 0;

  /** A store call sent at `sentAt` and answered at `now` (local clock) told the store's time `storeNow`. */
  told(storeNow: number, sentAt: number, now: number): void {
    if (typeof storeNow !== 'number' || !Number.isFinite(storeNow)) return;
    this.value = storeNow - (sentAt + now) / 2;
    this.error = (now - sentAt) / 2;
    this.known = true;
  }

  /**
   * A write of `ms` sent at `sentAt` was answered at `now` with `until`, its own end. Before any
   * store call told the store's time (a valve whose first act is a pause, or whose clock read
   * failed), it estimates it: the store's end minus `ms` is its time at the write.
   */
  ownEnd(until: unknown, ms: number, sentAt: number, now: number): void {
    if (typeof until !== 'number' || !Number.isFinite(until)) return;
    this.ownAnswered = until;
    if (!this.known) this.value = until - ms - (sentAt + now) / 2;
  }

  /**
   * Whether `until`, the answer at `now` to a write of `ms` sent at `sentAt`, is surely the
   * write's own end (false: the store's clock is read). It is if it ends no later than the
   * store's time now (as estimated, with its error and SLACK_MS) plus the pause. Without an
   * estimate, the valve's clock stands for the store's when it explains the answer: the store's
   * time between send and answer, within SLACK_MS. The end of this valve's last own write is its
   * own whatever the clocks say (that write landed after a resume() of this valve).
   */
  explains(until: number, ms: number, sentAt: number, now: number): boolean {
    if (until === this.ownAnswered) return true;
    if (this.known) return until <= now + this.value + this.error + ms + SLACK_MS;
    return until >= sentAt + ms - SLACK_MS && until <= now + ms + SLACK_MS;
  }
}

/**
 * Whether write `w`, answered `until`, met a longer pause already there: `then(longer, read)`,
 * at once when the valve's estimate explains the answer (`read` undefined), else once the
 * store's clock was read (`read` undefined when it could not be: taken for the write's own).
 * Returns the promise of `then`'s call when it waits for an asynchronous read.
 */
export function checkWrite(
  store: Store,
  id: string,
  clock: Clock,
  offset: StoreOffset,
  until: number,
  w: { readonly ms: number; readonly sentAt: number },
  then: (longer: boolean, read: StoreTime | undefined) => void,
): Promise<void> | undefined {
  if (offset.explains(until, w.ms, w.sentAt, clock.now())) {
    then(false, undefined);
    return undefined;
  }
  return readStoreClock(store, id, clock, (read) => {
    if (read !== undefined) offset.told(read.result.now, read.sentAt, read.answeredAt);
    then(read !== undefined && until > read.result.now + w.ms + ROUNDING_MS, read);
  });
}

/** A read's answer: the store's view (its `now`, its pause), and when (local clock) the read was sent and answered. */
export interface StoreTime {
  readonly result: AcquireResult;
  readonly sentAt: number;
  readonly answeredAt: number;
}

/**
 * Reads the store's clock for `id`: one acquisition of one job with no rules and no lease (it
 * spends nothing, takes no lease and no part in a line or the rule-set record; refused during
 * the pause). `then` gets the answer, or undefined when the call failed or answered nonsense
 * (the valve then keeps its estimate; its next acquisitions report a failing store).
 * Synchronous with a synchronous store; otherwise returns the promise of `then`'s call.
 */
export function readStoreClock(
  store: Store,
  id: string,
  clock: Clock,
  then: (time: StoreTime | undefined) => void,
): Promise<void> | undefined {
  const sentAt = clock.now();
  const answered = (r: unknown): void => {
    const valid = checkAcquireAnswer(r, 1, false) === undefined;
    then(valid ? { result: r as AcquireResult, sentAt, answeredAt: clock.now() } : undefined);
  };
  let result: unknown;
  try {
    result = store.acquire({ id, rules: [], costs: [1], count: 1 });
  } catch {
    then(undefined);
    return undefined;
  }
  if (!isThenable(result)) {
    answered(result);
    return undefined;
  }
  return Promise.resolve(result).then(answered, () => then(undefined));
}
