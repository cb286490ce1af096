/**
 * A minimal stand-in for the engine's ValveInternals, for unit tests of the feedback
 * module without createValve: a FIFO-by-(priority, sequence) queue with a concurrency
 * limit, a local pause, and recorded pauses, events and enqueues. Time comes from the
 * given clock (a FakeClock in tests), so scheduled delays can be asserted.
 */
import type { Clock } from '../../src/clock.js';
import type { PauseSource, StoreErrorContext, StoreOperation } from '../../src/events.js';
import type { FeedbackSettings, ValveInternals } from '../../src/feedback-port.js';

interface Entry {
  job: (ctx: { signal: AbortSignal }) => unknown;
  priority: number;
  sequence: number;
  signal: AbortSignal | undefined;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
  onAbort?: () => void;
}

export interface RecordedPause {
  readonly at: number;
  readonly ms: number;
  readonly source: PauseSource;
  readonly detail: unknown;
}

export interface RecordedEnqueue {
  readonly at: number;
  readonly sequence: number;
  readonly reused: boolean;
  readonly cost: number | undefined;
  readonly priority: number | undefined;
}

export class FakeInternals implements ValveInternals {
  readonly id = 'fake';
  readonly pauses: RecordedPause[] = [];
  readonly events: { event: string; payload: unknown }[] = [];
  readonly enqueued: RecordedEnqueue[] = [];
  /** Start times of jobs, in order. */
  readonly starts: { at: number; sequence: number }[] = [];
  pausedUntil = Number.NEGATIVE_INFINITY;
  running = 0;
  private nextSequence = 1;
  private queue: Entry[] = [];
  private timer: unknown;

  constructor(
    readonly clock: Clock,
    readonly feedback: FeedbackSettings = { maxPause: 3_600_000, backoffInitial: 1000, backoffMax: 60_000 },
    readonly concurrency = Number.POSITIVE_INFINITY,
  ) {}

  knownPauseEnd(): number {
    return this.pausedUntil;
  }

  readonly maxWait = Number.POSITIVE_INFINITY;

  readonly pauseWaiters = new Set<() => void>();

  /** As the valve does when its pause is deleted. */
  resume(): void {
    this.pausedUntil = Number.NEGATIVE_INFINITY;
    const woken = [...this.pauseWaiters];
    this.pauseWaiters.clear();
    for (const wake of woken) wake();
  }

  /** Set by a test: close() was called. */
  closed = false;

  isClosed(): boolean {
    return this.closed;
  }

  eventsOf(name: string): unknown[] {
    return this.events.filter((e) => e.event === name).map((e) => e.payload);
  }

  runAt<T>(
    job: (ctx: { signal: AbortSignal }) => T | Promise<T>,
    options: { cost?: number; priority?: number; signal?: AbortSignal | undefined; maxWait?: number },
    sequence: number | undefined,
    onSequence?: (sequence: number) => void,
  ): Promise<T> {
    const seq = sequence ?? this.nextSequence++;
    onSequence?.(seq);
    this.enqueued.push({
      at: this.clock.now(),
      sequence: seq,
      reused: sequence !== undefined,
      cost: options.cost,
      priority: options.priority,
    });
    return new Promise<T>((resolve, reject) => {
      const signal = options.signal;
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const entry: Entry = {
        job,
        priority: options.priority ?? 0,
        sequence: seq,
        signal,
        resolve: resolve as (v: unknown) => void,
        reject,
      };
      if (signal) {
        entry.onAbort = () => {
          const i = this.queue.indexOf(entry);
          if (i >= 0) {
            this.queue.splice(i, 1);
            reject(signal.reason);
          }
        };
        signal.addEventListener('abort', entry.onAbort, { once: true });
      }
      this.queue.push(entry);
      this.queue.sort((a, b) => b.priority - a.priority || a.sequence - b.sequence);
      this.pump();
    });
  }

  pauseInBackground(ms: number, source: PauseSource, detail?: unknown): void {
    this.pauses.push({ at: this.clock.now(), ms, source, detail });
    this.pausedUntil = Math.max(this.pausedUntil, this.clock.now() + ms);
    this.emit('pause', { until: this.pausedUntil, source, detail });
  }

  emit(event: string, payload: unknown): void {
    this.events.push({ event, payload });
  }

  /** Store calls reported failed, as the valve counts them (stats().storeErrors). */
  readonly storeErrors: { err: unknown; operation: StoreOperation; action: StoreErrorContext['action'] }[] =
    [];

  storeError(err: unknown, operation: StoreOperation, action: StoreErrorContext['action']): void {
    this.storeErrors.push({ err, operation, action });
    this.emit('store-error', { err, operation, action });
  }

  /** Set by a test: the valve's last acquisition failed (wrapFetch asks no fleet ticket). */
  failing = false;

  storeFailing(): boolean {
    return this.failing;
  }

  private pump(): void {
    const now = this.clock.now();
    if (now < this.pausedUntil) {
      if (this.timer === undefined && this.queue.length > 0) {
        this.timer = this.clock.setTimeout(() => {
          this.timer = undefined;
          this.pump();
        }, this.pausedUntil - now);
      }
      return;
    }
    while (this.running < this.concurrency && this.queue.length > 0) {
      const entry = this.queue.shift()!;
      if (entry.signal && entry.onAbort) entry.signal.removeEventListener('abort', entry.onAbort);
      this.running++;
      this.starts.push({ at: now, sequence: entry.sequence });
      const controller = new AbortController();
      Promise.resolve()
        .then(() => entry.job({ signal: controller.signal }))
        .then(entry.resolve, entry.reject)
        .finally(() => {
          this.running--;
          this.pump();
        });
    }
  }
}
