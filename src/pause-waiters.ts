/*
 * The waits that end with the valve's known pause (owned by the pauses room, pauses.ts): a wait
 * that sleeps through it (wrapFetch's fleet ticket) or a backoff pause (feedback/backoff.ts)
 * adds itself, and is called once the valve learns the pause is gone.
 */

/** A set of callbacks, each called once when the pause is gone. */
export class PauseWaiters extends Set<() => void> {
  /** Calls, and empties, the set: the pause is gone. */
  wakeAll(): void {
    if (this.size === 0) return;
    const woken = [...this];
    this.clear();
    for (const wake of woken) wake();
  }
}
