/**
 * The benchmark runner: `npm run bench -- [--scenario name] [--quick] [--full] [--repeat N]`.
 *
 * Every measurement runs in its own child process (one scenario, one case, one peer). Peers are
 * interleaved (A B C, A B C, ...) `repeat` times, so drift in the machine's load hits every peer
 * alike. The runner prints the medians and valve/peer ratios as markdown tables, checks the
 * targets, and writes everything to bench/results/.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { median, type ResultLine } from './lib/common.js';

interface ScenarioSpec {
  readonly script: string;
  /** Cases run as separate child processes (`--case`); [undefined] runs the script's own set once. */
  readonly cases: readonly (string | undefined)[];
  /** Peers per case. */
  readonly peers: (caseName: string | undefined) => readonly string[];
  readonly valve: string;
  readonly exposeGc?: boolean;
  readonly repeat: number;
  /** Metrics shown as valve ÷ peer. */
  readonly ratios: readonly string[];
  readonly timeoutMs: number;
}

const scenarios: Record<string, ScenarioSpec> = {
  overhead: {
    script: 'overhead.ts',
    cases: ['never-binds'],
    peers: () => ['valve', 'valve-otel', 'p-limit', 'p-queue', 'bottleneck', 'rlf-memory'],
    valve: 'valve',
    exposeGc: true,
    repeat: 3,
    ratios: ['jobsPerSec', 'cpuUsPerJob', 'bytesPerQueuedJob'],
    timeoutMs: 180_000,
  },
  precision: {
    script: 'precision.ts',
    cases: ['1000/s b1', '200/s b1', '1000/s b10'],
    peers: (c) => [
      'valve',
      'valve-spin',
      ...(c === '200/s b1' ? ['valve-sliding'] : []),
      'p-queue',
      'p-queue-strict',
      'bottleneck',
      'rlf-memory',
      ...(c === '1000/s b10' ? [] : ['ref-timer', 'ref-spin', 'ref-busy']),
    ],
    valve: 'valve',
    repeat: 2,
    ratios: [],
    timeoutMs: 60_000,
  },
  'redis-throughput': {
    script: 'redis-throughput.ts',
    cases: ['1 process', '4 processes'],
    peers: (c) => [
      'valve-redis',
      ...(c === '1 process' ? ['valve-redis-batch128'] : []),
      'valve-redis-sliding',
      'bottleneck-redis',
      'rlf-redis',
      ...(c === '1 process' ? ['ref-roundtrip'] : []),
    ],
    valve: 'valve-redis',
    repeat: 5,
    ratios: ['jobsPerSec', 'commandsPerJob', 'redisCpuUsPerJob'],
    timeoutMs: 60_000,
  },
  'shared-limit': {
    script: 'shared-limit.ts',
    cases: [
      'burst 1, 4 processes',
      'burst 1, 16 processes',
      'burst 20, 4 processes',
      'burst 20, 16 processes',
    ],
    peers: () => ['valve-redis', 'bottleneck-redis', 'rlf-redis'],
    valve: 'valve-redis',
    repeat: 2,
    ratios: [],
    timeoutMs: 90_000,
  },
  quota: {
    script: 'quota.ts',
    cases: [
      'express 20/1s',
      'fastify 20/1s',
      'sliding 200/10s',
      'express 20/1s, 3 processes',
      'fastify 20/1s, 3 processes',
      'sliding 200/10s, 3 processes',
      'express 20/1s, rules 40/1s',
      'fastify 20/1s, rules 40/1s',
      'express 20/1s, rules 40/1s, 3 processes',
    ],
    peers: () => ['valve', 'valve-sliding', 'p-queue', 'bottleneck', 'rlf-memory'],
    valve: 'valve',
    repeat: 2,
    ratios: [],
    timeoutMs: 120_000,
  },
  memory: {
    script: 'memory.ts',
    cases: ['1M queued', 'through'],
    peers: () => ['valve', 'p-limit', 'p-queue'],
    valve: 'valve',
    exposeGc: true,
    repeat: 1,
    ratios: ['bytesPerQueuedJob', 'jobsPerSec'],
    timeoutMs: 600_000,
  },
  group: {
    script: 'group.ts',
    cases: ['overhead', '10 keys', '1000 keys', '10000 keys'],
    peers: (c) =>
      c === 'overhead'
        ? ['valve', 'valve-group']
        : ['valve-group-redis', 'rlf-redis', 'bottleneck-group-redis'],
    valve: 'valve-group-redis',
    repeat: 3,
    ratios: ['jobsPerSec', 'commandsPerJob', 'redisCpuUsPerJob'],
    timeoutMs: 180_000,
  },
  octokit: {
    script: 'octokit.ts',
    cases: ['local', '3 processes'],
    peers: () => ['valve-octokit', 'valve-octokit-defaults', 'plugin-throttling'],
    valve: 'valve-octokit',
    repeat: 1,
    ratios: ['requestsPerSec'],
    timeoutMs: 180_000,
  },
  scale: {
    script: 'scale.ts',
    cases: [undefined],
    peers: () => ['valve-redis'],
    valve: 'valve-redis',
    repeat: 1,
    ratios: [],
    timeoutMs: 900_000,
  },
};

// ---------------------------------------------------------------------------------------------- arguments

const argv = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
};
if (argv.includes('--help')) {
  process.stdout.write(
    [
      'npm run bench -- [options]',
      `  --scenario <name>   one of: ${Object.keys(scenarios).join(', ')} (repeatable with commas)`,
      '  --quick             short runs (smoke-tests the harness; figures are not meaningful)',
      '  --full              scenario 5 with 10 million jobs, scenario 6 with 10k ids and 16 processes',
      '  --repeat <N>        interleaved repetitions per scenario (default: per scenario, 1-3)',
      '  --case <name>       only this case of the selected scenario(s), e.g. --case "1000/s b1"',
      '  --peers <a,b>       only these peers',
      '  --from <file.json>  no runs: print the tables of an earlier results file again',
      '',
    ].join('\n'),
  );
  process.exit(0);
}
const quick = argv.includes('--quick');
const full = argv.includes('--full');
const repeatArg = option('repeat');
const repeatOverride = repeatArg === undefined ? undefined : Number(repeatArg);
if (repeatOverride !== undefined && !(Number.isInteger(repeatOverride) && repeatOverride > 0)) {
  throw new RangeError(`--repeat must be a positive integer, got ${repeatArg}`);
}
const onlyCase = option('case');
const onlyPeers = option('peers')?.split(',');
const selected = (option('scenario') ?? Object.keys(scenarios).join(',')).split(',');
for (const name of selected) {
  if (!scenarios[name])
    throw new RangeError(`unknown scenario ${name}; known: ${Object.keys(scenarios).join(', ')}`);
}

// ---------------------------------------------------------------------------------------------- running

const benchDir = fileURLToPath(new URL('.', import.meta.url));

/** The machine's CPU time counters (/proc/stat, all CPUs): total and stolen by the hypervisor. */
function cpuTimes(): { total: number; steal: number } | undefined {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    return { total: f.slice(0, 8).reduce((a, b) => a + b, 0), steal: f[7] ?? 0 };
  } catch {
    return undefined;
  }
}

/**
 * Runs one scenario child (its own process group: fleet workers and redis-servers it starts are
 * in it) and collects its result lines. The timeout kills the whole group; the child's exit
 * settles the run (with a grace for its output), whatever still holds its pipes. A child that
 * fails or gives no line gives a failed row naming the error, so the table shows it.
 */
function runChild(
  name: string,
  spec: ScenarioSpec,
  caseName: string | undefined,
  peer: string,
): Promise<ResultLine[]> {
  const nodeArgs = [
    ...(spec.exposeGc ? ['--expose-gc'] : []),
    '--import',
    'tsx',
    `${benchDir}scenarios/${spec.script}`,
  ];
  const scriptArgs = ['--peer', peer, ...(caseName ? ['--case', caseName] : [])];
  if (quick) scriptArgs.push('--quick');
  if (full) scriptArgs.push('--full');
  const cpu0 = cpuTimes();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...nodeArgs, ...scriptArgs], {
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    // Every process of the child's group (fleet workers, redis-server), the child included.
    const killGroup = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {}
    };
    const onSignal = () => {
      killGroup();
      process.exit(130);
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    let timedOut = false;
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    const timer = setTimeout(() => {
      timedOut = true;
      err += `\n(timed out after ${spec.timeoutMs} ms)`;
      killGroup();
    }, spec.timeoutMs);
    let settled = false;
    const settle = (code: number | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      // Whatever the child left running (a crashed run's workers and servers) goes with it.
      killGroup();
      child.stdout.destroy();
      child.stderr.destroy();
      const lines: ResultLine[] = [];
      // Share of the machine's CPU time the hypervisor took during this measurement (steal): time
      // in which no process here could run, whatever it did.
      const cpu1 = cpuTimes();
      const stealPct =
        cpu0 && cpu1 && cpu1.total > cpu0.total
          ? Math.round(((cpu1.steal - cpu0.steal) / (cpu1.total - cpu0.total)) * 1000) / 10
          : null;
      for (const line of out.split('\n')) {
        if (!line.startsWith('{')) continue;
        const parsed = JSON.parse(line) as ResultLine;
        lines.push({ ...parsed, metrics: { ...parsed.metrics, stealPct } });
      }
      if (code !== 0 || lines.length === 0) {
        process.stderr.write(
          `  ! ${spec.script} ${caseName ?? ''} ${peer}: exit ${code}\n${err.slice(-2000)}\n`,
        );
        const reason = timedOut
          ? `timed out after ${spec.timeoutMs} ms`
          : (err
              .split('\n')
              .map((l) => l.trim())
              .find((l) => /^(\w*Error|error)\b|Error: /.test(l)) ?? `exit ${code}`);
        if (lines.length === 0)
          lines.push({
            scenario: name,
            case: caseName ?? '',
            peer,
            metrics: {},
            notes: `FAILED: ${reason.replace(/\|/g, '/').slice(0, 200)}`,
          });
      }
      resolve(lines);
    };
    // 'close' waits for the pipes, which a leftover grandchild may hold open: settle on 'exit'
    // after a grace for the child's last output.
    child.on('close', (code) => settle(code));
    child.on('exit', (code) => setTimeout(() => settle(code), 2000));
  });
}

interface Aggregate {
  readonly scenario: string;
  readonly case: string;
  readonly peer: string;
  readonly runs: number;
  readonly median: Record<string, number | null>;
  readonly max: Record<string, number | null>;
  readonly notes?: string | undefined;
}

function aggregate(lines: readonly ResultLine[]): Aggregate[] {
  const groups = new Map<string, ResultLine[]>();
  for (const line of lines) {
    // A failed run's row (no metrics) stays apart from the same peer's measured ones.
    const failed = line.notes?.startsWith('FAILED') ? '\u0000failed' : '';
    const key = `${line.scenario}\u0000${line.case}\u0000${line.peer}${failed}`;
    const group = groups.get(key) ?? [];
    group.push(line);
    groups.set(key, group);
  }
  const out: Aggregate[] = [];
  for (const group of groups.values()) {
    const first = group[0]!;
    const med: Record<string, number | null> = {};
    const max: Record<string, number | null> = {};
    for (const metric of new Set(group.flatMap((l) => Object.keys(l.metrics)))) {
      const values = group.map((l) => l.metrics[metric]).filter((v): v is number => typeof v === 'number');
      med[metric] = values.length ? median(values) : null;
      max[metric] = values.length ? Math.max(...values) : null;
    }
    out.push({
      scenario: first.scenario,
      case: first.case,
      peer: first.peer,
      runs: group.length,
      median: med,
      max,
      notes: first.notes,
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------- reporting

const fmt = (v: number | null | undefined): string => {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  const abs = Math.abs(v);
  if (abs >= 1000) return Math.round(v).toLocaleString('en-US');
  if (abs >= 100) return v.toFixed(0);
  if (abs >= 10) return v.toFixed(1);
  if (abs >= 1) return v.toFixed(2);
  if (v === 0) return '0';
  return v.toPrecision(2);
};

function table(name: string, spec: ScenarioSpec, rows: readonly Aggregate[]): string {
  const metrics = [...new Set(rows.flatMap((r) => Object.keys(r.median)))];
  const header = ['case', 'peer', 'runs', ...metrics, ...spec.ratios.map((m) => `valve÷peer ${m}`)];
  const lines = [`### ${name}`, '', `| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`];
  for (const r of rows) {
    const valveRow = rows.find((v) => v.case === r.case && v.peer === spec.valve);
    const ratios = spec.ratios.map((m) => {
      if (r.peer.startsWith('valve') || !valveRow) return '';
      const a = valveRow.median[m];
      const b = r.median[m];
      return typeof a === 'number' && typeof b === 'number' && b !== 0 ? `${fmt(a / b)}×` : '–';
    });
    const cells = [
      r.case,
      r.peer + (r.notes ? ` (${r.notes})` : ''),
      String(r.runs),
      ...metrics.map((m) => fmt(r.median[m])),
      ...ratios,
    ];
    lines.push(`| ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

interface Target {
  readonly text: string;
  readonly value: string;
  readonly met: boolean | null;
  /** The same measure for a reference in the same run (what this machine allows at all), if any. */
  readonly reference?: string | undefined;
}

function targets(rows: readonly Aggregate[]): Target[] {
  const get = (scenario: string, c: string, peer: string) =>
    rows.find((r) => r.scenario === scenario && r.case === c && r.peer === peer);
  const out: Target[] = [];
  const add = (
    text: string,
    value: number | null | undefined,
    ok: (v: number) => boolean,
    unit = '',
    reference?: [string, number | null | undefined][],
  ) => {
    if (value === null || value === undefined || Number.isNaN(value)) return;
    const refs = (reference ?? [])
      .filter((r): r is [string, number] => typeof r[1] === 'number' && !Number.isNaN(r[1]))
      .map(([name, v]) => `${name} ${fmt(v)}${unit}`);
    out.push({
      text,
      value: `${fmt(value)}${unit}`,
      met: ok(value),
      reference: refs.join(', ') || undefined,
    });
  };
  const ratio = (a: number | null | undefined, b: number | null | undefined) =>
    typeof a === 'number' && typeof b === 'number' && b !== 0 ? a / b : null;

  const ov = (p: string) => get('overhead', 'never-binds', p);
  add(
    'overhead: jobs/s ≥ 1.0× p-limit',
    ratio(ov('valve')?.median.jobsPerSec, ov('p-limit')?.median.jobsPerSec),
    (v) => v >= 1,
    '×',
  );
  add(
    'overhead: jobs/s ≈ 2× p-queue',
    ratio(ov('valve')?.median.jobsPerSec, ov('p-queue')?.median.jobsPerSec),
    (v) => v >= 2,
    '×',
  );
  add('overhead: ≤ 400 B per queued job', ov('valve')?.median.bytesPerQueuedJob, (v) => v <= 400, ' B');
  add(
    'overhead: with valve/otel and a meter provider, jobs/s ≥ 0.9× valve',
    ratio(ov('valve-otel')?.median.jobsPerSec, ov('valve')?.median.jobsPerSec),
    (v) => v >= 0.9,
    '×',
  );

  for (const c of ['1000/s b1', '200/s b1', '1000/s b10']) {
    for (const peer of ['valve', 'valve-spin']) {
      const r = get('precision', c, peer);
      add(
        `precision ${c}, ${peer}: 0 violations on the store's clock (worst run)`,
        r?.max.grantViolations,
        (v) => v === 0,
      );
      add(
        `precision ${c}, ${peer}: 0 violations on observed starts (worst run)`,
        r?.max.violations,
        (v) => v === 0,
      );
    }
  }
  // By default (plain timers): CPU close to a timer-based limiter's, utilisation at least its.
  for (const c of ['1000/s b1', '200/s b1']) {
    const v = get('precision', c, 'valve');
    const pq = get('precision', c, 'p-queue');
    add(
      `precision ${c}, default: CPU ≤ 2× p-queue's`,
      ratio(v?.median.cpuPct, pq?.median.cpuPct),
      (x) => x <= 2,
      '×',
    );
    add(
      `precision ${c}, default: utilisation ≥ p-queue's (valve − p-queue, points)`,
      typeof v?.median.utilisationPct === 'number' && typeof pq?.median.utilisationPct === 'number'
        ? v.median.utilisationPct - pq.median.utilisationPct
        : null,
      (x) => x >= 0,
      '',
      [['ref-timer', get('precision', c, 'ref-timer')?.median.utilisationPct]],
    );
    add(
      `precision ${c}, precision 'spin': utilisation ≥ 97%`,
      get('precision', c, 'valve-spin')?.median.utilisationPct,
      (x) => x >= 97,
      '%',
      [
        ['ref-spin', get('precision', c, 'ref-spin')?.median.utilisationPct],
        ['ref-busy', get('precision', c, 'ref-busy')?.median.utilisationPct],
      ],
    );
  }
  add(
    'precision 1000/s b10, default: utilisation ≥ 99.5%',
    get('precision', '1000/s b10', 'valve')?.median.utilisationPct,
    (v) => v >= 99.5,
    '%',
  );

  const rt = (p: string) => get('redis-throughput', '1 process', p);
  add(
    'Redis 1 process: ≥ 20× Bottleneck jobs/s',
    ratio(rt('valve-redis')?.median.jobsPerSec, rt('bottleneck-redis')?.median.jobsPerSec),
    (v) => v >= 20,
    '×',
  );
  add(
    'Redis 1 process: ≥ 3× rate-limiter-flexible jobs/s',
    ratio(rt('valve-redis')?.median.jobsPerSec, rt('rlf-redis')?.median.jobsPerSec),
    (v) => v >= 3,
    '×',
    [['ref-roundtrip', ratio(rt('ref-roundtrip')?.median.jobsPerSec, rt('rlf-redis')?.median.jobsPerSec)]],
  );
  add(
    'Redis 1 process: ≤ 1/16 script call per job',
    rt('valve-redis')?.median.scriptsPerJob,
    (v) => v <= 1 / 16,
  );
  add(
    'Redis 1 process: Redis CPU per job ≤ 1/10 of rate-limiter-flexible',
    ratio(rt('valve-redis')?.median.redisCpuUsPerJob, rt('rlf-redis')?.median.redisCpuUsPerJob),
    (v) => v <= 0.1,
    '×',
    [
      [
        'ref-roundtrip',
        ratio(rt('ref-roundtrip')?.median.redisCpuUsPerJob, rt('rlf-redis')?.median.redisCpuUsPerJob),
      ],
      [
        'valve batch 128',
        ratio(rt('valve-redis-batch128')?.median.redisCpuUsPerJob, rt('rlf-redis')?.median.redisCpuUsPerJob),
      ],
    ],
  );

  for (const [c, pct] of [
    ['burst 1', 90],
    ['burst 20', 99],
  ] as const) {
    const r = get('shared-limit', c, 'valve-redis');
    add(
      `shared ${c}: 0 windows above the bound on the store's clock (worst run)`,
      r?.max.grantViolations,
      (v) => v === 0,
    );
    const excess =
      r && typeof r.max.maxIn1s === 'number' && typeof r.max.bound === 'number'
        ? r.max.maxIn1s - r.max.bound
        : null;
    add(`shared ${c}: observed starts at most +1 over the bound (worst run)`, excess, (v) => v <= 1);
    add(`shared ${c}: utilisation ≥ ${pct}%`, r?.median.utilisationPct, (v) => v >= pct, '%', [
      ['ref-redis-poll', get('shared-limit', c, 'ref-redis-poll')?.median.utilisationPct],
    ]);
  }

  // The rule docs/choose-an-algorithm.md recommends for these providers is the sliding window
  // (`valve-sliding`); GCRA burst 1 (`valve`) is reported beside the peers.
  const per100 = (r: ReturnType<typeof get>): number | null =>
    r && typeof r.max.rejected429 === 'number' && typeof r.median.requests === 'number'
      ? (r.max.rejected429 / r.median.requests) * 100
      : null;
  const quotaPeers = (c: string): [string, number | null | undefined][] => [
    ['valve GCRA', get('quota', c, 'valve')?.median.quotaPct],
    ['p-queue', get('quota', c, 'p-queue')?.median.quotaPct],
    ['bottleneck', get('quota', c, 'bottleneck')?.median.quotaPct],
    ['rlf', get('quota', c, 'rlf-memory')?.median.quotaPct],
  ];
  for (const base of ['express 20/1s', 'fastify 20/1s', 'sliding 200/10s']) {
    for (const c of [base, `${base}, 3 processes`]) {
      const r = get('quota', c, 'valve-sliding');
      add(
        `quota ${c}: ≥ 95% of the provider's quota`,
        r?.median.quotaPct,
        (v) => v >= 95,
        '%',
        quotaPeers(c),
      );
      add(`quota ${c}: ≤ 1 × 429 per 100 requests (worst run)`, per100(r), (v) => v <= 1);
    }
  }
  for (const c of [
    'express 20/1s, rules 40/1s',
    'fastify 20/1s, rules 40/1s',
    'express 20/1s, rules 40/1s, 3 processes',
  ]) {
    const r = get('quota', c, 'valve-sliding');
    add(
      `quota ${c}: every request ends 200 (worst run: requests that did not)`,
      r?.max.failed,
      (v) => v === 0,
    );
    add(`quota ${c}: ≤ 5 × 429 per 100 requests (worst run)`, per100(r), (v) => v <= 5);
  }

  const scale = rows.filter((r) => r.scenario === 'scale');
  for (const kind of ['ids', 'processes']) {
    const steps = scale.filter((r) => r.case.startsWith(kind));
    const cmds = steps.map((r) => r.median.commandsPerJob).filter((v): v is number => typeof v === 'number');
    if (cmds.length > 1)
      add(
        `scale (${kind}): commands per job flat (max ÷ min ≤ 1.5)`,
        Math.max(...cmds) / Math.min(...cmds),
        (v) => v <= 1.5,
        '×',
      );
    const keys = steps.map((r) => r.median.keysPerId).filter((v): v is number => typeof v === 'number');
    if (keys.length > 1) add(`scale (${kind}): keys per id constant (max)`, Math.max(...keys), (v) => v <= 2);
  }

  const group = (c: string, peer: string) => get('group', c, peer)?.median;
  add(
    'group overhead: jobs/s within 10 % of a plain valve',
    ratio(group('overhead', 'valve-group')?.jobsPerSec, group('overhead', 'valve')?.jobsPerSec),
    (v) => v >= 0.9,
    '×',
  );
  add(
    'group 10000 keys: jobs/s ≥ rate-limiter-flexible',
    ratio(group('10000 keys', 'valve-group-redis')?.jobsPerSec, group('10000 keys', 'rlf-redis')?.jobsPerSec),
    (v) => v >= 1,
    '×',
  );
  const perJob = ['10 keys', '1000 keys', '10000 keys']
    .map((c) => group(c, 'valve-group-redis')?.commandsPerJob)
    .filter((v): v is number => typeof v === 'number');
  if (perJob.length > 1)
    add(
      'group: commands per job flat from 10 to 10,000 keys (max ÷ min ≤ 1.5)',
      Math.max(...perJob) / Math.min(...perJob),
      (v) => v <= 1.5,
      '×',
    );
  return out;
}

function machine(): Record<string, string | number> {
  const tryRun = (cmd: string, args: string[]): string => {
    try {
      return execFileSync(cmd, args, { encoding: 'utf8' }).trim();
    } catch {
      return 'unknown';
    }
  };
  return {
    nproc: Number(tryRun('nproc', [])) || os.availableParallelism(),
    cpu: os.cpus()[0]?.model ?? 'unknown',
    memoryGb: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
    redis: tryRun('redis-server', ['--version']),
    commit: tryRun('git', ['rev-parse', '--short', 'HEAD']),
    srcChanges: tryRun('git', ['status', '--porcelain', 'src']).split('\n').filter(Boolean).length,
  };
}

// ---------------------------------------------------------------------------------------------- main

interface SavedRun {
  readonly started: string;
  readonly machine: Record<string, string | number>;
  readonly argv: string[];
  readonly loadAverages?: number[];
  readonly lines: ResultLine[];
}

async function main(): Promise<void> {
  const from = option('from');
  const saved = from ? (JSON.parse(readFileSync(from, 'utf8')) as SavedRun) : undefined;
  const started = saved ? new Date(saved.started) : new Date();
  const lines: ResultLine[] = saved ? [...saved.lines] : [];
  const loads: number[] = saved ? [...(saved.loadAverages ?? [])] : [];
  for (const name of saved ? [] : selected) {
    const spec = scenarios[name]!;
    const repeat = repeatOverride ?? spec.repeat;
    process.stderr.write(`# ${name} (${repeat}×, interleaved)\n`);
    for (let rep = 1; rep <= repeat; rep++) {
      for (const caseName of spec.cases) {
        if (onlyCase !== undefined && caseName !== undefined && caseName !== onlyCase) continue;
        for (const peer of spec.peers(caseName)) {
          if (onlyPeers && !onlyPeers.includes(peer)) continue;
          const t0 = Date.now();
          loads.push(os.loadavg()[0]!);
          const got = await runChild(name, spec, caseName, peer);
          lines.push(...got);
          process.stderr.write(
            `  ${rep}/${repeat} ${caseName ?? ''} ${peer}: ${got.length} line(s), ${((Date.now() - t0) / 1000).toFixed(1)} s\n`,
          );
        }
      }
    }
  }
  const rows = aggregate(lines);
  const info = saved ? saved.machine : machine();
  const runQuick = saved ? saved.argv.includes('--quick') : quick;
  const runFull = saved ? saved.argv.includes('--full') : full;
  const md: string[] = [
    `## valve benchmark, ${started.toISOString()}`,
    '',
    `Machine: ${info.nproc} CPUs (${info.cpu}), ${info.memoryGb} GB, Node ${info.node}, ${String(info.redis).split(' ').slice(0, 3).join(' ')}, commit ${info.commit}${info.srcChanges ? ` + ${info.srcChanges} uncommitted src/ file(s)` : ''}${runQuick ? ', **--quick (not meaningful)**' : ''}${runFull ? ', --full' : ''}.`,
    `Figures are medians over interleaved runs; each run is a fresh process.${loads.length ? ` 1-minute load average during the run: ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)} (on ${info.nproc} CPUs; other work shared the machine).` : ''}`,
    '',
  ];
  for (const name of selected) {
    const spec = scenarios[name]!;
    const own = rows.filter((r) => r.scenario === name);
    if (own.length) md.push(table(name, spec, own), '');
  }
  const checks = targets(rows);
  if (checks.length) {
    md.push('### targets', '', '| target | valve | met | reference in the same run |', '|---|---|---|---|');
    for (const t of checks)
      md.push(`| ${t.text} | ${t.value} | ${t.met ? 'met' : '**missed**'} | ${t.reference ?? ''} |`);
    md.push('');
  }
  const text = md.join('\n');
  process.stdout.write(`${text}\n`);
  if (saved) return;
  const dir = `${benchDir}results`;
  mkdirSync(dir, { recursive: true });
  const stamp = started.toISOString().replace(/[:.]/g, '-');
  const json = JSON.stringify(
    {
      started: started.toISOString(),
      finished: new Date().toISOString(),
      machine: info,
      argv,
      loadAverages: loads,
      rows,
      lines,
      targets: checks,
    },
    null,
    2,
  );
  writeFileSync(`${dir}/${stamp}.json`, json);
  writeFileSync(`${dir}/latest.json`, json);
  writeFileSync(`${dir}/latest.md`, text);
  process.stderr.write(`results: bench/results/${stamp}.json (and latest.json, latest.md)\n`);
}

await main();
