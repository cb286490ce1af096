/** Human-readable output of the command. */
import type { IdStatus, LineStatus } from './state.js';

/** A duration in ms for people: "120 ms", "12.3 s", "4m 12s", "2h 05m", "3d 04h". */
export function human(ms: number): string {
  if (ms < 1000) return `${Math.ceil(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${(Math.ceil(s * 10) / 10).toFixed(1)} s`;
  const total = Math.ceil(s);
  const d = Math.floor(total / 86_400);
  const h = Math.floor((total % 86_400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const sec = total % 60;
  if (d > 0) return `${d}d ${String(h).padStart(2, '0')}h`;
  if (h > 0) return `${h}h ${String(m).padStart(2, '0')}m`;
  return `${m}m ${String(sec).padStart(2, '0')}s`;
}

export const iso = (epochMs: number) => new Date(Math.round(epochMs)).toISOString();

/** Control and bidirectional-formatting characters: never sent to a terminal as they are. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching them is the point.
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;
const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * `text` with its control characters escaped (\n, \x1b, \u202e...): what anyone who can write
 * a key (a pause's source, a lease token, an id) put there shows as text, on one line, and
 * sends the terminal no escape sequence. JSON output keeps the exact values.
 */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return (
      NAMED[c] ?? (code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16)}`)
    );
  });
}

/** The fleet window wrapFetch learnt (status and watch). */
export function windowText(s: IdStatus): string {
  const w = s.window!;
  const known =
    w.left === null ? 'no window known' : `${w.left} left until the reset in ${human(w.resetIn!)}`;
  const probe = w.probeIn === null ? '' : `, a probe in flight (up to ${human(w.probeIn)} more)`;
  return `fleet window (wrapFetch): ${known}, ${w.inFlight} in flight${probe}${w.waiting ? '; new requests wait' : ''}`;
}

/** A line of turns (status and watch). */
export function lineText(l: LineStatus): string {
  return `${l.waiting} caller(s) waiting for their turn, next turn in ${human(l.nextTurnIn)} (one every ${human(l.step)})`;
}

/** "prefix valve", or "key prefix app:, prefix valve" with --key-prefix (status and watch). */
export const prefixText = (s: IdStatus) =>
  s.keyPrefix ? `key prefix ${s.keyPrefix}, prefix ${s.prefix}` : `prefix ${s.prefix}`;

/** The lines of `valve status` (without --json). */
export function statusLines(s: IdStatus): string[] {
  const lines = [`valve status ${s.id}   ${prefixText(s)}, store clock ${iso(s.now)}`];
  lines.push(
    s.recorded
      ? `rules     ${s.recorded.digests.length} recorded (kept ${human(s.recorded.until - s.now)} after the last call)`
      : 'rules     none recorded (no valve has called within its longest interval)',
  );
  const width = Math.max(0, ...s.rules.map((r) => r.label.length));
  for (const r of s.rules) {
    const mark = r.recorded ? ' ' : '!';
    let text: string;
    if (r.problem) text = r.problem;
    else if (r.nextUnitIn === null) text = `${r.left} of ${r.capacity} left (all available)`;
    else
      text =
        `${r.left} of ${r.capacity} left, next unit in ${human(r.nextUnitIn)}` +
        (r.allBackIn !== null && r.allBackIn !== r.nextUnitIn ? `, all back in ${human(r.allBackIn)}` : '');
    lines.push(`  ${mark} ${r.label.padEnd(width)}  ${text}`);
  }
  if (s.mismatch.digests.length > 0) {
    lines.push(
      `mismatch  ${s.mismatch.digests.length} rule(s) marked ! have live state but are not recorded: another process uses other rules, or the rules changed within the last interval`,
    );
  } else if (!s.mismatch.checked) {
    lines.push(`mismatch  ${s.mismatch.note ?? 'not checked'}`);
  } else {
    lines.push('mismatch  none (no live state for other rules)');
  }
  lines.push(
    s.pause
      ? `pause     PAUSED until ${iso(s.pause.until)} (${human(s.pause.in)} left) by ${s.pause.by ?? 'an unnamed source'}; every valve with this id waits`
      : 'pause     none',
  );
  if (s.window) lines.push(`window    ${windowText(s)}`);
  for (const l of s.lines) lines.push(`line      ${lineText(l)}`);
  for (const problem of s.problems) lines.push(`problem   ${problem}`);
  if (s.leases.length === 0) {
    lines.push(`leases    none held${s.fence !== null ? ` (last fence ${s.fence})` : ''}`);
  } else {
    lines.push(`leases    ${s.leases.length} held (last fence ${s.fence ?? 'unknown'})`);
    for (const l of s.leases) lines.push(`  ${l.token}  fence ${l.fence}  expires in ${human(l.ttl)}`);
  }
  // The id, the pause's source, lease tokens, keys in problems: as text, never as control codes.
  return lines.map(printable);
}
