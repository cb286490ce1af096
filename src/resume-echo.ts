/*
 * This valve's resume() while its store call is in flight. A 'pause' wake-up is only a cue to
 * ask the store (Pauses.heard), but an answer decided before store.resume may still show the
 * pause being deleted (and cache it again): so while that call travels, the ask waits for its
 * answer. Owned by the pauses room (pauses.ts).
 */

export class ResumeEcho {
  /** The resume() calls: a resume call remembers it when sent, to tell whether it is the last. */
  private deletions = 0;
  /** Whether the last resume()'s store call is still in flight. */
  private deleting = false;
  /** A 'pause' wake-up came while store.resume was in flight: the store is asked once it answers. */
  private askAfterResume = false;

  /** resume() sends its store call. Returns this deletion's number. */
  deleted(): number {
    this.deleting = true;
    this.askAfterResume = false;
    return ++this.deletions;
  }

  /**
   * store.resume of deletion `deletion` answered. Returns whether the store should be asked now
   * (a 'pause' wake-up came meanwhile: another valve's pause, maybe).
   */
  resumed(deletion: number): boolean {
    if (deletion !== this.deletions) return false;
    this.deleting = false;
    return this.takeAsk();
  }

  /**
   * A 'pause' wake-up came: whether the store should be asked now. Not while store.resume is in
   * flight (an answer then may still show the pause being deleted): once it answers.
   */
  echoed(): boolean {
    if (!this.deleting) return true;
    this.askAfterResume = true;
    return false;
  }

  /** store.resume of deletion `deletion` failed: nothing to wait for any more. */
  resumeFailed(deletion: number): void {
    if (deletion !== this.deletions) return;
    this.deleting = false;
    this.askAfterResume = false;
  }

  private takeAsk(): boolean {
    const ask = this.askAfterResume;
    this.askAfterResume = false;
    return ask;
  }
}
