/**
 * The wall clock in ms with sub-millisecond resolution, comparable across processes:
 * `Date.now()`'s value at the moment it ticks, carried forward on `performance.now()`.
 *
 * `performance.timeOrigin + performance.now()` is the usual such clock, but Node reads the
 * wall clock and the monotonic clock for `timeOrigin` one after the other at process start, so
 * a process descheduled between the two reads (a loaded machine starting several workers)
 * keeps an error of that delay for life: up to 0.8 ms among 40 workers at load 17, and once
 * 15 ms, which put a worker's clock outside the store's. Here each of five anchors is taken at
 * a tick of `Date.now()` (at most about a millisecond of waiting each) and the median is kept,
 * so one anchor taken across a stall does not count.
 */
export function anchoredWallClock(): () => number {
  const offsets: number[] = [];
  for (let k = 0; k < 5; k++) {
    const before = Date.now();
    let tick = Date.now();
    while (tick === before) tick = Date.now();
    offsets.push(tick - performance.now());
  }
  offsets.sort((a, b) => a - b);
  const offset = offsets[2]!;
  return () => offset + performance.now();
}
