/*
 * Every event of a valve: the payload types and the typed emitter. A leaf: it imports only the
 * feedback module's type file (feedback/types.ts, which imports nothing), so every room and the
 * feedback module may use it.
 */
import type { FeedbackIgnored, FeedbackModel } from './feedback/types.js';

export type { FeedbackIgnored, FeedbackModel, IgnoredReason } from './feedback/types.js';

/** Where a pause came from, carried on every 'pause' event. */
export type PauseSource = 'manual' | 'retry-after' | 'ratelimit-header' | 'backoff' | 'remote';

/**
 * Which store call failed, carried by every 'store-error' event ('window': a wrapFetch request's
 * fleet-window ticket or answer report, windowSend / windowReport).
 */
export type StoreOperation = 'acquire' | 'pause' | 'resume' | 'renew' | 'release' | 'subscribe' | 'window';

/** The context of a 'store-error' event. */
export interface StoreErrorContext {
  /** The store method that threw or rejected. */
  readonly operation: StoreOperation;
  /** The valve's id. */
  readonly id: string;
  /** What the valve does about it: the `onStoreError` mode for acquisitions, 'lease-lost' for renewals, 'none' otherwise. */
  readonly action?: 'wait' | 'throw' | 'open' | 'lease-lost' | 'none';
}

/** Payload of the 'pause' event. */
export interface PauseEvent {
  /** End of the pause, epoch ms (the store's answer when it confirmed the pause). */
  readonly until: number;
  /** Where the pause came from. */
  readonly source: PauseSource;
  /** For a pause read from a response: the lower-case name of the header that gave the wait. */
  readonly header?: string | undefined;
  /** For a pause read from a response: how that header describes the limit (see FeedbackModel). */
  readonly model?: FeedbackModel | undefined;
  /** What the feedback module read (for header and backoff pauses), if anything. */
  readonly detail?: unknown;
}

/** What produced the known pause, in stats(): the source, and for feedback pauses the header and its model. */
export interface PauseCause {
  readonly source: PauseSource;
  readonly header: string | undefined;
  readonly model: FeedbackModel | undefined;
}

/** Payload of the 'resume' event. */
export interface ResumeEvent {
  /** 'manual' for this valve's resume(); 'remote' when another valve's resume was noticed. */
  readonly source: 'manual' | 'remote';
}

/** Payload of the 'lease-lost' event. */
export interface LeaseLostEvent {
  readonly token: string;
  readonly fence: number;
  /** Why: the store no longer held it, the renewal call failed, or no renewal answered before it expired. */
  readonly reason: 'not-held' | 'renew-failed' | 'expired';
  /** The renewal's error, for 'renew-failed'. */
  readonly error?: unknown;
}

/** Payload of the 'retry' event. */
export interface FetchRetryEvent {
  /** 1 for the first retry. */
  readonly attempt: number;
  /** Status of the response that caused the retry (429 or 503). */
  readonly status: number;
  /** The pause observe() wrote for it (ms); 0 when none. */
  readonly waitMs: number;
  readonly url: string;
  /** Where that pause's length came from (the reading's source). */
  readonly source: 'retry-after' | 'ratelimit-header' | 'backoff' | undefined;
}

/** A rule as the 'rule-mismatch' event describes it (the same shape as a rule option). */
export interface MismatchedRule {
  readonly limit: number;
  /** Milliseconds. */
  readonly interval: number;
  readonly algorithm?: 'gcra' | 'fixed-window' | 'sliding-window' | undefined;
  readonly burst?: number | undefined;
}

/** Payload of the 'rule-mismatch' event. */
export interface RuleMismatchEvent {
  /** The valve's id. */
  readonly id: string;
  /** The valve's rules. */
  readonly rules: readonly MismatchedRule[];
  /** The rules the store had recorded for the id (another process's, or this one's before a change elsewhere). */
  readonly recorded: readonly MismatchedRule[];
}

/** Every event of a valve and its listener arguments. There is deliberately no 'error' event. */
export interface ValveEvents {
  'store-error': [error: unknown, context: StoreErrorContext];
  pause: [event: PauseEvent];
  resume: [event: ResumeEvent];
  'lease-lost': [event: LeaseLostEvent];
  /** wrapFetch() queued a request again after a 429 or 503. */
  retry: [event: FetchRetryEvent];
  /** observe() read a header value it did not use as sent (nonsense, capped, in the past…). */
  'feedback-ignored': [event: FeedbackIgnored];
  /** The queue is empty and no job is running (emitted on each transition to idle). */
  idle: [];
  /** The store holds other rules for this id: another process uses it with other rules (once per rule change). */
  'rule-mismatch': [event: RuleMismatchEvent];
}

export type ValveEventName = keyof ValveEvents;

/** The names of {@link ValveEvents}, for checking a name at run time. */
export const EVENT_NAMES: ReadonlySet<string> = new Set<ValveEventName>([
  'store-error',
  'pause',
  'resume',
  'lease-lost',
  'retry',
  'feedback-ignored',
  'idle',
  'rule-mismatch',
]);
export type ValveListener<E extends ValveEventName> = (...args: ValveEvents[E]) => void;

type AnyListener = (...args: unknown[]) => void;

/** A `once` wrapper remembers the original listener so off(original) removes it. */
interface OnceWrapper extends AnyListener {
  listener: AnyListener;
}

/**
 * A tiny typed emitter. Listener arrays are copy-on-write, so a listener may add or
 * remove listeners while an event is being delivered.
 *
 * A listener that throws (or an async listener that rejects) does not disturb the valve
 * or the other listeners: the exception is caught and reported with `process.emitWarning` (visible on stderr and
 * through `process.on('warning')`), never rethrown into the scheduler and never
 * turned into an uncaught exception.
 */
export class Emitter {
  private readonly listeners = new Map<string, AnyListener[]>();

  has(event: string): boolean {
    return this.listeners.has(event);
  }

  on(event: string, listener: AnyListener): void {
    const list = this.listeners.get(event);
    this.listeners.set(event, list === undefined ? [listener] : [...list, listener]);
  }

  once(event: string, listener: AnyListener): void {
    const wrapper = ((...args: unknown[]) => {
      this.off(event, wrapper);
      return listener(...args); // an async listener's promise reaches emit()
    }) as OnceWrapper;
    wrapper.listener = listener;
    this.on(event, wrapper);
  }

  off(event: string, listener: AnyListener): void {
    const list = this.listeners.get(event);
    if (list === undefined) return;
    const i = list.findIndex((l) => l === listener || (l as Partial<OnceWrapper>).listener === listener);
    if (i < 0) return;
    if (list.length === 1) this.listeners.delete(event);
    else
      this.listeners.set(
        event,
        list.filter((_, j) => j !== i),
      );
  }

  /** Emits an event of two arguments ('store-error'), both passed even when the first is undefined. */
  emit2(event: string, a: unknown, b: unknown): void {
    const list = this.listeners.get(event);
    if (list === undefined) return;
    for (const listener of list) {
      try {
        const result: unknown = listener(a, b);
        if (result !== undefined) catchRejection(event, result);
      } catch (err) {
        reportListenerError(event, err);
      }
    }
  }

  emit(event: string, a?: unknown, b?: unknown): void {
    const list = this.listeners.get(event);
    if (list === undefined) return;
    for (const listener of list) {
      try {
        const result: unknown = a === undefined ? listener() : b === undefined ? listener(a) : listener(a, b);
        // An async listener that rejects is reported like one that throws, never left unhandled.
        if (result !== undefined) catchRejection(event, result);
      } catch (err) {
        reportListenerError(event, err);
      }
    }
  }
}

function catchRejection(event: string, result: unknown): void {
  if (
    result !== null &&
    (typeof result === 'object' || typeof result === 'function') &&
    typeof (result as { then?: unknown }).then === 'function'
  ) {
    (result as PromiseLike<unknown>).then(undefined, (err: unknown) => reportListenerError(event, err));
  }
}

function reportListenerError(event: string, err: unknown): void {
  try {
    const warning = new Error(`A listener of the valve event '${event}' threw`, { cause: err });
    warning.name = 'ValveListenerError';
    const proc = (globalThis as { process?: { emitWarning?: (w: Error) => void } }).process;
    if (typeof proc?.emitWarning === 'function') proc.emitWarning(warning);
  } catch {
    // Reporting must never throw into the scheduler.
  }
}
