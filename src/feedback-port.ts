import type { Clock } from './clock.js';
import type { PauseSource, StoreErrorContext, StoreOperation } from './events.js';
import type { PauseCarrier } from './pauses-types.js';
import type { RulesCarry } from './rulesets.js';
import type { MaybePromise, Store, WindowTicket } from './stores/store.js';

/*
 * What the valve hands the feedback module (feedback/observe.ts, feedback/fetch.ts): the only
 * way feedback reaches the scheduler. Not exported from the package root. It sits below both:
 * feedback imports it, valve.ts implements it, and neither imports the other through it.
 */

/** Feedback settings, normalised by options.ts from `createValve({ feedback })`. */
export interface FeedbackSettings {
  /** No pause read from a header, or computed by backoff, is longer than this (ms). Default 3_600_000. */
  readonly maxPause: number;
  /** First backoff after a 429 with no usable header (ms). Default 1000. */
  readonly backoffInitial: number;
  /** Backoff doubles per consecutive header-less 429 up to this (ms). Default 60_000. */
  readonly backoffMax: number;
}

/** What the scheduler offers the feedback module. */
export interface ValveInternals {
  readonly id: string;
  readonly clock: Clock;
  readonly feedback: FeedbackSettings;
  /** The valve's maxWait (ms; Infinity for none): wrapFetch's wait for a fleet ticket ends with it too. */
  readonly maxWait: number;
  /**
   * Enqueues a job like run(), but at a given queue position: `sequence` is the call-order
   * number of an earlier attempt (so a retry goes ahead of later arrivals), or undefined
   * for a fresh one. `onSequence` receives the sequence used, synchronously.
   */
  runAt<T>(
    job: (ctx: { signal: AbortSignal }) => T | Promise<T>,
    options: { cost?: number; priority?: number; signal?: AbortSignal | undefined; maxWait?: number },
    sequence: number | undefined,
    onSequence?: (sequence: number) => void,
  ): Promise<T>;
  /** Writes a shared pause of `ms` in the background; emits 'pause' with `source`; failures emit 'store-error'. */
  pauseInBackground(ms: number, source: PauseSource, detail?: unknown): void;
  /** close() was called: a wrapped fetch returns its last answer instead of retrying. */
  isClosed(): boolean;
  /** Called, and emptied, by the valve's first close(), draining or not (a retry waiting ends). */
  readonly closeWaiters?: Set<() => void>;
  /** End of the shared pause this process knows (valve clock, epoch ms; 0 or past: none). */
  knownPauseEnd(): number;
  /**
   * What a valve group reads and hands over of the valve's pauses: a pause the store has not
   * confirmed keeps the valve; a known one goes to the key's next valve (pauses-types.ts).
   */
  readonly pauseCarrier?: PauseCarrier;
  /** What a valve group keeps of this valve's rule changes for the key's next valve (rulesets.ts). */
  rulesCarry?(): RulesCarry | undefined;
  /**
   * Called, and emptied, when the valve learns the shared pause is gone (resume(), a 'resume'
   * wake-up, a store answer that reports none where one was known): a wait that sleeps through
   * the known pause adds itself here to end with it.
   */
  readonly pauseWaiters: Set<() => void>;
  /** Emits a typed event of the valve (e.g. 'retry', 'feedback-ignored'). */
  emit(event: string, payload: unknown): void;
  /**
   * A store call the feedback module made failed (a fleet window's ticket or report: operation
   * 'window', action 'none'): counted in stats().storeErrors and emitted as 'store-error'.
   */
  storeError(err: unknown, operation: StoreOperation, action: StoreErrorContext['action']): void;
  /**
   * The valve's last acquisition failed and none has been answered since (its onStoreError
   * backoff runs; under 'open' its jobs start without the store): wrapFetch asks no fleet ticket.
   */
  storeFailing(): boolean;
  /** The provider window the id's fleet learns through the store (when the store keeps one). */
  readonly window?: FleetWindow | undefined;
}

/** Store.windowSend and Store.windowReport for the valve's id (see stores/window-record.ts). */
export interface FleetWindow {
  send(probeTtl: number): MaybePromise<WindowTicket>;
  report(seq: number, remaining: number, resetMs: number): MaybePromise<number>;
}

/** The fleet window of `id` in a store that keeps one (both methods present). */
export function windowOf(store: Store, id: string): FleetWindow {
  return {
    send: (probeTtl) => store.windowSend!(id, probeTtl),
    report: (seq, remaining, resetMs) => store.windowReport!(id, seq, remaining, resetMs),
  };
}
