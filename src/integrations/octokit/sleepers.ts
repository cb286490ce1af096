import type { Clock } from '../../clock.js';
import type { ValveInternals } from '../../feedback-port.js';
import { pauseEnd } from './waiting.js';

/*
 * The requests of one client waiting, outside every valve, for the pauses of their lanes to end
 * (Pauses.sleep() in pauses.ts): a binary heap ordered by the time each one wakes, and one timer
 * for the whole client, set for the earliest. A timer wakes only the requests due then (no look
 * at the others), in the order they began to wait; a resume() (a pause deleted before its end)
 * looks at every one.
 */

/** A request waiting, outside every valve, for the pauses of its lanes to end. */
export interface Sleeper {
  readonly valves: readonly ValveInternals[];
  /** Valve clock: when the sleeper wakes anyway (its maxWait deadline, or a pause's end). */
  readonly wakeAt: number;
  /** The order it began to wait in (kept by a request that sleeps again: a pause extended). */
  readonly seq: number;
  /** Its place in the heap; -1 once out. */
  index: number;
  wake(): void;
}

function before(a: Sleeper, b: Sleeper): boolean {
  return a.wakeAt < b.wakeAt || (a.wakeAt === b.wakeAt && a.seq < b.seq);
}

const bySeq = (a: Sleeper, b: Sleeper) => a.seq - b.seq;

export class Sleepers {
  private readonly heap: Sleeper[] = [];
  private clock: Clock | undefined;
  private timer: unknown;
  /** When the timer fires (valve clock); Infinity when none is set. */
  private timerAt = Number.POSITIVE_INFINITY;

  get size(): number {
    return this.heap.length;
  }

  /** Adds a sleeper (its clock is the client's: every valve of the plugin shares one). */
  add(sleeper: Sleeper, clock: Clock): void {
    this.clock = clock;
    sleeper.index = this.heap.length;
    this.heap.push(sleeper);
    this.up(sleeper.index);
    this.arm();
  }

  /** Takes a sleeper out (woken, aborted, closed); nothing if it is out already. */
  remove(sleeper: Sleeper): void {
    const i = sleeper.index;
    if (i < 0) return;
    sleeper.index = -1;
    const last = this.heap.pop()!;
    if (last !== sleeper) {
      this.heap[i] = last;
      last.index = i;
      this.down(i);
      this.up(last.index);
    }
    if (this.heap.length === 0) this.disarm();
  }

  /** Wakes, in the order they began to wait, every sleeper whose pauses ended (after a resume()). */
  wakeEnded(): void {
    const clock = this.clock;
    if (clock === undefined || this.heap.length === 0) return;
    const now = clock.now();
    const ended = this.heap.filter((s) => pauseEnd(s.valves) <= now).sort(bySeq);
    for (const s of ended) this.remove(s);
    for (const s of ended) s.wake();
  }

  private readonly fire = () => {
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    const now = this.clock!.now();
    const due: Sleeper[] = [];
    for (let top = this.heap[0]; top !== undefined && top.wakeAt <= now; top = this.heap[0]) {
      this.remove(top);
      due.push(top);
    }
    if (due.length > 1) due.sort(bySeq);
    for (const s of due) s.wake();
    this.arm();
  };

  private arm(): void {
    const top = this.heap[0];
    if (top === undefined || this.timerAt <= top.wakeAt) return;
    this.disarm();
    const clock = this.clock!;
    this.timerAt = top.wakeAt;
    this.timer = clock.setTimeout(this.fire, Math.max(0, top.wakeAt - clock.now()));
  }

  private disarm(): void {
    if (this.timer === undefined) return;
    this.clock!.clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
  }

  private up(i: number): void {
    const heap = this.heap;
    const s = heap[i]!;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = heap[p]!;
      if (!before(s, parent)) break;
      heap[i] = parent;
      parent.index = i;
      i = p;
    }
    heap[i] = s;
    s.index = i;
  }

  private down(i: number): void {
    const heap = this.heap;
    const n = heap.length;
    const s = heap[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && before(heap[r]!, heap[l]!) ? r : l;
      const child = heap[c]!;
      if (!before(child, s)) break;
      heap[i] = child;
      child.index = i;
      i = c;
    }
    heap[i] = s;
    s.index = i;
  }
}
