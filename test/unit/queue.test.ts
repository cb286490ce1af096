import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DeadlineHeap, JobQueue } from '../../src/queue.js';

interface Item {
  priority: number;
  seq: number;
}

const order = (a: Item, b: Item) => b.priority - a.priority || a.seq - b.seq;

describe('JobQueue', () => {
  it('orders by priority desc, then sequence asc', () => {
    const q = new JobQueue<Item>();
    const items = [
      { priority: 0, seq: 0 },
      { priority: 5, seq: 1 },
      { priority: 0, seq: 2 },
      { priority: -3, seq: 3 },
      { priority: 5, seq: 4 },
      { priority: 0.5, seq: 5 },
    ];
    for (const item of items) q.push(item);
    expect(q.size).toBe(6);
    expect(q.peek()).toBe(items[1]);
    expect(q.drain().map((i) => i.seq)).toEqual([1, 4, 5, 0, 2, 3]);
    expect(q.size).toBe(0);
    expect(q.shift()).toBeUndefined();
  });

  it('many distinct priorities (e.g. deadlines) stay ordered and cheap', () => {
    fc.assert(
      fc.property(fc.array(fc.double({ noNaN: true, min: -1e6, max: 1e6 }), { maxLength: 300 }), (ps) => {
        const q = new JobQueue<Item>();
        const items = ps.map((priority, seq) => ({ priority, seq }));
        for (const item of items) q.push(item);
        expect(q.drain()).toEqual([...items].sort(order));
      }),
    );
    const q = new JobQueue<Item>();
    // CPU time, not wall time: a loaded machine must not fail it; a queue that scans (quadratic
    // in 200k items) takes minutes of CPU, a heap about 0.1 s.
    const started = process.cpuUsage();
    for (let seq = 0; seq < 200_000; seq++) q.push({ priority: Math.random(), seq });
    let last = Number.POSITIVE_INFINITY;
    let sorted = true;
    for (let item = q.shift(); item; item = q.shift()) {
      if (item.priority > last) sorted = false;
      last = item.priority;
    }
    expect(sorted).toBe(true);
    const cpu = process.cpuUsage(started);
    expect((cpu.user + cpu.system) / 1000).toBeLessThan(5000);
  });

  it('a queue emptied one item at a time (its last bucket kept) takes any priority next', () => {
    const q = new JobQueue<Item>();
    let seq = 0;
    // Small and large buckets (a large one is dropped when emptied), then other priorities.
    for (const [priority, n] of [
      [0, 1],
      [0, 1],
      [3, 40],
      [-1, 2],
      [-1, 1],
      [2, 1],
    ] as const) {
      const items = Array.from({ length: n }, () => ({ priority, seq: seq++ }));
      for (const item of items) q.push(item);
      expect(q.peek()).toBe(items[0]);
      expect(q.drain()).toEqual(items);
      expect(q.size).toBe(0);
      expect(q.peek()).toBeUndefined();
      expect(q.shift()).toBeUndefined();
    }
    // An item put back into the emptied queue, then a higher and a lower priority.
    const back = { priority: 2, seq: 0 };
    q.insert(back);
    const high = { priority: 9, seq: seq++ };
    const low = { priority: -9, seq: seq++ };
    q.push(low);
    q.push(high);
    expect(q.drain()).toEqual([high, back, low]);
  });

  it('insert() puts items back by sequence', () => {
    const q = new JobQueue<Item>();
    for (let seq = 10; seq < 20; seq++) q.push({ priority: 0, seq });
    q.insert({ priority: 0, seq: 3 });
    q.insert({ priority: 0, seq: 15.5 });
    q.insert({ priority: 0, seq: 25 });
    q.insert({ priority: 1, seq: 1 });
    expect(q.drain().map((i) => i.seq)).toEqual([1, 3, 10, 11, 12, 13, 14, 15, 15.5, 16, 17, 18, 19, 25]);
  });

  it('matches a sorted-array model under random push / insert / shift (including ring wrap-around)', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({ op: fc.constant('push' as const), priority: fc.integer({ min: -2, max: 2 }) }),
            fc.record({ op: fc.constant('shift' as const), n: fc.integer({ min: 1, max: 5 }) }),
            fc.record({ op: fc.constant('return' as const), k: fc.integer({ min: 1, max: 5 }) }),
          ),
          { maxLength: 300 },
        ),
        (ops) => {
          const q = new JobQueue<Item>();
          let model: Item[] = [];
          let seq = 0;
          for (const o of ops) {
            if (o.op === 'push') {
              const item = { priority: o.priority, seq: seq++ };
              q.push(item);
              model.push(item);
              model.sort(order);
            } else if (o.op === 'shift') {
              for (let i = 0; i < o.n; i++) expect(q.shift()).toBe(model.shift());
            } else {
              // Take k from the head and return them (as a refused batch does), in reverse.
              const taken: Item[] = [];
              for (let i = 0; i < o.k; i++) {
                const item = q.shift();
                if (item) taken.push(item);
              }
              for (const item of taken.reverse()) q.insert(item);
            }
            expect(q.size).toBe(model.length);
            expect(q.peek()).toBe(model[0]);
          }
          expect(q.drain()).toEqual(model);
          model = [];
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('DeadlineHeap', () => {
  it('pops in deadline order and removes any item', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 1000 }), { maxLength: 100 }),
        fc.array(fc.nat(), { maxLength: 50 }),
        (deadlines, removals) => {
          const heap = new DeadlineHeap<{ deadline: number; heapIndex: number }>();
          const items = deadlines.map((deadline) => ({ deadline, heapIndex: -1 }));
          for (const item of items) heap.push(item);
          const removed = new Set<number>();
          for (const r of removals) {
            if (items.length === 0) break;
            const i = r % items.length;
            heap.remove(items[i]!);
            removed.add(i);
            expect(items[i]!.heapIndex).toBe(-1);
          }
          const rest = items.filter((_, i) => !removed.has(i)).map((i) => i.deadline);
          rest.sort((a, b) => a - b);
          const popped: number[] = [];
          for (let top = heap.peek(); top; top = heap.peek()) {
            popped.push(top.deadline);
            heap.remove(top);
          }
          expect(popped).toEqual(rest);
          expect(heap.size).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('JobQueue with cancellation in place', () => {
  interface Live extends Item {
    live: boolean;
  }

  it('skipping and compaction keep the order of live items; cancelled items are dropped once they dominate', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({
              op: fc.constant('push' as const),
              priority: fc.integer({ min: -1, max: 1 }),
              n: fc.integer({ min: 1, max: 40 }),
            }),
            fc.record({
              op: fc.constant('cancel' as const),
              pick: fc.nat(),
              n: fc.integer({ min: 1, max: 60 }),
            }),
            fc.record({ op: fc.constant('shift' as const), n: fc.integer({ min: 1, max: 10 }) }),
          ),
          { maxLength: 60 },
        ),
        (ops) => {
          const q = new JobQueue<Live>((item) => item.live);
          let model: Live[] = [];
          let seq = 0;
          const liveShift = (): Live | undefined => {
            for (;;) {
              const item = q.shift();
              if (item === undefined || item.live) return item;
            }
          };
          for (const o of ops) {
            if (o.op === 'push') {
              for (let i = 0; i < o.n; i++) {
                const item = { priority: o.priority, seq: seq++, live: true };
                q.push(item);
                model.push(item);
              }
              model.sort(order);
            } else if (o.op === 'cancel') {
              for (let i = 0; i < o.n && model.length > 0; i++) {
                const item = model.splice((o.pick + i * 7) % model.length, 1)[0]!;
                item.live = false;
                q.dropped();
              }
            } else {
              for (let i = 0; i < o.n; i++) expect(liveShift()).toBe(model.shift());
            }
            // Dead items never outnumber live ones by much (compaction), beyond the small threshold.
            expect(q.size).toBeLessThanOrEqual(Math.max(2 * model.length + 1, model.length + 65));
          }
          const rest: Live[] = [];
          for (let item = liveShift(); item; item = liveShift()) rest.push(item);
          expect(rest).toEqual(model);
          model = [];
        },
      ),
      { numRuns: 300 },
    );
  });
});
