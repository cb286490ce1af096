/*
 * After this valve's resume(), the store's 'pause' wake-up of the pause it deleted may still be
 * on its way (published before the resume, delivered after it): the echo. This room tells, for
 * each 'pause' wake-up, whether it may be that echo (dropped), must wait for the answer of a
 * pause write sent before the resume (deferred), or is a pause of its own (learnt). Owned by
 * the pauses room (pauses.ts), which learns what this one lets through.
 *
 * Narrow on purpose: a pause another process writes later may end earlier than the deleted one,
 * and must be heard. So the echo is expected only while store.resume is in flight (at most
 * PENDING_MS) and for ECHO_MS after it or a write sent before it answered; never after
 * store.resume failed (the pause may still be there); not on a subscription taken since (it
 * cannot carry what was sent before); and not after a 'resume' wake-up (the resume's own, which
 * follows the echo: wake-ups are delivered in order).
 */

/**
 * How long after resume() succeeded (local clock, ms) a 'pause' wake-up ending no later than the
 * deleted pause is taken for its echo: it was published before the resume, so it comes within
 * the store's latency. Later, it is a pause of its own.
 */
const ECHO_MS = 2000;
/** The same while the resume call is still in flight: its answer usually shortens it to ECHO_MS. */
const PENDING_MS = 30_000;

/** What to do with a 'pause' wake-up (see ResumeEcho.verdict). */
export type EchoVerdict = 'echo' | 'deferred' | 'heard';

export class ResumeEcho {
  /** End (store clock) of the pause the last resume() deleted; 0: no echo expected. */
  private deletedUntil = 0;
  /** Until when (local clock) deletedUntil holds. */
  private deletedBy = 0;
  /** The resume() calls: a write remembers it, to tell which resume it predates. */
  private deletions = 0;
  /** Whether the last resume()'s store call is still in flight. */
  private deleting = false;
  /** This valve's pause writes sent before the last resume() and not answered yet. */
  private staleWrites = 0;
  /**
   * The latest end (store clock) of 'pause' wake-ups heard while staleWrites were in flight,
   * ending after deletedUntil: maybe one of those writes' own (the store decided it later than
   * this process estimated). Learnt once they answered, unless one of them reports that end.
   */
  private deferredUntil = 0;
  /** An echo was dropped while store.resume was in flight: the store is asked once it answers. */
  private askAfterResume = false;

  /** The resume() calls so far: a write or a resume call remembers it when sent. */
  get deletion(): number {
    return this.deletions;
  }

  /**
   * resume() deletes the pause ending at `deletedUntil` (store clock), `writes` of this valve's
   * pause writes still in flight, at `now` (local clock). Returns this deletion's number.
   */
  deleted(deletedUntil: number, writes: number, now: number): number {
    this.deletedUntil = deletedUntil;
    this.deletedBy = now + PENDING_MS;
    this.deleting = true;
    this.staleWrites = writes;
    this.deferredUntil = 0;
    this.askAfterResume = false;
    return ++this.deletions;
  }

  /**
   * store.resume of deletion `deletion` answered at `now`: the echo comes within ECHO_MS.
   * Returns whether the store should be asked now (an echo dropped meanwhile may have been
   * another valve's pause).
   */
  resumed(deletion: number, now: number): boolean {
    if (deletion !== this.deletions) return false;
    this.deleting = false;
    if (this.deletedUntil > 0) this.deletedBy = now + ECHO_MS;
    return this.takeAsk();
  }

  /**
   * An echo was dropped: whether the store should be asked now. Not while store.resume is in
   * flight (an answer then may still show the pause being deleted): once it answers.
   */
  echoed(): boolean {
    if (!this.deleting) return true;
    this.askAfterResume = true;
    return false;
  }

  /**
   * store.resume of deletion `deletion` failed: the pause may still be on the store, so its
   * wake-ups are heard again. Returns a deferred wake-up's end to learn now, or 0.
   */
  resumeFailed(deletion: number, now: number): number {
    if (deletion !== this.deletions) return 0;
    this.deleting = false;
    this.askAfterResume = false;
    this.deletedUntil = 0;
    this.deletedBy = 0;
    return this.takeDeferred(now);
  }

  /** A new subscription started: nothing sent before the last resume can come through it. */
  subscribed(): void {
    if (!this.deleting && this.staleWrites === 0) this.clear();
  }

  /** A 'resume' wake-up: any later 'pause' wake-up is for a pause written after it. */
  clear(): void {
    this.deletedUntil = 0;
    this.deletedBy = 0;
    this.deferredUntil = 0;
  }

  /** What to do with a 'pause' wake-up ending at `storeUntil` (store clock), heard at `now`. */
  verdict(storeUntil: number, now: number): EchoVerdict {
    if (!this.active(now)) return 'heard';
    // Sent before the resume (within the store's latency): the deleted pause's echo, or another
    // valve's shorter pause written since (the pauses room asks the store).
    if (storeUntil <= this.deletedUntil) return 'echo';
    // Maybe a write sent before the resume, decided later than estimated: its answer tells.
    if (this.staleWrites > 0) {
      if (storeUntil > this.deferredUntil) this.deferredUntil = storeUntil;
      return 'deferred';
    }
    return 'heard';
  }

  /**
   * A pause write sent at deletion `sentAt` (see `deletion`) answered `until` (store clock), or
   * failed (undefined), at `now`. Returns a deferred wake-up's end to learn now, or 0.
   */
  writeSettled(sentAt: number, until: unknown, now: number): number {
    if (sentAt === this.deletions) return 0;
    if (until !== undefined && this.active(now)) {
      // The echo of this write ends where its answer says.
      if (typeof until === 'number' && until > this.deletedUntil) this.deletedUntil = until;
      if (!this.deleting) this.deletedBy = Math.max(this.deletedBy, now + ECHO_MS);
    }
    if (this.staleWrites > 0) this.staleWrites--;
    return this.takeDeferred(now);
  }

  private takeAsk(): boolean {
    const ask = this.askAfterResume;
    this.askAfterResume = false;
    return ask;
  }

  /** Whether a 'pause' wake-up ending by deletedUntil is still taken for the echo. */
  private active(now: number): boolean {
    if (this.deletedUntil === 0) return false;
    if (now < this.deletedBy) return true;
    this.deletedUntil = 0;
    return false;
  }

  /** A wake-up held back for the stale writes' answers, once they all answered; 0 when none. */
  private takeDeferred(now: number): number {
    const deferred = this.deferredUntil;
    if (deferred === 0 || this.staleWrites > 0) return 0;
    this.deferredUntil = 0;
    if (this.active(now) && deferred <= this.deletedUntil) return 0;
    return deferred;
  }
}
