/*
 * One 'abort' listener per caller's signal, however many requests share it (a shutdown signal
 * given to every request), for what wrapFetch() and valve/octokit hang on it:
 *
 * - anySignal(a, b): a signal that aborts when `a` or `b` does, with that signal's reason, as
 *   `AbortSignal.any([b, a])` does, but without what `AbortSignal.any` costs a long-lived source:
 *   Node (20.x) keeps in each source signal a WeakRef to every signal ever combined from it, until
 *   the source itself is collected, so such a signal grew by about 60 bytes per wrapped request.
 *   Here a source's Fan holds its combined signals weakly: one that is collected leaves its fans
 *   (a FinalizationRegistry).
 * - onAbort(signal, fn): calls `fn` with the signal's reason when it aborts, until the returned
 *   function is called (valve/octokit's waits).
 *
 * A fan left with nothing removes its listener and is forgotten. (valve's own queue has its own
 * listener per signal and valve: src/signals.ts.)
 */

/** One combined signal: its controller (weakly) and the fans of its two sources. */
interface Link {
  readonly controller: WeakRef<AbortController>;
  readonly fans: Fan[];
}

/** The one listener on a source signal, with what follows it. */
class Fan {
  /** The combined signals that follow the source. */
  readonly links = new Set<Link>();
  /** The functions told of its abort (onAbort). */
  readonly fns = new Set<(reason: unknown) => void>();

  constructor(private readonly source: AbortSignal) {
    source.addEventListener('abort', this);
  }

  /** A combined signal no longer follows this source: the last one out removes the listener. */
  remove(link: Link): void {
    if (this.links.delete(link)) this.unlistenIfEmpty();
  }

  unlistenIfEmpty(): void {
    if (this.links.size === 0 && this.fns.size === 0) this.unlisten();
  }

  private unlisten(): void {
    if (fans.get(this.source) === this) fans.delete(this.source);
    this.source.removeEventListener('abort', this);
  }

  handleEvent(): void {
    this.unlisten();
    const reason = this.source.reason;
    // Snapshots: what runs now may combine or listen again.
    const fns = [...this.fns];
    const links = [...this.links];
    this.fns.clear();
    this.links.clear();
    for (const fn of fns) fn(reason);
    for (const link of links) {
      for (const fan of link.fans) if (fan !== this) fan.remove(link);
      collected.unregister(link);
      const controller = link.controller.deref();
      if (controller !== undefined && !controller.signal.aborted) controller.abort(reason);
    }
  }
}

/** The fan of each source signal that has something following it. */
const fans = new WeakMap<AbortSignal, Fan>();
/** Keeps each combined signal's controller alive as long as the signal (the fans hold it weakly). */
const controllers = new WeakMap<AbortSignal, AbortController>();
/** A combined signal collected leaves its sources' fans. */
const collected = new FinalizationRegistry<Link>((link) => {
  for (const fan of link.fans) fan.remove(link);
});

function fanOf(source: AbortSignal): Fan {
  let fan = fans.get(source);
  if (fan === undefined) {
    fan = new Fan(source);
    fans.set(source, fan);
  }
  return fan;
}

/** A signal that aborts when `a` or `b` does (with its reason); `a` itself when `b` is absent. */
export function anySignal(a: AbortSignal, b: AbortSignal | undefined): AbortSignal {
  if (!b) return a;
  if (b.aborted) return AbortSignal.abort(b.reason);
  if (a.aborted) return AbortSignal.abort(a.reason);
  const controller = new AbortController();
  const signal = controller.signal;
  controllers.set(signal, controller);
  const link: Link = { controller: new WeakRef(controller), fans: [fanOf(b), fanOf(a)] };
  for (const fan of link.fans) fan.links.add(link);
  collected.register(signal, link, link);
  return signal;
}

/** Calls `fn` with the signal's reason when it aborts; the returned function stops listening. */
export function onAbort(signal: AbortSignal, fn: (reason: unknown) => void): () => void {
  const fan = fanOf(signal);
  // Each call listens on its own, even with the same function.
  const own = (reason: unknown) => fn(reason);
  fan.fns.add(own);
  return () => {
    if (fan.fns.delete(own)) fan.unlistenIfEmpty();
  };
}
