import type { Clock } from './clock.js';
import { ValveError } from './errors.js';
import type { Emitter, PauseCause, PauseSource } from './events.js';
import { isThenable } from './maybe-promise.js';
import { pauseMs, pauseOrigin } from './pause-args.js';
import { PauseWaiters } from './pause-waiters.js';
import type { PauseCarrier, PauseCarry, PausesHost, PauseWrite } from './pauses-types.js';
import { ResumeEcho } from './resume-echo.js';
import { checkWrite, StoreOffset } from './store-clock.js';
import type { AcquireResult, Store } from './stores/store.js';

export { pauseOrigin } from './pause-args.js';

/*
 * The local view of the shared pause: the cached end of the pause, the epochs that guard it
 * against store answers sent before it changed, and the writes of pause() and resume().
 * See docs/architecture.md, "The scheduler".
 *
 * A pause is applied locally at once (this process stops admitting) and then written to the
 * store. Until the store confirms it (the write failed, or is still in flight) it is also held
 * apart as `heldUntil`, which no store answer clears (the store may not have it): only
 * resume(), a 'resume' wake-up or its end do. So a failed write keeps this process paused for
 * the whole pause (it only ever delays this process).
 *
 * A 'pause' event announces an end (store clock) later than any announced since the pause was
 * last cleared (`reported`): a write the store answered with an end it already had applied
 * nothing. While this valve's writes are in flight, a pause learnt from the store may be one of
 * theirs (applied before the write's answer came): it is held as `unclaimed`, and the
 * write answering that end or a later one claims it (cause and event are the write's); one left
 * once they all answered is another process's ('remote'). The later end names the cause. A
 * write answered with a later end than its own (a longer pause was there: store-clock.ts tells)
 * learns that pause as another process's.
 */

const REMOTE: PauseCause = { source: 'remote', header: undefined, model: undefined };

export class Pauses implements PauseCarrier {
  /** End of the known shared pause on the local clock (an estimate); 0 after a resume or an answer that reports none. */
  private localUntil = 0;
  /** When (local clock) the known pause was last raised or confirmed (see `heardAt`). */
  private lastHeard = 0;
  /** The same end as the store reported it (store clock); the largest seen since the pause was last cleared. */
  private storeUntil = 0;
  /** Bumped whenever this process raises localUntil: an acquisition sent before cannot clear it. */
  private raises = 0;
  /** Bumped by resume() and by a 'resume' wake-up: a store answer sent before cannot bring back the pause it deleted. */
  private resumes = 0;
  /** This valve's pause writes in flight: a pause learnt meanwhile may be theirs (`unclaimed`). */
  private ownWrites = 0;
  /** The latest end (store clock) a 'pause' event announced since the pause was last cleared. */
  private reported = 0;
  /** The latest end (store clock) learnt from the store while writes were in flight, after `reported`: maybe theirs. */
  private unclaimed = 0;
  /** 'resume' events emitted: a write answered after one emitted since it was sent announces nothing. */
  private resumeEvents = 0;
  /** `reported` when the pause was last deleted: a write answered after that, before its 'resume', is announced only beyond it. */
  private deletedReported = 0;
  /** The store's clock minus the local clock, as estimated (store-clock.ts). */
  private readonly offset = new StoreOffset();
  /** What produced the latest known end (this valve's write, or 'remote' for a longer pause learnt from the store); null once cleared. */
  private cause: PauseCause | null = null;
  /**
   * End (local clock) of the longest pause this valve applied that the store has not confirmed:
   * its write failed or is in flight. Store answers never clear it (the store may not have it);
   * resume(), a 'resume' wake-up or its end do. 0: none.
   */
  private heldUntil = 0;
  /** What applied heldUntil. */
  private heldCause: PauseCause | null = null;
  /** This valve's resume() in flight: a 'pause' wake-up meanwhile asks the store once it answered (resume-echo.ts). */
  private readonly echo = new ResumeEcho();
  /**
   * Called, and emptied, when this valve learns the pause is gone: resume(), a 'resume' wake-up,
   * or a store answer that reports none where a pause was known. A wait that sleeps through the
   * known pause (wrapFetch's fleet ticket) or a backoff pause (feedback/backoff.ts) adds itself
   * here to end with it.
   */
  readonly waiters = new PauseWaiters();

  constructor(
    /** The valve's id: the pause is shared by every valve of this id. */
    private readonly id: string,
    /** Where the shared pause lives. */
    private readonly store: Store,
    /** The valve's clock: localUntil is on it. */
    private readonly clock: Clock,
    /** Emits 'pause' and 'resume'. */
    private readonly events: Emitter,
    /** The valve above. */
    private readonly host: PausesHost,
  ) {}

  /** End of the known pause on the local clock, held or learnt from the store (0 or past: none). */
  get until(): number {
    return Math.max(this.heldUntil, this.localUntil);
  }

  /** Whether a pause is known now (cached or held). */
  get known(): boolean {
    return this.until > this.clock.now();
  }

  /** End of the pause as cached from the store and this valve's writes: a store answer may clear it. */
  get cachedUntil(): number {
    return this.localUntil;
  }

  /** End of a pause this valve applied that the store has not confirmed: no store answer clears it. */
  get unconfirmedUntil(): number {
    return this.heldUntil;
  }

  /** When (local clock) this process last applied, wrote or learnt the known pause. */
  get heardAt(): number {
    return this.lastHeard;
  }

  /** What produced the known pause (see `until`), or null. */
  get origin(): PauseCause | null {
    return this.heldUntil !== 0 && this.heldUntil >= this.localUntil ? this.heldCause : this.cause;
  }

  /** Changes whenever this process raises its known pause (a store call remembers it when sent). */
  get raiseEpoch(): number {
    return this.raises;
  }

  /** Changes whenever the pause is deleted (a store call remembers it when sent). */
  get resumeEpoch(): number {
    return this.resumes;
  }

  /** The known pause, confirmed and announced, for the key's next valve (a group's; undefined: none). */
  carry(): PauseCarry | undefined {
    const { localUntil: until, cause } = this;
    if (until <= this.clock.now() || this.ownWrites > 0 || this.unclaimed !== 0) return undefined;
    return { until, storeUntil: this.storeUntil, offset: this.offset.value, cause: cause ?? REMOTE };
  }

  /**
   * Takes over the key's last valve's known pause, before any store call: the store reporting it
   * is no other process's pause. Not heard of yet (heardAt 0): the first job asks the store.
   */
  adopt(c: PauseCarry): void {
    this.localUntil = c.until;
    this.storeUntil = this.reported = c.storeUntil;
    this.offset.value = c.offset;
    this.cause = c.cause;
  }

  /** valve.pause(): validates, applies and writes the pause; resolves once the store recorded it. */
  pause(duration: unknown): Promise<void> {
    let ms: number;
    try {
      ms = pauseMs(duration, this.clock.now());
    } catch (err) {
      return Promise.reject(err);
    }
    if (ms <= 0) return Promise.resolve();
    return this.write(ms, 'manual', undefined, true) as Promise<void>;
  }

  /** A pause read by the feedback module: applied at once, written in the background. */
  pauseInBackground(ms: number, source: PauseSource, detail: unknown): void {
    if (!(ms > 0) || ms === Number.POSITIVE_INFINITY) return;
    void this.write(ms, source, detail, false);
  }

  /** valve.resume(): forgets the pause at once, then deletes it on the store. */
  resume(): Promise<void> {
    this.resumes++;
    const deletion = this.echo.deleted();
    this.deletedReported = this.reported;
    this.forget();
    this.heldUntil = 0;
    this.heldCause = null;
    this.deleted();
    this.host.pauseChanged();
    let result: unknown;
    try {
      result = this.store.resume(this.id);
    } catch (err) {
      this.echo.resumeFailed(deletion);
      return Promise.reject(this.storeFailure(err, 'resume'));
    }
    if (isThenable(result)) {
      return Promise.resolve(result).then(
        () => this.resumed(deletion),
        (err: unknown) => {
          this.echo.resumeFailed(deletion);
          throw this.storeFailure(err, 'resume');
        },
      );
    }
    this.resumed(deletion);
    return Promise.resolve();
  }

  /**
   * An acquisition answered: learns the store's clock offset and its view of the pause. The call
   * was sent at `sentAt` with the epochs it remembered. Returns whether the pause was deleted
   * since it was sent (its refusal for a pause is then stale).
   */
  answered(r: AcquireResult, sentAt: number, now: number, raiseEpoch: number, resumeEpoch: number): boolean {
    this.offset.told(r.now, sentAt, now);
    // A resume() called while this acquisition was in flight deleted the pause it may report.
    const resumedSince = resumeEpoch !== this.resumes;
    if (typeof r.pausedUntil === 'number' && r.pausedUntil > 0) {
      if (!resumedSince) this.learn(r.pausedUntil);
    } else if (this.localUntil !== 0 && raiseEpoch === this.raises) {
      // The store had the pause and it had not ended on its clock: another valve resumed it.
      const storeUntil = this.storeUntil;
      const resumed =
        storeUntil > 0 &&
        (typeof r.now === 'number' && Number.isFinite(r.now) ? r.now < storeUntil : this.localUntil > now);
      this.forget();
      if (resumed) this.emitResume('remote');
      // The pause is gone unless one this valve applied is still held (the store lacks it).
      if (this.heldUntil <= now) this.waiters.wakeAll();
    }
    return resumedSince;
  }

  /**
   * Records a pause the store reported (store-clock epoch ms) in an acquisition's answer. Ending
   * later than any announced, it is another process's, and emits a 'remote' 'pause' event; or,
   * while this valve's writes are in flight, maybe one of theirs: held until they answer.
   */
  private learn(storeUntil: number): void {
    this.raise(storeUntil);
    if (storeUntil <= this.reported) return;
    if (this.ownWrites === 0) this.remote(storeUntil);
    else if (storeUntil > this.unclaimed) this.unclaimed = storeUntil;
    // Until they answer, the cause is a guess: the write planned to end as late, else another process.
    const ours = this.heldUntil !== 0 && this.heldUntil + this.offset.value >= storeUntil;
    if (this.ownWrites > 0 && storeUntil >= this.storeUntil) this.cause = ours ? this.heldCause : REMOTE;
  }

  /**
   * A 'pause' wake-up: a cue, never trusted (channels are server-wide: another database or
   * keyPrefix sends the same; anyone may publish). Without a known pause, with jobs queued, the
   * store is asked now (or once this valve's resume() answered: an answer before may show the
   * deleted pause), and its answer is cached as any other. A known pause holds the queue anyway
   * and is checked with the store at its end (or PAUSE_TRUST): the end the message announces is unused.
   */
  heard(): void {
    if (this.until > this.clock.now()) return;
    if (this.echo.echoed()) this.host.askStore();
  }

  /** A 'resume' wake-up: another valve deleted the pause. */
  resumedRemotely(): void {
    // Answers already on the wire may predate this resume: they report, but do not re-cache, a pause.
    this.resumes++;
    const had = this.until > this.clock.now();
    // Not lowered: resume() may have forgotten what was announced before this, its own wake-up.
    if (this.reported > this.deletedReported) this.deletedReported = this.reported;
    this.forget();
    this.heldUntil = 0;
    this.heldCause = null;
    this.deleted();
    if (had) this.emitResume('remote');
  }

  /** Forgets the cached pause (not the held one): deleted, or the store reports none. */
  private forget(): void {
    this.localUntil = 0;
    this.storeUntil = 0;
    this.cause = null;
    this.reported = 0;
    this.unclaimed = 0;
  }

  private emitResume(source: 'manual' | 'remote'): void {
    this.resumeEvents++;
    this.events.emit('resume', { source });
  }

  /** The pause was deleted: admission's wait on it ends, and so do the waits in `waiters`. */
  private deleted(): void {
    this.host.pauseDeleted();
    this.waiters.wakeAll();
  }

  /** Applies a pause locally at once, then writes it to the store. */
  private write(
    ms: number,
    source: PauseSource,
    detail: unknown,
    confirm: boolean,
  ): Promise<void> | undefined {
    const now = this.clock.now();
    this.lastHeard = now;
    const end = now + ms;
    const cause: PauseCause = { source, ...pauseOrigin(detail) };
    if (end > this.localUntil) {
      this.localUntil = end;
      this.raises++;
      this.cause = cause;
    }
    // Held until the store confirms it: an answer of a store that never got it cannot clear it.
    if (end > this.heldUntil) {
      this.heldUntil = end;
      this.heldCause = cause;
    }
    this.host.pauseChanged();
    let result: unknown;
    try {
      const { header } = pauseOrigin(detail);
      result = this.store.pause(this.id, ms, header === undefined ? source : `${source} (${header})`);
    } catch (err) {
      const error = this.storeFailure(err, 'pause');
      return confirm ? Promise.reject(error) : undefined;
    }
    const said = this.resumeEvents;
    const w: PauseWrite = { ms, sentAt: now, end, cause, detail, epoch: this.resumes, said };
    this.ownWrites++;
    if (!isThenable(result)) {
      const checked = this.check(result, w);
      return confirm ? (checked ?? Promise.resolve()) : undefined;
    }
    const done = Promise.resolve(result).then(
      (until) => this.check(until, w),
      (err: unknown) => {
        this.ownWrites--;
        // The store may have applied it (the answer lost): a pause learnt meanwhile ending no later is its own.
        if (this.resumes === w.epoch && this.unclaimed !== 0 && this.unclaimed <= end + this.offset.value)
          this.written(this.unclaimed, cause, detail);
        this.settle();
        const error = this.storeFailure(err, 'pause');
        if (confirm) throw error;
      },
    );
    return confirm ? done : undefined;
  }

  /**
   * Write `w` answered `until` (store clock). An end not announced yet that may be a longer pause's
   * is checked with a read of the store's clock first (store-clock.ts): returns that read's promise.
   */
  private check(until: unknown, w: PauseWrite): Promise<void> | undefined {
    const fresh = typeof until === 'number' && Number.isFinite(until) && until > this.reported;
    if (!fresh || this.resumes !== w.epoch) {
      this.answer(until, w, false);
      return undefined;
    }
    const { raises, resumes } = this;
    return checkWrite(this.store, this.id, this.clock, this.offset, until, w, (longer, read) => {
      const untouched = this.raises === raises;
      this.answer(until, w, longer);
      if (read === undefined) return;
      // The read is the store's view after the write: cached as any other answer.
      this.answered(read.result, read.sentAt, read.answeredAt, untouched ? this.raises : raises, resumes);
      this.host.pauseChanged();
    });
  }

  /**
   * Write `w` answered `until`; `longer`: the end of a longer pause already there, another
   * process's (announced 'remote' if not yet; the write applied nothing the store lacked). A
   * resume() called after the write deleted the pause: not kept, and announced only if it is
   * the write's own, no 'resume' came since it was sent (the pending resume's follows) and it
   * ends later than what was announced before the deletion.
   */
  private answer(until: unknown, w: PauseWrite, longer: boolean): void {
    this.ownWrites--;
    if (!longer) this.offset.ownEnd(until, w.ms, w.sentAt, this.clock.now());
    const kept = this.resumes === w.epoch;
    if (kept) this.confirmed(w.end);
    // Another process's longer pause is learnt (announced if not yet) as from an acquisition.
    if (kept) this.written(until, longer ? REMOTE : w.cause, longer ? undefined : w.detail);
    const late = !longer && this.resumeEvents === w.said;
    if (!kept && late && typeof until === 'number' && until > this.deletedReported) {
      this.deletedReported = until;
      this.paused(until, w.cause.source, w.detail);
    }
    this.settle();
  }

  /**
   * A write of this valve answered `until` (store clock), no resume since. It claims a pause
   * learnt meanwhile that ends no later (the store applied it before answering), and is
   * announced only if it ends later than any announced (it applied or extended the pause).
   * `cause` REMOTE: the end of another process's longer pause, which the write met.
   */
  private written(until: unknown, cause: PauseCause, detail: unknown): void {
    if (typeof until !== 'number' || !Number.isFinite(until)) return;
    this.raise(until);
    if (until >= this.unclaimed) this.unclaimed = 0;
    if (until <= this.reported) return;
    this.reported = until;
    if (until >= this.storeUntil) this.cause = cause;
    this.paused(until, cause.source, detail);
  }

  /** Once this valve's writes all answered, a pause learnt meanwhile that none of them claimed is another process's. */
  private settle(): void {
    if (this.ownWrites > 0 || this.unclaimed === 0) return;
    const until = this.unclaimed;
    this.unclaimed = 0;
    if (until > this.reported) this.remote(until);
  }

  /** Another process's pause, ending at `until` (store clock), later than any announced. */
  private remote(until: number): void {
    this.reported = until;
    if (until >= this.storeUntil) this.cause = REMOTE;
    if (until - this.offset.value > this.clock.now()) this.events.emit('pause', { until, source: 'remote' });
  }

  /** Raises the cached pause to `storeUntil` (store clock). */
  private raise(storeUntil: number): void {
    const local = storeUntil - this.offset.value;
    this.lastHeard = this.clock.now();
    if (storeUntil > this.storeUntil) this.storeUntil = storeUntil;
    if (local > this.localUntil) {
      this.localUntil = local;
      this.raises++;
    }
  }

  /** The store recorded a pause this valve applied until `end`: a longer one still unconfirmed stays held. */
  private confirmed(end: number): void {
    if (end >= this.heldUntil) {
      this.heldUntil = 0;
      this.heldCause = null;
    }
  }

  private paused(until: unknown, source: PauseSource, detail: unknown): void {
    if (typeof until !== 'number' || !Number.isFinite(until)) return;
    this.events.emit(
      'pause',
      detail === undefined ? { until, source } : { until, source, ...pauseOrigin(detail), detail },
    );
  }

  private resumed(deletion: number): void {
    // A 'pause' wake-up came while the call was in flight: the store is asked now.
    if (this.echo.resumed(deletion)) this.host.askStore();
    this.emitResume('manual');
  }

  /** Reports a failed pause/resume and returns the error its promise rejects with. */
  private storeFailure(err: unknown, operation: 'pause' | 'resume'): ValveError {
    this.host.storeError(err, operation, 'none');
    return new ValveError('STORE_UNAVAILABLE', `The store failed to ${operation}`, { cause: err });
  }
}
