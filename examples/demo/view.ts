/**
 * The live terminal view: redrawn in place with ANSI escapes when stdout is a terminal,
 * one plain line per second otherwise (CI logs, pipes, `--plain`).
 */

export interface Snapshot {
  /** Seconds since the run started. */
  elapsed: number;
  done: number;
  total: number;
  /** Starts in the last second, and the per-second limit. */
  lastSecond: number;
  rate: number;
  /** Starts in the last 10 s, and the 10 s limit. */
  lastWindow: number;
  windowLimit: number;
  queued: number;
  running: number;
  /** 429s from the quota (should stay 0) and from the induced secondary limit. */
  quota429: number;
  induced429: number;
  retries: number;
  /** Remaining pause in seconds, or 0 when not paused. */
  pausedFor: number;
  pauseSource: string;
}

const ESC = '\u001b[';
const bold = (s: string, on: boolean) => (on ? `${ESC}1m${s}${ESC}22m` : s);
const color = (s: string, code: number, on: boolean) => (on ? `${ESC}${code}m${s}${ESC}39m` : s);

export function progressBar(done: number, total: number, width: number): string {
  const ratio = total === 0 ? 1 : Math.min(1, done / total);
  const full = Math.round(ratio * width);
  return `${'█'.repeat(full)}${'░'.repeat(width - full)}`;
}

/** The lines of the live view. `ansi` adds colour. */
export function renderLines(s: Snapshot, ansi: boolean): string[] {
  const pct = s.total === 0 ? 100 : Math.floor((100 * s.done) / s.total);
  const paused =
    s.done >= s.total
      ? color('finished', 32, ansi)
      : s.pausedFor > 0
        ? color(`PAUSED ${s.pausedFor.toFixed(1)} s (${s.pauseSource}); every caller waits`, 33, ansi)
        : color('running', 32, ansi);
  const quota = s.quota429 === 0 ? color('0', 32, ansi) : color(String(s.quota429), 31, ansi);
  return [
    `${progressBar(s.done, s.total, 40)}  ${bold(`${s.done}/${s.total}`, ansi)}  ${pct}%  ${s.elapsed.toFixed(1)} s`,
    `rate     ${String(s.lastSecond).padStart(4)} starts in the last 1 s   (limit ${s.rate})`,
    `         ${String(s.lastWindow).padStart(4)} starts in the last 10 s  (limit ${s.windowLimit})`,
    `queue    ${String(s.queued).padStart(4)} waiting, ${s.running} running`,
    `429s     ${quota} from the quota, ${s.induced429} from the induced secondary limit, ${s.retries} retried`,
    `state    ${paused}`,
  ];
}

/** One plain line, for logs. */
export function renderPlain(s: Snapshot): string {
  const pause =
    s.done >= s.total
      ? 'finished'
      : s.pausedFor > 0
        ? `paused ${s.pausedFor.toFixed(1)}s (${s.pauseSource})`
        : 'running';
  return (
    `[${s.elapsed.toFixed(1).padStart(5)}s] ${s.done}/${s.total} done, ` +
    `${s.lastSecond}/s (limit ${s.rate}), ${s.lastWindow}/10s (limit ${s.windowLimit}), ` +
    `queue ${s.queued}, running ${s.running}, ` +
    `429s: ${s.quota429} quota + ${s.induced429} induced, ${s.retries} retried, ${pause}`
  );
}

export interface LiveView {
  /** Draws the current state (throttled by the caller). */
  update(s: Snapshot): void;
  /** Draws the final state and leaves the cursor below it. */
  finish(s: Snapshot): void;
}

export function createLiveView(stream: NodeJS.WriteStream, plain: boolean): LiveView {
  const tty = !plain && stream.isTTY === true;
  if (!tty) {
    let lastPrinted = -Infinity;
    return {
      update(s) {
        if (s.elapsed - lastPrinted < 1) return;
        lastPrinted = s.elapsed;
        stream.write(`${renderPlain(s)}\n`);
      },
      finish(s) {
        stream.write(`${renderPlain(s)}\n`);
      },
    };
  }
  let drawn = 0;
  const draw = (s: Snapshot) => {
    const lines = renderLines(s, true);
    // Move up over the previous frame, then rewrite each line and clear its tail.
    let out = drawn > 0 ? `${ESC}${drawn}F` : '';
    for (const line of lines) out += `${line}${ESC}K\n`;
    drawn = lines.length;
    stream.write(out);
  };
  stream.write(`${ESC}?25l`); // hide the cursor while redrawing
  const restore = () => stream.write(`${ESC}?25h`);
  process.once('exit', restore);
  return {
    update: draw,
    finish(s) {
      draw(s);
      restore();
    },
  };
}
