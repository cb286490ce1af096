/**
 * Shared helpers for the benchmark scenarios: argument parsing, a high-resolution
 * epoch clock, statistics, and the one-JSON-line-per-peer output format.
 */

/** Epoch milliseconds with sub-millisecond precision, comparable across processes on one machine. */
export const nowMs = (): number => performance.timeOrigin + performance.now();

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One job that does nothing: shared by every call so the benchmark allocates no closure per job. */
export const noop = (): void => {};

export interface ScenarioArgs {
  /** Only this peer; every peer of the scenario when absent. */
  readonly peer: string | undefined;
  /** Only this case; every case when absent. */
  readonly case: string | undefined;
  readonly quick: boolean;
  readonly full: boolean;
}

export function parseScenarioArgs(argv: readonly string[] = process.argv.slice(2)): ScenarioArgs {
  const value = (name: string): string | undefined => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  return {
    peer: value('peer'),
    case: value('case'),
    quick: argv.includes('--quick'),
    full: argv.includes('--full'),
  };
}

/** One measurement: printed as a single JSON line on stdout, read by the runner. */
export interface ResultLine {
  readonly scenario: string;
  readonly case: string;
  readonly peer: string;
  readonly metrics: Record<string, number | null>;
  readonly notes?: string;
}

export function emit(line: ResultLine): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Nearest-rank percentile of an ascending array (p in 0..100). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export interface WindowStats {
  /** Most starts in any half-open window [t, t + windowMs). */
  readonly maxInWindow: number;
  /** Starts that were the (bound + 1)-th or later within the window ending at them: 0 when the bound held. */
  readonly violations: number;
  /** Number of windows that broke the bound, counted once per maximal run of offending starts. */
  readonly windowsOver: number;
}

/**
 * Sliding-window check of a sorted list of start times (ms): for each start s_j, count the starts
 * in (s_j - windowMs, s_j]; every start where that count exceeds `bound` is one violation.
 */
export function windowStats(sortedStarts: readonly number[], windowMs: number, bound: number): WindowStats {
  let maxInWindow = 0;
  let violations = 0;
  let windowsOver = 0;
  let inRun = false;
  let i = 0;
  for (let j = 0; j < sortedStarts.length; j++) {
    const t = sortedStarts[j]!;
    while (sortedStarts[i]! <= t - windowMs) i++;
    const count = j - i + 1;
    if (count > maxInWindow) maxInWindow = count;
    if (count > bound) {
      violations++;
      if (!inRun) windowsOver++;
      inRun = true;
    } else {
      inRun = false;
    }
  }
  return { maxInWindow, violations, windowsOver };
}

/**
 * Lateness of each start against the ideal schedule of a saturated GCRA limiter anchored at the
 * first start: the first `burst` jobs at t0, then one every `spacingMs`.
 */
export function lateness(sortedStarts: readonly number[], spacingMs: number, burst: number): number[] {
  const t0 = sortedStarts[0] ?? 0;
  const out = new Array<number>(sortedStarts.length);
  for (let k = 0; k < sortedStarts.length; k++) {
    const ideal = t0 + Math.max(0, k - (burst - 1)) * spacingMs;
    out[k] = sortedStarts[k]! - ideal;
  }
  return out.sort((a, b) => a - b);
}

export const round = (x: number, digits = 0): number => {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
};

/** Forces a full GC (needs --expose-gc) and returns heapUsed. */
export function gcHeap(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc');
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

/** Peak resident set size of this process so far, in MB. */
export const peakRssMb = (): number => process.resourceUsage().maxRSS / 1024;
