/**
 * When admission runs: in a microtask after whatever asked for it, never nested. A run asked
 * for while one is in progress (or while a store answer is processed: hold()) becomes one more
 * round of it, so the line is never changed mid-processing. Owned by the admission room.
 */
/**
 * A settled promise: `.then` on it queues the run as a microtask, in the same queue and order as
 * queueMicrotask would, without the AsyncResource and bound function Node's queueMicrotask
 * allocates per call (a valve group with thousands of keys schedules one run per job).
 */
const settled = Promise.resolve();

/** A run that threw: thrown again where nothing catches it, as from queueMicrotask. */
function rethrow(err: unknown): void {
  queueMicrotask(() => {
    throw err;
  });
}

export class Pump {
  /** A run is queued as a microtask. */
  private scheduled = false;
  /** A run, or a held section, is in progress: runs asked for meanwhile are deferred. */
  private running = false;
  /** A run was asked for while running: the run in progress does another round. */
  private runRequested = false;

  constructor(
    /** One admission round: true when it made progress and another may help. */
    private readonly round: () => boolean,
    /** Called once the rounds of a run are done (arms the timer, reports idle). */
    private readonly after: () => void,
  ) {}

  /** A run was asked for while running (see hold()). */
  get deferred(): boolean {
    return this.runRequested;
  }

  /** Runs in a microtask (or as one more round of the run in progress). */
  schedule(): void {
    if (this.running) {
      this.runRequested = true;
      return;
    }
    if (this.scheduled) return;
    this.scheduled = true;
    void settled.then(this.task);
  }

  private readonly task = (): void => {
    this.scheduled = false;
    try {
      this.run();
    } catch (err) {
      rethrow(err);
    }
  };

  /** Runs now: rounds until none makes progress, then `after`. */
  run(): void {
    if (this.running) {
      this.runRequested = true;
      return;
    }
    this.running = true;
    try {
      do {
        this.runRequested = false;
        while (this.round()) {
          // Each round is one synchronous store answer or a store-less start.
        }
      } while (this.runRequested);
    } finally {
      this.running = false;
    }
    this.after();
  }

  /** Enters a section in which runs asked for are deferred; true when it is the outermost. */
  hold(): boolean {
    const outer = !this.running;
    this.running = true;
    return outer;
  }

  /** Leaves the section entered by hold(), which returned `outer`. */
  unhold(outer: boolean): void {
    if (outer) this.running = false;
  }
}
