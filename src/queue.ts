/**
 * The local queue: jobs ordered by (priority desc, sequence asc).
 *
 * One FIFO ring buffer per distinct priority, plus (with more than one) a max-heap of the distinct
 * priorities that currently have a bucket. Enqueue and dequeue are O(1) for a known
 * priority; a new priority costs O(log P) (P distinct priorities queued), so even
 * priorities that are all different (deadlines, timestamps) stay cheap. Items
 * are never removed from the middle: a cancelled item stays where it is and the
 * owner skips it when it reaches the head (lazy deletion), so cancelling is O(1).
 *
 * An item returned to the queue (not granted by the store, or a retry that reuses
 * an earlier sequence) goes back to its place by sequence: O(1) at the head of its
 * bucket (the common case), a binary search and a shift otherwise.
 */

/** What the queue needs to know about an item. */
export interface QueueItem {
  readonly priority: number;
  readonly seq: number;
}

/** A growable ring buffer of items, in sequence order. */
class Bucket<T extends QueueItem> {
  items: (T | undefined)[];
  head = 0;
  size = 0;
  mask: number;

  /** Its items' priority (the one bucket of a queue, emptied, takes the next item's). */
  priority: number;

  constructor(priority: number) {
    this.priority = priority;
    // Small at first: a queue with many distinct priorities has many small buckets.
    this.items = new Array(2);
    this.mask = 1;
  }

  private grow(): void {
    const old = this.items;
    const cap = old.length;
    const next: (T | undefined)[] = new Array(cap * 2);
    for (let i = 0; i < this.size; i++) next[i] = old[(this.head + i) & this.mask];
    this.items = next;
    this.head = 0;
    this.mask = cap * 2 - 1;
  }

  push(item: T): void {
    if (this.size === this.items.length) this.grow();
    this.items[(this.head + this.size) & this.mask] = item;
    this.size++;
  }

  peek(): T | undefined {
    return this.size === 0 ? undefined : this.items[this.head];
  }

  shift(): T | undefined {
    if (this.size === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) & this.mask;
    this.size--;
    return item;
  }

  /** Keeps only the items for which `keep` is true, in order; returns how many were dropped. */
  filter(keep: (item: T) => boolean): number {
    const old = this.items;
    const kept: (T | undefined)[] = [];
    for (let i = 0; i < this.size; i++) {
      const item = old[(this.head + i) & this.mask]!;
      if (keep(item)) kept.push(item);
    }
    let cap = 2;
    while (cap < kept.length) cap *= 2;
    const dropped = this.size - kept.length;
    this.size = kept.length;
    kept.length = cap;
    this.items = kept;
    this.head = 0;
    this.mask = cap - 1;
    return dropped;
  }

  /** Puts `item` at its place by sequence. */
  insert(item: T): void {
    if (this.size === this.items.length) this.grow();
    const seq = item.seq;
    const last = this.size === 0 ? undefined : this.items[(this.head + this.size - 1) & this.mask];
    if (last === undefined || last.seq < seq) {
      this.push(item);
      return;
    }
    const first = this.items[this.head]!;
    if (seq < first.seq) {
      this.head = (this.head - 1) & this.mask;
      this.items[this.head] = item;
      this.size++;
      return;
    }
    // Binary search for the first position whose sequence is greater.
    let lo = 0;
    let hi = this.size;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.items[(this.head + mid) & this.mask]!.seq < seq) lo = mid + 1;
      else hi = mid;
    }
    for (let i = this.size; i > lo; i--) {
      this.items[(this.head + i) & this.mask] = this.items[(this.head + i - 1) & this.mask];
    }
    this.items[(this.head + lo) & this.mask] = item;
    this.size++;
  }
}

function heapPush(heap: number[], value: number): void {
  let i = heap.length;
  heap.push(value);
  while (i > 0) {
    const parent = (i - 1) >> 1;
    const p = heap[parent]!;
    if (p >= value) break;
    heap[i] = p;
    i = parent;
  }
  heap[i] = value;
}

function heapPop(heap: number[]): number {
  const top = heap[0]!;
  const last = heap.pop()!;
  const n = heap.length;
  if (n === 0) return top;
  let i = 0;
  for (;;) {
    let child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap[child + 1]! > heap[child]!) child++;
    if (heap[child]! <= last) break;
    heap[i] = heap[child]!;
    i = child;
  }
  heap[i] = last;
  return top;
}

/** The largest emptied bucket (its ring's capacity) a queue keeps for its next item. */
const KEEP_EMPTY = 16;

/**
 * The priority queue. `size` counts stored items, including cancelled ones not yet skipped.
 * The owner reports each item it cancels in place with {@link JobQueue.dropped}; once they
 * are more than half of the queue, one pass removes them (amortised O(1) per cancel), so a
 * blocked queue does not hold cancelled jobs until they reach its head.
 */
export class JobQueue<T extends QueueItem> {
  /** Cancelled items still stored. */
  private dead = 0;

  /** @param isLive tells a live item from a cancelled one, for compaction. */
  constructor(private readonly isLive: (item: T) => boolean = () => true) {}

  /*
   * With one priority stored (the common case), its bucket alone: `top`, and neither heap nor
   * map. With more, every bucket in `buckets` by priority and its priority in `priorities` (a
   * binary max-heap); back to the bucket alone when one is left. The one bucket, emptied, stays
   * while it is small (KEEP_EMPTY), and takes the priority of the next item: a valve that runs
   * one job at a time (a valve group's key) would otherwise make and drop a bucket for every job.
   */
  /** Distinct priorities that have a bucket: a binary max-heap; null with one bucket at most. */
  private priorities: number[] | null = null;
  /** The buckets by priority; null with one bucket at most. */
  private buckets: Map<number, Bucket<T>> | null = null;
  /** The bucket of the highest priority (fast path); when the queue is empty, undefined or the one bucket kept. */
  private top: Bucket<T> | undefined;
  size = 0;

  private bucketFor(priority: number): Bucket<T> {
    const top = this.top;
    if (top !== undefined && top.priority === priority) return top;
    const buckets = this.buckets;
    if (buckets !== null) return buckets.get(priority) ?? this.added(priority);
    if (top === undefined) {
      const bucket = new Bucket<T>(priority);
      this.top = bucket;
      return bucket;
    }
    if (top.size === 0) {
      top.priority = priority;
      return top;
    }
    // A second priority: the map and the heap, the first bucket in them.
    this.buckets = new Map([[top.priority, top]]);
    this.priorities = [top.priority];
    return this.added(priority);
  }

  /** A new bucket in the map and the heap. */
  private added(priority: number): Bucket<T> {
    const bucket = new Bucket<T>(priority);
    this.buckets!.set(priority, bucket);
    heapPush(this.priorities!, priority);
    if (this.top === undefined || priority > this.top.priority) this.top = bucket;
    return bucket;
  }

  /** Appends a new item (its sequence is the largest so far for its priority). */
  push(item: T): void {
    const top = this.top;
    if (top !== undefined && top.priority === item.priority) top.push(item);
    else this.bucketFor(item.priority).push(item);
    this.size++;
  }

  /** Puts an item back at its place by sequence (a refused batch, or a retry). */
  insert(item: T): void {
    this.bucketFor(item.priority).insert(item);
    this.size++;
  }

  /** The head item (highest priority, lowest sequence), or undefined. */
  peek(): T | undefined {
    return this.top?.peek();
  }

  /** Removes and returns the head item, or undefined. */
  shift(): T | undefined {
    const top = this.top;
    if (top === undefined || top.size === 0) return undefined;
    const item = top.shift()!;
    this.size--;
    if (top.size === 0) {
      if (this.buckets !== null) this.dropTop();
      else if (top.items.length > KEEP_EMPTY) this.top = undefined;
    }
    if (this.dead > 0 && !this.isLive(item)) this.dead--;
    return item;
  }

  /** The owner cancelled a stored item in place (it stays until skipped or compacted). */
  dropped(): void {
    this.dead++;
    if (this.dead > 64 && this.dead * 2 > this.size) this.compact();
  }

  /** Removes every cancelled item in one pass. */
  compact(): void {
    const keep = this.isLive;
    const buckets = this.buckets;
    if (buckets === null) {
      if (this.top !== undefined) this.size -= this.top.filter(keep);
      this.dead = 0;
      return;
    }
    const ps = this.priorities!;
    const left: number[] = [];
    for (const p of ps) {
      const bucket = buckets.get(p)!;
      this.size -= bucket.filter(keep);
      if (bucket.size === 0) buckets.delete(p);
      else left.push(p);
    }
    if (left.length <= 1) {
      this.top = left.length === 0 ? undefined : buckets.get(left[0]!);
      this.buckets = null;
      this.priorities = null;
    } else {
      ps.length = 0;
      for (const p of left) heapPush(ps, p);
      this.top = buckets.get(ps[0]!);
    }
    this.dead = 0;
  }

  /** With several buckets: the emptied top one goes; with one left, it stays alone. */
  private dropTop(): void {
    const ps = this.priorities!;
    const buckets = this.buckets!;
    buckets.delete(heapPop(ps));
    if (ps.length <= 1) {
      this.top = ps.length === 0 ? undefined : buckets.get(ps[0]!);
      this.buckets = null;
      this.priorities = null;
    } else {
      this.top = buckets.get(ps[0]!);
    }
  }

  /** Removes every item and returns them in queue order. */
  drain(): T[] {
    const out: T[] = [];
    for (let item = this.shift(); item !== undefined; item = this.shift()) out.push(item);
    this.dead = 0;
    return out;
  }
}

/** What the deadline heap needs: a deadline and a slot for the item's position in the heap. */
export interface DeadlineItem {
  readonly deadline: number;
  /** Position in the heap, or -1 when not in it. Maintained by the heap. */
  heapIndex: number;
}

/**
 * A binary min-heap of items by deadline, with O(log n) removal of any item (each
 * item knows its index), so started or cancelled jobs leave it at once and hold no
 * memory until their deadline.
 */
export class DeadlineHeap<T extends DeadlineItem> {
  private readonly items: T[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const items = this.items;
    items.push(item);
    item.heapIndex = items.length - 1;
    this.up(items.length - 1);
  }

  remove(item: T): void {
    const i = item.heapIndex;
    if (i < 0) return;
    const items = this.items;
    const last = items.pop()!;
    item.heapIndex = -1;
    if (i === items.length) return;
    items[i] = last;
    last.heapIndex = i;
    this.up(i);
    this.down(last.heapIndex);
  }

  private up(i: number): void {
    const items = this.items;
    const item = items[i]!;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent]!;
      if (p.deadline <= item.deadline) break;
      items[i] = p;
      p.heapIndex = i;
      i = parent;
    }
    items[i] = item;
    item.heapIndex = i;
  }

  private down(i: number): void {
    const items = this.items;
    const n = items.length;
    const item = items[i]!;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && items[child + 1]!.deadline < items[child]!.deadline) child++;
      const c = items[child]!;
      if (c.deadline >= item.deadline) break;
      items[i] = c;
      c.heapIndex = i;
      i = child;
    }
    items[i] = item;
    item.heapIndex = i;
  }
}
