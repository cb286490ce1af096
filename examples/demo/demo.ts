/**
 * `npm run demo`: a local provider with a quota, one valve with matching rules, several
 * concurrent callers, a live view, a summary and an SVG timeline. No server, no set-up.
 *
 *   npm run demo                      # defaults: 300 requests, 8 callers, 25/s and 200 per 10 s
 *   npm run demo -- --help            # every option
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { createValve, memoryStore, type Rule } from '../../src/index.js';
import { type DemoOptions, HELP, parseArgs } from './args.js';
import { startProvider } from './provider.js';
import { busiest, Recorder } from './record.js';
import { recordingStore } from './recording-store.js';
import { renderTimeline } from './timeline.js';
import { createLiveView, type Snapshot } from './view.js';

const WINDOW_MS = 10_000;

/**
 * Valve rules for the provider's quota of `rate` in any 1 s and `windowLimit` in any 10 s.
 * The 10 s quota is written exactly as the provider states it, as a sliding window: its whole
 * limit is usable and its full rate sustained. The per-second quota is spread evenly (GCRA,
 * one start every 1/rate s), so that requests do not reach the provider in bursts whose
 * arrival jitter could cross its window's edge.
 */
function rulesFor(rate: number, windowLimit: number): Rule[] {
  return [
    { limit: rate, interval: 1000 },
    { limit: windowLimit, interval: WINDOW_MS, algorithm: 'sliding-window' },
  ];
}

/** The rate (per s) the rules sustain in the long run: the tightest limit / interval. */
function sustainedRate(rules: readonly Rule[]): number {
  return Math.min(...rules.map((r) => (r.limit * 1000) / Number(r.interval)));
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function main(options: DemoOptions): Promise<number> {
  const out = process.stdout;
  const induceAt = Math.max(1, Math.floor(options.requests / 3));
  const provider = await startProvider({
    perSecond: options.rate,
    perWindow: options.windowLimit,
    windowMs: WINDOW_MS,
    latencyMs: options.latency,
    graceMs: options.grace,
    induce: options.induce ? { afterAccepted: induceAt, retryAfterSeconds: options.retryAfter } : undefined,
  });
  const rules = rulesFor(options.rate, options.windowLimit);
  const quotaRate = Math.min(options.rate, options.windowLimit / (WINDOW_MS / 1000));

  out.write(
    [
      'valve demo',
      `  provider  ${provider.url} (local): ${options.rate} requests in any 1 s, ${options.windowLimit} in any 10 s; 429 beyond`,
      `            (counted on arrival, with ${options.grace} ms of tolerance for network jitter)`,
      options.induce
        ? `            plus one induced "secondary limit": 429 + Retry-After: ${options.retryAfter} after ${induceAt} accepted requests`
        : '            no induced 429 (--no-induced-429)',
      `  valve     one valve, memory store, rules:`,
      `              { limit: ${options.rate}, interval: '1s' }  at most ${options.rate} in any 1 s, ${Math.ceil(1000 / options.rate)} ms apart`,
      `              { limit: ${options.windowLimit}, interval: '10s', algorithm: 'sliding-window' }  at most ${options.windowLimit} in any 10 s`,
      `  traffic   ${options.requests} requests from ${options.callers} concurrent callers through valve.wrapFetch(fetch)`,
      '',
      '',
    ].join('\n'),
  );

  const rec = new Recorder();
  let retries = 0;
  let pauseSource = '';

  // The memory store, wrapped to report each grant on the store's clock: the clock on
  // which valve's bounds are stated.
  const store = recordingStore(memoryStore(), (now, count) => {
    for (let k = 0; k < count; k++) rec.start(rec.fromEpoch(now));
  });
  const valve = createValve({ id: 'demo-api:token-1', rules, store });
  valve.on('pause', (event) => {
    pauseSource = event.source;
    rec.pause(event.until, event.source);
  });
  valve.on('resume', () => rec.resume());
  valve.on('retry', () => {
    retries++;
  });

  const valveFetch = valve.wrapFetch(fetch, { retries: 3 });

  let next = 0;
  const one = async (i: number): Promise<void> => {
    try {
      const response = await valveFetch(`${provider.url}items/${i}`);
      await response.arrayBuffer();
      if (response.ok) rec.succeeded++;
      else rec.fail(`request ${i}: HTTP ${response.status}`);
    } catch (err) {
      rec.fail(`request ${i}: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  // A caller sends bursts of 1 to 12 requests at once, waits for them, then thinks briefly.
  const caller = async (): Promise<void> => {
    while (next < options.requests) {
      const size = Math.min(1 + Math.floor(Math.random() * 12), options.requests - next);
      const burstOf: Promise<void>[] = [];
      for (let k = 0; k < size; k++) burstOf.push(one(next++));
      await Promise.all(burstOf);
      await sleep(Math.random() * 250);
    }
  };

  const view = createLiveView(out, options.plain);
  const snapshot = (): Snapshot => {
    const stats = valve.stats();
    const nowEpoch = performance.timeOrigin + performance.now();
    const pausedFor = stats.pausedUntil === null ? 0 : Math.max(0, (stats.pausedUntil - nowEpoch) / 1000);
    return {
      elapsed: rec.elapsed() / 1000,
      done: rec.succeeded + rec.failed,
      total: options.requests,
      lastSecond: rec.startsInLast(1000),
      rate: options.rate,
      lastWindow: rec.startsInLast(WINDOW_MS),
      windowLimit: options.windowLimit,
      queued: stats.queued,
      running: stats.running,
      quota429: provider.counts.quota429,
      induced429: provider.counts.secondary429,
      retries,
      pausedFor,
      pauseSource,
    };
  };
  const ticker = setInterval(() => view.update(snapshot()), out.isTTY && !options.plain ? 100 : 250);

  const onSignal = () => {
    clearInterval(ticker);
    view.finish(snapshot());
    out.write('\ninterrupted\n');
    process.exit(130);
  };
  process.once('SIGINT', onSignal);

  const callers: Promise<void>[] = [];
  for (let c = 0; c < options.callers; c++) callers.push(caller());
  await Promise.all(callers);
  const duration = rec.elapsed();
  clearInterval(ticker);
  view.finish(snapshot());
  process.off('SIGINT', onSignal);

  await valve.close();
  await provider.close();

  // Summary.
  const counts = provider.counts;
  const firstToLast = (rec.starts.at(-1) ?? 0) - (rec.starts[0] ?? 0);
  const achieved = rec.starts.length > 1 ? ((rec.starts.length - 1) * 1000) / firstToLast : 0;
  const peak1 = busiest(rec.starts, 1000);
  const peak10 = busiest(rec.starts, WINDOW_MS);
  const pausedMs = rec.pauses.reduce((sum, p) => sum + Math.max(0, p.to - p.from), 0);
  // The rate sustained after the last shared pause: starts in the 10 s after it ended (or until
  // the last start, when the run ends sooner).
  const resumedAt = rec.pauses.at(-1)?.to;
  const lastStart = rec.starts.at(-1) ?? 0;
  const afterSpan = resumedAt === undefined ? 0 : Math.min(WINDOW_MS, lastStart - resumedAt);
  const afterPause =
    resumedAt !== undefined && afterSpan > 0
      ? (rec.starts.filter((t) => t >= resumedAt && t < resumedAt + WINDOW_MS).length * 1000) /
        (afterSpan === WINDOW_MS ? WINDOW_MS : afterSpan)
      : undefined;
  const arrivalsOf = (outcome: 'quota' | 'secondary') =>
    provider.arrivals.filter((a) => a.outcome === outcome).map((a) => rec.fromClock(a.at));

  const svg = renderTimeline({
    title: `valve demo: ${options.requests} requests, ${options.callers} callers, ${options.rate}/s and ${options.windowLimit} per 10 s`,
    starts: rec.starts,
    duration,
    rate: options.rate,
    windowLimit: options.windowLimit,
    windowMs: WINDOW_MS,
    pauses: rec.pauses,
    induced429: arrivalsOf('secondary'),
    quota429: arrivalsOf('quota'),
  });
  const svgPath = resolve(options.out);
  mkdirSync(dirname(svgPath), { recursive: true });
  writeFileSync(svgPath, svg);

  const ok = rec.failed === 0 && counts.quota429 === 0 && rec.succeeded === options.requests;
  out.write(
    [
      '',
      'Summary',
      `  requests   ${rec.succeeded} succeeded, ${rec.failed} failed, in ${(duration / 1000).toFixed(1)} s (${rec.starts.length} attempts)`,
      `  429s       ${counts.quota429} from the quota; ${counts.secondary429} from the induced secondary limit, ${retries} retried by wrapFetch`,
      `  rate       achieved ${achieved.toFixed(1)} requests/s${afterPause === undefined ? '' : ` (${afterPause.toFixed(1)}/s in the ${(afterSpan / 1000).toFixed(1)} s after the pause)`}; quota ${options.rate}/s and ${options.windowLimit} per 10 s: ${quotaRate.toFixed(1)}/s sustained; valve's rules sustain ${sustainedRate(rules).toFixed(1)}/s`,
      `  busiest    ${peak1} starts in any 1 s (limit ${options.rate}); ${peak10} starts in any 10 s (limit ${options.windowLimit})`,
      `  pauses     ${rec.pauses.length} shared pause${rec.pauses.length === 1 ? '' : 's'}, ${(pausedMs / 1000).toFixed(1)} s in all${rec.pauses.length ? ` (${[...new Set(rec.pauses.map((p) => p.source))].join(', ')})` : ''}`,
      `  timeline   ${svgPath}`,
      ...rec.failures.map((m) => `  failure    ${m}`),
      '',
      ok
        ? 'OK: every request succeeded and the quota never answered 429.'
        : `FAILED: ${counts.quota429} 429s from the quota, ${rec.failed} failed requests.`,
      '',
    ].join('\n'),
  );
  return ok ? 0 : 1;
}

let options: DemoOptions;
try {
  options = parseArgs(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`demo: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(2);
}
if (options.help) {
  process.stdout.write(`${HELP}\n`);
  process.exit(0);
}
main(options).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`demo: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
