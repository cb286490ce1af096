import type { WakeEvent } from './store.js';

/*
 * The memory store's wake-ups: subscribers per id, woken in a microtask after the store call
 * that changed something (a pause, a resume, a released slot). See memory.ts.
 */

export class MemoryWakeups {
  /** Subscribers per id; an id's entry is deleted with its last subscriber. */
  private readonly subscribers = new Map<string, Set<(event: WakeEvent) => void>>();

  /** Wake-ups of an id are delivered (in this process) as soon as it has a subscriber. */
  listening(id: string): boolean {
    return this.subscribers.has(id);
  }

  /** Adds a subscriber (arguments already checked); returns its idempotent unsubscribe. */
  subscribe(id: string, onWake: (event: WakeEvent) => void): () => void {
    let set = this.subscribers.get(id);
    if (set === undefined) {
      set = new Set();
      this.subscribers.set(id, set);
    }
    // Wrap so that the same function can subscribe twice and unsubscribe each independently.
    const entry = (event: WakeEvent) => onWake(event);
    set.add(entry);
    let active = true;
    return () => {
      if (!active) return;
      active = false;
      const current = this.subscribers.get(id);
      if (current === undefined) return;
      current.delete(entry);
      if (current.size === 0) this.subscribers.delete(id);
    };
  }

  /**
   * Wakes the id's subscribers in a microtask, never inside the store call, so a
   * subscriber cannot re-enter the store mid-operation. A throwing subscriber is
   * ignored: wake-ups are hints, and the other subscribers still run.
   */
  notify(id: string, event: WakeEvent): void {
    const set = this.subscribers.get(id);
    if (set === undefined || set.size === 0) return;
    const targets = Array.from(set);
    queueMicrotask(() => {
      for (const fn of targets) {
        try {
          fn(event);
        } catch {
          // Hints only; the subscriber's own error handling is its business.
        }
      }
    });
  }

  /** How many subscribers are registered (the test hook's count). */
  get count(): number {
    let n = 0;
    for (const set of this.subscribers.values()) n += set.size;
    return n;
  }
}
