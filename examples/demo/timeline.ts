/**
 * The SVG timeline, written by hand (no dependencies): starts per second against the
 * per-second limit, starts in the trailing 10 s against the 10 s limit, the shared pause,
 * and every 429 the provider sent.
 */

export interface TimelineInput {
  title: string;
  /** Attempt starts, ms since the run started, ascending. */
  starts: readonly number[];
  /** Run length, ms. */
  duration: number;
  /** Per-second limit and the long window's limit and length. */
  rate: number;
  windowLimit: number;
  windowMs: number;
  /** Shared pauses, ms since the run started. */
  pauses: readonly { from: number; to: number; source: string }[];
  /** 429s by arrival time at the provider, ms since the run started. */
  induced429: readonly number[];
  quota429: readonly number[];
}

const W = 960;
const LEFT = 64;
const RIGHT = 24;
const PLOT_W = W - LEFT - RIGHT;

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const f = (n: number) => (Math.round(n * 10) / 10).toString();

/** A "nice" tick step for an axis spanning `max`. */
function step(max: number, ticks: number): number {
  const raw = max / ticks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

interface Panel {
  top: number;
  height: number;
  yMax: number;
}

function yAxis(p: Panel, label: string): string {
  const s = step(p.yMax, 4);
  let out = '';
  for (let v = 0; v <= p.yMax + 1e-9; v += s) {
    const y = p.top + p.height - (v / p.yMax) * p.height;
    out += `<line x1="${LEFT}" x2="${W - RIGHT}" y1="${f(y)}" y2="${f(y)}" class="grid"/>`;
    out += `<text x="${LEFT - 6}" y="${f(y + 4)}" text-anchor="end" class="tick">${v}</text>`;
  }
  const cy = p.top + p.height / 2;
  out += `<text transform="translate(16 ${f(cy)}) rotate(-90)" text-anchor="middle" class="axis">${escapeXml(label)}</text>`;
  return out;
}

export function renderTimeline(input: TimelineInput): string {
  const seconds = Math.max(1, Math.ceil(input.duration / 1000));
  const xOf = (ms: number) => LEFT + (Math.min(ms, seconds * 1000) / (seconds * 1000)) * PLOT_W;

  // Panel 1: starts per aligned 1 s bin.
  const bins = new Array<number>(seconds).fill(0);
  for (const t of input.starts) {
    const k = Math.min(seconds - 1, Math.floor(t / 1000));
    bins[k]!++;
  }
  const p1: Panel = { top: 70, height: 190, yMax: Math.max(input.rate, ...bins) * 1.15 };
  // Panel 2: starts in the trailing window, sampled every 100 ms.
  const samples: [number, number][] = [];
  let lo = 0;
  let hi = 0;
  for (let t = 0; t <= seconds * 1000; t += 100) {
    while (hi < input.starts.length && input.starts[hi]! <= t) hi++;
    while (lo < hi && input.starts[lo]! <= t - input.windowMs) lo++;
    samples.push([t, hi - lo]);
  }
  const p2: Panel = {
    top: 330,
    height: 150,
    yMax: Math.max(input.windowLimit, ...samples.map((s) => s[1])) * 1.15,
  };
  const yIn = (p: Panel, v: number) => p.top + p.height - (v / p.yMax) * p.height;
  const H = p2.top + p2.height + 70;

  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="system-ui, -apple-system, Segoe UI, sans-serif">`,
    '<style>.grid{stroke:#e5e7eb;stroke-width:1}.tick{font-size:11px;fill:#6b7280}.axis{font-size:12px;fill:#374151}' +
      '.limit{stroke:#dc2626;stroke-width:1.5;stroke-dasharray:6 4}.label{font-size:12px;fill:#111827}' +
      '.small{font-size:11px;fill:#4b5563}</style>',
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${LEFT}" y="28" font-size="16" font-weight="600" fill="#111827">${escapeXml(input.title)}</text>`,
    `<text x="${LEFT}" y="48" class="small">${escapeXml(
      `${input.starts.length} starts in ${f(input.duration / 1000)} s. Bars: starts per second. Line: starts in the last ${input.windowMs / 1000} s. Dashed: the limits.`,
    )}</text>`,
  );

  // Pauses, shaded across both panels.
  for (const p of input.pauses) {
    const x1 = xOf(Math.max(0, p.from));
    const x2 = xOf(Math.max(p.from, p.to));
    parts.push(
      `<rect x="${f(x1)}" y="${p1.top}" width="${f(Math.max(1, x2 - x1))}" height="${p2.top + p2.height - p1.top}" fill="#fde68a" fill-opacity="0.55"><title>${escapeXml(
        `shared pause ${f((p.to - p.from) / 1000)} s (${p.source})`,
      )}</title></rect>`,
      `<text x="${f(x1 + 4)}" y="${p1.top + 14}" class="small">${escapeXml(`paused (${p.source})`)}</text>`,
    );
  }

  parts.push(yAxis(p1, 'starts per second'));
  const bw = PLOT_W / seconds;
  bins.forEach((n, k) => {
    if (n === 0) return;
    const y = yIn(p1, n);
    parts.push(
      `<rect x="${f(LEFT + k * bw + bw * 0.12)}" y="${f(y)}" width="${f(bw * 0.76)}" height="${f(p1.top + p1.height - y)}" fill="#2563eb"><title>${escapeXml(
        `${k}–${k + 1} s: ${n} starts`,
      )}</title></rect>`,
    );
  });
  const yl1 = yIn(p1, input.rate);
  parts.push(
    `<line x1="${LEFT}" x2="${W - RIGHT}" y1="${f(yl1)}" y2="${f(yl1)}" class="limit"/>`,
    `<text x="${W - RIGHT}" y="${f(yl1 - 5)}" text-anchor="end" class="label" fill="#dc2626">limit ${input.rate} per second</text>`,
  );

  // 429 markers above panel 1.
  const marks = (times: readonly number[], fill: string, what: string) => {
    for (const t of times) {
      const x = xOf(t);
      parts.push(
        `<path d="M${f(x)} ${p1.top - 2}l-4 -8h8z" fill="${fill}"><title>${escapeXml(`${what} at ${f(t / 1000)} s`)}</title></path>`,
      );
    }
  };
  marks(input.induced429, '#f59e0b', 'induced 429 (secondary limit)');
  marks(input.quota429, '#dc2626', '429 from the quota');

  parts.push(yAxis(p2, `starts in last ${input.windowMs / 1000} s`));
  const points = samples.map(([t, n]) => `${f(xOf(t))},${f(yIn(p2, n))}`).join(' ');
  parts.push(`<polyline points="${points}" fill="none" stroke="#2563eb" stroke-width="2"/>`);
  const yl2 = yIn(p2, input.windowLimit);
  parts.push(
    `<line x1="${LEFT}" x2="${W - RIGHT}" y1="${f(yl2)}" y2="${f(yl2)}" class="limit"/>`,
    `<text x="${W - RIGHT}" y="${f(yl2 - 5)}" text-anchor="end" class="label" fill="#dc2626">limit ${input.windowLimit} per ${input.windowMs / 1000} s</text>`,
  );

  // Time axis under each panel.
  const ts = step(seconds, 10);
  for (const p of [p1, p2]) {
    const y = p.top + p.height;
    parts.push(`<line x1="${LEFT}" x2="${W - RIGHT}" y1="${y}" y2="${y}" stroke="#9ca3af"/>`);
    for (let s = 0; s <= seconds + 1e-9; s += ts) {
      parts.push(`<text x="${f(xOf(s * 1000))}" y="${y + 15}" text-anchor="middle" class="tick">${s}</text>`);
    }
  }
  parts.push(
    `<text x="${LEFT + PLOT_W / 2}" y="${p2.top + p2.height + 34}" text-anchor="middle" class="axis">seconds since start</text>`,
  );

  // Legend.
  const ly = H - 16;
  parts.push(
    `<rect x="${LEFT}" y="${ly - 10}" width="12" height="12" fill="#2563eb"/>`,
    `<text x="${LEFT + 18}" y="${ly}" class="small">starts</text>`,
    `<rect x="${LEFT + 80}" y="${ly - 10}" width="12" height="12" fill="#fde68a"/>`,
    `<text x="${LEFT + 98}" y="${ly}" class="small">shared pause</text>`,
    `<path d="M${LEFT + 200} ${ly - 10}l4 8l4 -8z" fill="#f59e0b"/>`,
    `<text x="${LEFT + 214}" y="${ly}" class="small">induced 429 (${input.induced429.length})</text>`,
    `<path d="M${LEFT + 330} ${ly - 10}l4 8l4 -8z" fill="#dc2626"/>`,
    `<text x="${LEFT + 344}" y="${ly}" class="small">429 from the quota (${input.quota429.length})</text>`,
    '</svg>',
  );
  return `${parts.join('\n')}\n`;
}
