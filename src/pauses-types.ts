import type { PauseCause, StoreErrorContext, StoreOperation } from './events.js';

/*
 * The types around the pauses room (pauses.ts): what it may call above it, and what a valve
 * group hands from a key's dropped valve to the key's next one (the pause it knew).
 */

/** What the pauses room may call above it (wired by valve.ts). */
export interface PausesHost {
  /** Counts and emits a 'store-error'. */
  storeError(err: unknown, operation: StoreOperation, action: StoreErrorContext['action']): void;
  /** The known pause changed: admission looks again and re-arms its timer. */
  pauseChanged(): void;
  /** The pause was deleted: a wait on a 'pause' refusal ends at once. */
  pauseDeleted(): void;
  /**
   * A 'pause' wake-up came (a cue, never trusted) with no pause known: the next store call goes
   * out now, whatever the waits say, and its answer tells.
   */
  askStore(): void;
}

/**
 * A valve's known pause, confirmed by the store and already announced, as a valve group keeps
 * it for the key's next valve once the valve is dropped: the next one knows the pause as its
 * own (its cause; the store reporting it again is no other process's pause).
 */
export interface PauseCarry {
  /** End on the (group's) clock. */
  readonly until: number;
  /** The same end as the store reported it (store clock). */
  readonly storeUntil: number;
  /** Store clock minus local clock, as the valve estimated it. */
  readonly offset: number;
  /** What produced it. */
  readonly cause: PauseCause;
}

/** What a valve offers its group of its pauses (see ValveInternals.pauses). */
export interface PauseCarrier {
  /** End of a pause this valve applied that the store has not confirmed (0 or past: none). */
  readonly unconfirmedUntil: number;
  /** The known pause the key's next valve takes over (undefined: none, or not settled). */
  carry(): PauseCarry | undefined;
  /** Takes over the key's last valve's known pause: called before this valve's first store call. */
  adopt(carry: PauseCarry): void;
}

/** One pause write of this valve: what it asked for and applied, and the epochs when it was sent. */
export interface PauseWrite {
  readonly ms: number;
  /** When it was sent (local clock). */
  readonly sentAt: number;
  /** Its end on the local clock, held until the store confirms it. */
  readonly end: number;
  readonly cause: PauseCause;
  readonly detail: unknown;
  /** The deletions counted (`resumeEpoch`) when it was sent. */
  readonly epoch: number;
  /** The 'resume' events emitted when it was sent. */
  readonly said: number;
}
