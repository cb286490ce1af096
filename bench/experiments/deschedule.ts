/**
 * Experiment (not part of `npm run bench`): how much of the wall clock a process that never
 * sleeps actually runs on this machine, and what that alone costs a GCRA burst-1 schedule.
 * A synchronous busy loop reads the clock continuously; every gap between two reads longer than
 * 0.1 ms is time the process was not running (the OS or the hypervisor took the CPU). The same
 * loop starts a job whenever the next slot (actual previous start + spacing) has come, so its
 * utilisation is the ceiling for any waking strategy in one process at that spacing.
 *
 *   node --import tsx bench/experiments/deschedule.ts [spacingMs=5] [durationMs=5000] [rounds=3]
 */
const now = (): number => performance.timeOrigin + performance.now();
const spacing = Number(process.argv[2] ?? 5);
const duration = Number(process.argv[3] ?? 5000);
const rounds = Number(process.argv[4] ?? 3);

for (let r = 0; r < rounds; r++) {
  const t0 = now();
  let next = t0;
  let starts = 0;
  let late = 0;
  let away = 0;
  let longest = 0;
  let last = t0;
  for (;;) {
    const t = now();
    const gap = t - last;
    if (gap > 0.1) {
      away += gap;
      if (gap > longest) longest = gap;
    }
    last = t;
    if (t >= next) {
      if (t >= t0 + duration) break;
      starts++;
      late += t - next;
      next = t + spacing; // burst 1: the next slot follows the actual start
    }
  }
  process.stdout.write(
    `spacing ${spacing} ms: utilisation ${((starts / (duration / spacing)) * 100).toFixed(2)}%, ` +
      `mean lateness ${((late / starts) * 1000).toFixed(1)} µs, not running ${((away / duration) * 100).toFixed(2)}% ` +
      `of the wall clock (longest gap ${longest.toFixed(2)} ms)\n`,
  );
}
