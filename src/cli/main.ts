/**
 * The `valve` command (the package's bin, run by bin.ts): reads and acts on the state a
 * redisStore keeps in Redis or Valkey. See docs/operating.md. Every failure ends in one line on
 * stderr and a documented exit code (errors.ts), never a stack trace. `main()` never exits the
 * process: it writes to the streams it is given and returns the exit code.
 */
import { readFileSync } from 'node:fs';
import { hostname, userInfo } from 'node:os';
import { parseArgs } from 'node:util';
import { MAX_TIMER_DELAY_MS } from '../clock.js';
import { parseDuration } from '../duration.js';
import { MAX_DURATION_MS } from '../stores/checks.js';
import { redisStore } from '../stores/redis/index.js';
import { validatePrefix } from '../stores/redis/keys.js';
import { CLIENT_NAMES, type ClientName, type Conn, connect, type Target, within } from './connect.js';
import { doctor } from './doctor.js';
import { CliError, EXIT, oneLine, usageError } from './errors.js';
import { human, iso, statusLines } from './format.js';
import { checkKeyPrefix } from './key-prefix.js';
import { readStatus } from './state.js';
import { type Output, watch } from './watch.js';

const USAGE = `Usage: valve <command> [options]

Commands:
  status <id>             each rule's units left and next free unit, the pause, the leases,
                          rules in use that are not recorded (mismatches)
  pause <id> <duration>   pause every valve of <id> for at least <duration> (e.g. 30s, 5m);
                          extends only, like valve.pause()
  resume <id>             end the pause of <id> now, like valve.resume()
  watch <id>              the state once a second (a live view on a terminal, one line per
                          second otherwise)
  doctor                  check that a redisStore would work here: version, mode, ACL, TLS,
                          latency, clock skew, scripts, wake-ups

Options:
  --redis <url>           redis://[user:password@]host:port[/db], rediss:// for TLS
                          (default: $VALVE_REDIS_URL). Repeat it to give cluster seeds.
  --cluster               connect as a cluster client (detected with INFO cluster otherwise)
  --prefix <prefix>       the redisStore's key prefix (default: valve)
  --key-prefix <p>        the keyPrefix of the application's ioredis or iovalkey client, if any:
                          keys get it, wake-up channels do not, as with that client
  --json                  print one JSON object instead of text (status, pause, resume, doctor)
  --tls-ca <file>         a PEM CA certificate to trust for rediss://
  --client <name>         ioredis, iovalkey or redis (default: the first one installed)
  --timeout <duration>    for connecting and for each command (default: 5s)
  --count <n>             watch: stop after n readings
  --plain                 watch: one plain line per second even on a terminal
  -h, --help              this help

Exit codes: 0 done (doctor: the store would work), 1 failed (unreachable server, refused
command, doctor found a problem), 2 bad usage, 3 nothing recorded for the id.`;

/** Where the command writes and what it reads of the environment (bin.ts passes the process's). */
export interface CliIo {
  stdout: Output;
  stderr: Output;
  env: Record<string, string | undefined>;
}

interface Parsed {
  command: string | undefined;
  args: string[];
  target: Target;
  prefix: string;
  json: boolean;
  count: number;
  plain: boolean;
  help: boolean;
}

function parse(argv: string[], environment: CliIo['env']): Parsed {
  let values: Record<string, unknown>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        redis: { type: 'string', multiple: true },
        cluster: { type: 'boolean' },
        prefix: { type: 'string' },
        'key-prefix': { type: 'string' },
        json: { type: 'boolean' },
        'tls-ca': { type: 'string' },
        client: { type: 'string' },
        timeout: { type: 'string' },
        count: { type: 'string' },
        plain: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    throw usageError(oneLine(err));
  }
  const client = values.client as string | undefined;
  if (client !== undefined && !CLIENT_NAMES.includes(client as ClientName)) {
    throw usageError(`--client: expected one of ${CLIENT_NAMES.join(', ')}, got ${JSON.stringify(client)}`);
  }
  let prefix = 'valve';
  if (values.prefix !== undefined) {
    try {
      prefix = validatePrefix(values.prefix);
    } catch (err) {
      throw usageError(`--prefix: ${oneLine(err).replace('Expected `prefix` to be', 'expected')}`);
    }
  }
  const keyPrefix = values['key-prefix'] === undefined ? '' : checkKeyPrefix(values['key-prefix'] as string);
  // Node's timers take at most 2^31 − 1 ms (24.8 days).
  const timeout =
    values.timeout === undefined
      ? 5000
      : duration(values.timeout as string, '--timeout', MAX_TIMER_DELAY_MS, '24 days (2147483647 ms)');
  let count = Number.POSITIVE_INFINITY;
  if (values.count !== undefined) {
    count = Number(values.count);
    if (!Number.isSafeInteger(count) || count < 1) {
      throw usageError(`--count: expected a positive integer, got ${JSON.stringify(values.count)}`);
    }
  }
  let ca: string | undefined;
  if (values['tls-ca'] !== undefined) {
    try {
      ca = readFileSync(values['tls-ca'] as string, 'utf8');
    } catch (err) {
      throw usageError(`--tls-ca: ${oneLine(err)}`);
    }
  }
  // An option that does not apply to the command is bad usage, not silently ignored.
  const command = positionals[0];
  const only: [string, boolean, string[]][] = [
    ['--json', values.json !== undefined, ['status', 'pause', 'resume', 'doctor']],
    ['--count', values.count !== undefined, ['watch']],
    ['--plain', values.plain !== undefined, ['watch']],
  ];
  for (const [name, given, commands] of only) {
    const known = ['status', 'pause', 'resume', 'watch', 'doctor'].includes(command ?? '');
    if (given && known && values.help !== true && !commands.includes(command!)) {
      throw usageError(`${name} does not apply to ${command} (only to ${commands.join(', ')})`);
    }
  }
  const env = environment.VALVE_REDIS_URL;
  const urls = (values.redis as string[] | undefined) ?? (env ? [env] : []);
  return {
    command: positionals[0],
    args: positionals.slice(1),
    target: {
      urls,
      cluster: values.cluster === true,
      client: client as ClientName | undefined,
      ca,
      timeout,
      reconnect: positionals[0] === 'watch',
      keyPrefix,
    },
    prefix,
    json: values.json === true,
    count,
    plain: values.plain === true,
    help: values.help === true,
  };
}

/** A duration option or argument in ms: '30s', '5m', '1.5h', or a number of ms. */
function duration(text: string, name: string, max: number, maxText: string): number {
  const value = /^\d+(\.\d+)?$/.test(text) ? Number(text) : text;
  let ms: number;
  try {
    ms = parseDuration(value, name);
  } catch {
    throw usageError(
      `${name}: expected a duration such as 250ms, 30s, 5m, 1h or 1d, got ${JSON.stringify(text)}`,
    );
  }
  if (ms > max) throw usageError(`${name}: expected at most ${maxText}, got ${JSON.stringify(text)}`);
  return ms;
}

function expectArgs(p: Parsed, names: string[]): void {
  if (p.args.length !== names.length) {
    const usage = `valve ${p.command} ${names.map((n) => `<${n}>`).join(' ')}`;
    throw usageError(
      p.args.length < names.length
        ? `missing <${names[p.args.length]}>: ${usage}`
        : `too many arguments: ${usage}`,
    );
  }
}

/** What `valve pause` records as the pause's cause: the command, and who ran it where. */
function pausedBy(): string {
  let user = 'unknown';
  try {
    user = userInfo().username;
  } catch {}
  return `valve pause by ${user}@${hostname()}`;
}

async function serverNow(conn: Conn, key: string, timeout: number): Promise<number> {
  const node = await conn.nodeFor(key);
  const [s, us] = (await within(node.call(['TIME']), timeout, 'TIME')) as [string, string];
  return Number(s) * 1000 + Number(us) / 1000;
}

/** Where the id's keys are, for messages: "prefix valve" or "key prefix app: and prefix valve". */
const under = (p: Parsed) =>
  p.target.keyPrefix ? `key prefix ${p.target.keyPrefix} and prefix ${p.prefix}` : `prefix ${p.prefix}`;

async function run(p: Parsed, io: CliIo): Promise<number> {
  const print = (line: string) => io.stdout.write(`${line}\n`);
  const commands = ['status', 'pause', 'resume', 'watch', 'doctor'];
  if (p.help || p.command === 'help') {
    print(USAGE);
    return EXIT.ok;
  }
  if (p.command === undefined)
    throw usageError(`missing command: one of ${commands.join(', ')} (valve --help)`);
  if (!commands.includes(p.command)) {
    throw usageError(`unknown command ${JSON.stringify(p.command)}: expected one of ${commands.join(', ')}`);
  }
  expectArgs(p, p.command === 'pause' ? ['id', 'duration'] : p.command === 'doctor' ? [] : ['id']);
  const ms = p.command === 'pause' ? duration(p.args[1]!, '<duration>', MAX_DURATION_MS, '365 days') : 0;
  const conn = await connect(p.target);
  const t = p.target.timeout;
  try {
    if (p.command === 'status' || p.command === 'watch') {
      const status = await within(readStatus(conn, p.prefix, p.args[0]!, { scanMs: t / 2 }), t, 'status');
      if (status.unknown) {
        // --json: the object still (its `unknown` is true), then the one line and exit code 3.
        if (p.json && p.command === 'status') print(JSON.stringify(status, null, 2));
        throw new CliError(
          EXIT.unknownId,
          `unknown id ${JSON.stringify(status.id)}: no rules, pause or leases recorded under ${under(p)} (check --prefix, --key-prefix and the id)`,
        );
      }
      if (p.command === 'watch') {
        await watch(conn, status, {
          timeout: t,
          prefix: p.prefix,
          id: status.id,
          count: p.count,
          plain: p.plain,
          out: io.stdout,
        });
      } else if (p.json) print(JSON.stringify(status, null, 2));
      else for (const line of statusLines(status)) print(line);
      return EXIT.ok;
    }
    if (p.command === 'pause' || p.command === 'resume') {
      const id = p.args[0]!;
      const store = redisStore({ client: conn.storeClient, prefix: p.prefix, timeout: t });
      // The pause and whether anything is recorded, never the rules: a key valve refuses (of
      // another type, malformed) must not stop an emergency pause.
      const statusBefore = await within(
        readStatus(conn, p.prefix, id, { scan: false, rules: false }),
        t,
        'status',
      );
      if (p.command === 'pause') {
        const until = await store.pause(statusBefore.id, ms, pausedBy());
        const now = await serverNow(conn, `${conn.keyPrefix}${p.prefix}:{${statusBefore.id}}:pause`, t);
        const extended = statusBefore.pause === null || until > statusBefore.pause.until;
        if (p.json) {
          print(
            JSON.stringify({
              id: statusBefore.id,
              until,
              in: Math.max(0, until - now),
              extended,
              known: !statusBefore.unknown,
            }),
          );
        } else {
          print(
            `paused ${statusBefore.id} until ${iso(until)} (${human(Math.max(0, until - now))} from now)` +
              (extended ? '' : ': a longer pause was already set, and pauses only extend'),
          );
        }
      } else {
        await store.resume(statusBefore.id);
        if (p.json)
          print(
            JSON.stringify({
              id: statusBefore.id,
              resumed: true,
              wasPaused: statusBefore.pause !== null,
              known: !statusBefore.unknown,
            }),
          );
        else
          print(
            statusBefore.pause
              ? `resumed ${statusBefore.id}`
              : `resumed ${statusBefore.id} (it was not paused)`,
          );
      }
      if (statusBefore.unknown) {
        io.stderr.write(
          `valve: note: nothing else is recorded for id ${JSON.stringify(statusBefore.id)} under ${under(p)}\n`,
        );
      }
      return EXIT.ok;
    }
    const checks = await doctor(conn, p.prefix, t);
    const ok = checks.every((c) => c.level !== 'fail');
    if (p.json) print(JSON.stringify({ ok, checks }, null, 2));
    else {
      for (const c of checks) print(`${c.level.padEnd(4)}  ${c.name.padEnd(9)} ${c.detail}`);
      print(ok ? 'the store would work here' : 'the store would NOT work here: see the lines marked fail');
    }
    return ok ? EXIT.ok : EXIT.failure;
  } finally {
    await conn.close().catch(() => {});
  }
}

/** Runs the command with `argv` (the arguments after `valve`); resolves to its exit code. */
export async function main(argv: string[], io: CliIo): Promise<number> {
  try {
    return await run(parse(argv, io.env), io);
  } catch (err) {
    io.stderr.write(`valve: ${oneLine(err)}\n`);
    return err instanceof CliError ? err.exitCode : EXIT.failure;
  }
}
