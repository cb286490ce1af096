/** Command-line options of the demo. */

export interface DemoOptions {
  /** Requests to send through the valve. */
  requests: number;
  /** Concurrent callers sharing the one valve. */
  callers: number;
  /** Provider quota: requests per second. */
  rate: number;
  /** Provider quota: requests per 10 s. */
  windowLimit: number;
  /** Whether the provider answers one burst with 429 + Retry-After. */
  induce: boolean;
  /** Retry-After of the induced burst, seconds. */
  retryAfter: number;
  /** Provider processing time per request, ms. */
  latency: number;
  /** Arrival jitter the provider tolerates, ms. */
  grace: number;
  /** Where to write the SVG timeline. */
  out: string;
  /** Force periodic plain lines even on a terminal. */
  plain: boolean;
  help: boolean;
}

export const HELP = `Usage: npm run demo -- [options]

Starts a local HTTP "provider" on 127.0.0.1 that enforces a quota and answers 429
beyond it, then sends requests to it through one valve from several concurrent
callers. Shows a live view, a summary, and writes an SVG timeline.

Options:
  --requests <n>       requests to send (default 300)
  --callers <n>        concurrent callers sharing the valve (default 8)
  --rate <n>           provider quota: requests per second (default 25)
  --window-limit <n>   provider quota: requests per 10 s (default 8 × rate)
  --no-induced-429     do not induce the provider's one burst of 429 + Retry-After
  --retry-after <s>    Retry-After of the induced burst, in seconds (default 2)
  --latency <ms>       provider processing time per request (default 120)
  --grace <ms>         arrival jitter the provider tolerates (default 50)
  --out <file>         where to write the SVG timeline (default ./demo-output/timeline.svg)
  --plain              print plain progress lines even on a terminal
  -h, --help           show this help

Exits 0 when every request succeeded and the quota itself never answered 429.`;

const INTEGER_OPTIONS = {
  '--requests': 'requests',
  '--callers': 'callers',
  '--rate': 'rate',
  '--window-limit': 'windowLimit',
  '--retry-after': 'retryAfter',
  '--latency': 'latency',
  '--grace': 'grace',
} as const;

/** Parses argv (without node and the script). Throws an Error with a readable message on bad input. */
export function parseArgs(argv: readonly string[]): DemoOptions {
  const options: DemoOptions = {
    requests: 300,
    callers: 8,
    rate: 25,
    windowLimit: 0,
    induce: true,
    retryAfter: 2,
    latency: 120,
    grace: 50,
    out: 'demo-output/timeline.svg',
    plain: false,
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const raw = argv[i]!;
    const eq = raw.indexOf('=');
    const flag = raw.startsWith('--') && eq > 0 ? raw.slice(0, eq) : raw;
    const inline = raw.startsWith('--') && eq > 0 ? raw.slice(eq + 1) : undefined;
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    if (flag === '-h' || flag === '--help') options.help = true;
    else if (flag === '--no-induced-429') options.induce = false;
    else if (flag === '--plain') options.plain = true;
    else if (flag === '--out') options.out = value();
    else if (flag in INTEGER_OPTIONS) {
      const key = INTEGER_OPTIONS[flag as keyof typeof INTEGER_OPTIONS];
      const text = value();
      const n = Number(text);
      const min = key === 'latency' || key === 'grace' ? 0 : 1;
      if (!Number.isSafeInteger(n) || n < min) {
        throw new Error(`${flag} expects an integer >= ${min}, got ${JSON.stringify(text)}`);
      }
      options[key] = n;
    } else {
      throw new Error(`unknown option ${JSON.stringify(raw)} (see --help)`);
    }
  }
  if (options.windowLimit === 0) options.windowLimit = 8 * options.rate;
  if (options.grace >= 1000) throw new Error(`--grace must be below 1000 ms, got ${options.grace}`);
  if (options.windowLimit < options.rate) {
    throw new Error(`--window-limit (${options.windowLimit}) must be at least --rate (${options.rate})`);
  }
  return options;
}
