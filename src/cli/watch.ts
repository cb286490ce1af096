/**
 * `valve watch`: the id's state once a second. On a terminal, a view redrawn in place (each
 * rule's budget in use, starts per second where the state shows them, the pause, the leases);
 * otherwise (a pipe, a log, --plain) one plain line per second.
 */
import { type Conn, within } from './connect.js';
import { oneLine } from './errors.js';
import { human, iso, lineText, prefixText, printable, windowText } from './format.js';
import { type IdStatus, type RuleStatus, readStatus } from './state.js';

const ESC = '\u001b[';

/** A stream the command writes to (process.stdout in the bin); `isTTY` true: the live view. */
export interface Output {
  write(text: string): unknown;
  isTTY?: boolean;
}

/** Starts per second of a rule between two readings, where the state allows it; null otherwise. */
export function startsPerSecond(prev: RuleStatus | undefined, cur: RuleStatus, dtMs: number): number | null {
  if (cur.recent !== null) return cur.recent; // sliding window: exact, from its log
  if (cur.windowStart === undefined || cur.left === null || dtMs <= 0) return null;
  const used = cur.capacity - cur.left;
  if (!prev || prev.left === null || prev.windowStart === undefined) return null;
  // Same fixed window: the count grew by exactly what started; a new window: what it holds.
  const grew = prev.windowStart === cur.windowStart ? used - (prev.capacity - prev.left) : used;
  return Math.max(0, (grew * 1000) / dtMs);
}

function bar(used: number, capacity: number, width: number): string {
  const full = capacity <= 0 ? 0 : Math.round(Math.min(1, used / capacity) * width);
  return `${'█'.repeat(full)}${'░'.repeat(width - full)}`;
}

function ruleText(r: RuleStatus, rate: number | null): string {
  if (r.problem || r.left === null) return r.problem ?? 'unreadable';
  const used = r.capacity - r.left;
  const speed = rate === null ? '' : `, ${rate.toFixed(rate < 10 ? 1 : 0)} starts/s`;
  const next = r.nextUnitIn === null ? '' : `, next unit in ${human(r.nextUnitIn)}`;
  return `${used}/${r.capacity} in use${speed}${next}`;
}

function pauseText(s: IdStatus): string {
  return s.pause
    ? `PAUSED for ${human(s.pause.in)} (until ${iso(s.pause.until)}, by ${s.pause.by ?? 'an unnamed source'})`
    : 'not paused';
}

function leaseText(s: IdStatus): string {
  if (s.leases.length === 0) return 'no leases held';
  return `${s.leases.length} lease(s) held, fences ${s.leases.map((l) => l.fence).join(', ')}, next expiry in ${human(s.leases[0]!.ttl)}`;
}

export function watchLines(s: IdStatus, rates: (number | null)[], ansi: boolean): string[] {
  const width = Math.max(0, ...s.rules.map((r) => r.label.length));
  const lines = [printable(`valve watch ${s.id}   ${prefixText(s)}   ${iso(s.now)} (store clock)`)];
  if (s.rules.length === 0) lines.push('rules    none recorded');
  s.rules.forEach((r, i) => {
    const used = r.left === null ? 0 : r.capacity - r.left;
    const mark = r.recorded ? ' ' : '!';
    lines.push(
      `${mark} ${r.label.padEnd(width)}  ${bar(used, r.capacity, 20)}  ${ruleText(r, rates[i] ?? null)}`,
    );
  });
  const pause = printable(pauseText(s));
  lines.push(`pause    ${ansi && s.pause ? `${ESC}33m${pause}${ESC}39m` : pause}`);
  lines.push(`leases   ${leaseText(s)}`);
  if (s.window) lines.push(`window   ${windowText(s)}`);
  for (const l of s.lines) lines.push(`line     ${lineText(l)}`);
  if (s.mismatch.digests.length > 0)
    lines.push('mismatch rules marked ! have live state but are not recorded');
  return lines;
}

export function watchPlain(s: IdStatus, rates: (number | null)[]): string {
  const rules = s.rules.map((r, i) => `${r.label}: ${ruleText(r, rates[i] ?? null)}`);
  const extra = [...(s.window ? [windowText(s)] : []), ...s.lines.map(lineText)];
  // One line per reading, whatever the id or the pause's source hold.
  return printable(
    `[${iso(s.now)}] ${s.id}: ${rules.join('; ') || 'no rules recorded'}; ${pauseText(s)}; ${leaseText(s)}${extra.map((e) => `; ${e}`).join('')}`,
  );
}

export interface WatchOptions {
  prefix: string;
  id: string;
  /** Stop after this many readings (default: until interrupted). */
  count: number;
  plain: boolean;
  /** ms for each reading; a reading past it shows as "store unreachable". */
  timeout: number;
  out: Output;
}

/** Runs until `count` readings were shown or SIGINT/SIGTERM. The first reading must succeed. */
export async function watch(conn: Conn, first: IdStatus, o: WatchOptions): Promise<void> {
  const tty = !o.plain && o.out.isTTY === true;
  let drawn = 0;
  let stopped = false;
  let wake: () => void = () => {};
  const stop = () => {
    stopped = true;
    wake();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  if (tty) o.out.write(`${ESC}?25l`);
  let prev: IdStatus | undefined;
  let cur: IdStatus | undefined = first;
  let known = first.rules.map((r) => r.digest);
  try {
    for (let n = 0; n < o.count && !stopped; n++) {
      const started = Date.now();
      if (n > 0) {
        try {
          // The search for unrecorded rules (a SCAN) runs every 10 s only.
          cur = await within(
            readStatus(conn, o.prefix, o.id, { known, scan: n % 10 === 0, scanMs: o.timeout / 2 }),
            o.timeout,
            'status',
          );
          known = cur.rules.map((r) => r.digest);
        } catch (err) {
          cur = undefined;
          const line = `[${new Date().toISOString()}] store unreachable: ${oneLine(err)}`;
          if (tty) {
            o.out.write(`${drawn > 0 ? `${ESC}${drawn}F` : ''}${line}${ESC}K\n${ESC}J`);
            drawn = 1;
          } else o.out.write(`${line}\n`);
        }
      }
      if (cur) {
        const rates = cur.rules.map((r) =>
          startsPerSecond(
            prev?.rules.find((p) => p.digest === r.digest),
            r,
            prev ? cur!.now - prev.now : 0,
          ),
        );
        if (tty) {
          const lines = watchLines(cur, rates, true);
          let out = drawn > 0 ? `${ESC}${drawn}F` : '';
          for (const line of lines) out += `${line}${ESC}K\n`;
          o.out.write(`${out}${ESC}J`);
          drawn = lines.length;
        } else {
          o.out.write(`${watchPlain(cur, rates)}\n`);
        }
        prev = cur;
      }
      if (n + 1 < o.count && !stopped) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.max(0, 1000 - (Date.now() - started)));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    }
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    if (tty) o.out.write(`${ESC}?25h`);
  }
}
