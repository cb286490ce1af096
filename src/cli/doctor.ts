/**
 * `valve doctor`: would a redisStore work against this server, as this user? Each check gives
 * ok, warn or fail; the command exits 0 only when none failed.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../clock.js';
import { isValveError } from '../errors.js';
import { normalizeRule } from '../rules/rule.js';
import { recordOf } from '../rulesets.js';
import { redisStore } from '../stores/redis/index.js';
import { idKeys } from '../stores/redis/keys.js';
import { ACQUIRE } from '../stores/redis/scripts.generated.js';
import type { Conn, NodeConn } from './connect.js';
import { within } from './connect.js';
import { oneLine } from './errors.js';
import { readStatus } from './state.js';

export type Level = 'ok' | 'warn' | 'fail';
export interface Check {
  name: string;
  level: Level;
  detail: string;
}

/**
 * The commands the store runs (inside its scripts and on connections), as docs/redis.md lists
 * them. A client keyPrefix (--key-prefix) comes before the keys, not the channels.
 */
function storeCommands(keyPrefix: string, prefix: string, cluster: boolean): string[][] {
  const key = `${keyPrefix}${prefix}:{valve-doctor}:pause`;
  const channel = `${prefix}:{valve-doctor}:wake`;
  return [
    ['EVALSHA', ACQUIRE.sha, '1', key],
    ['EVAL', 'return 1', '1', key],
    ['TIME'],
    ['GET', key],
    ['SET', key, '1'],
    ['DEL', key],
    ['EXISTS', key],
    ['ZADD', key, '1', 'm'],
    ['ZREM', key, 'm'],
    ['ZREMRANGEBYSCORE', key, '0', '1'],
    ['ZCARD', key],
    ['ZRANGE', key, '0', '1'],
    ['ZSCORE', key, 'm'],
    ['LRANGE', key, '0', '1'],
    ['LINDEX', key, '0'],
    ['LSET', key, '0', '1'],
    ['LTRIM', key, '0', '1'],
    ['RPUSH', key, '1'],
    ['PEXPIRE', key, '1'],
    cluster ? ['SPUBLISH', channel, 'm'] : ['PUBLISH', channel, 'm'],
    cluster ? ['SSUBSCRIBE', channel] : ['SUBSCRIBE', channel],
    ['PING'],
    ['INFO', 'server'],
  ];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every doctor check, in order. */
export async function doctor(conn: Conn, prefix: string, timeout: number): Promise<Check[]> {
  const checks: Check[] = [];
  const add = (name: string, level: Level, detail: string) => checks.push({ name, level, detail });
  const call = (args: string[], key?: string) => within(conn.call(args, key), timeout, args[0]!);

  // Server version and mode (per node on a cluster).
  // Every master: a cluster's nodes can differ (a rolling upgrade, one node configured by hand).
  const nodes = await conn.nodes();
  const versions: { node: string; version: string; major: number; rank: number[] }[] = [];
  for (const node of nodes) {
    const info = String(await within(node.call(['INFO', 'server']), timeout, 'INFO server'));
    const valkey = /^valkey_version:(\S+)/m.exec(info)?.[1];
    const number = valkey ?? /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'unknown';
    const rank = number.split('.').map((n) => Number.parseInt(n, 10) || 0);
    versions.push({
      node: node.name,
      version: `${valkey ? 'Valkey' : 'Redis'} ${number}`,
      major: rank[0]!,
      rank,
    });
  }
  // The lowest version decides.
  const older = (a: number[], b: number[]) => {
    for (let i = 0; i < Math.max(a.length, b.length); i++)
      if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) < (b[i] ?? 0);
    return false;
  };
  const lowest = versions.reduce((low, v) => (older(v.rank, low.rank) ? v : low));
  const tooOld = versions.filter((v) => v.major < 7);
  const mixed = new Set(versions.map((v) => v.version)).size > 1;
  const mode = conn.cluster ? `cluster of ${nodes.length} masters` : 'standalone';
  add(
    'server',
    tooOld.length === 0 ? 'ok' : 'fail',
    `${mixed ? `lowest ${lowest.version} (${versions.map((v) => `${v.node} ${v.version}`).join(', ')})` : lowest.version}, ${mode}` +
      (tooOld.length === 0
        ? ''
        : `: valve needs Redis 7+ or Valkey 7.2+ (its scripts declare flags with #!lua)${conn.cluster ? `; too old: ${tooOld.map((v) => v.node).join(', ')}` : ''}`),
  );
  add('client', 'ok', `${conn.family}, ${conn.tls ? 'TLS (rediss://)' : 'no TLS'}`);

  // Round trip: the median of 5 PINGs.
  const rtts: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    await call(['PING']);
    rtts.push(performance.now() - t0);
  }
  rtts.sort((a, b) => a - b);
  const rtt = rtts[2]!;
  add('latency', rtt < 50 ? 'ok' : 'warn', `round trip ${rtt.toFixed(2)} ms (median of 5 PINGs)`);

  // Clock skew against each node's TIME (the store's clock for the ids it owns).
  const skews: string[] = [];
  let worst = 0;
  for (const node of nodes) {
    const t0 = Date.now();
    const [s, u] = (await within(node.call(['TIME']), timeout, 'TIME')) as [string, string];
    const t1 = Date.now();
    const skew = Number(s) * 1000 + Number(u) / 1000 - (t0 + t1) / 2;
    worst = Math.max(worst, Math.abs(skew));
    skews.push(`${node.name} ${skew >= 0 ? '+' : ''}${skew.toFixed(1)} ms`);
  }
  add(
    'clock',
    worst <= 1000 ? 'ok' : 'warn',
    `server TIME minus this machine's clock: ${skews.join(', ')}` +
      (worst <= 1000
        ? ''
        : ' (admission uses only the server clock; pause({ until }) and reset headers in epoch time are read on this machine)'),
  );

  // Memory policy: bounds hold only while Redis keeps valve's keys (docs/durability.md).
  try {
    const evicting: string[] = [];
    for (const node of nodes) {
      const memory = String(await within(node.call(['INFO', 'memory']), timeout, 'INFO memory'));
      const policy = /^maxmemory_policy:(\S+)/m.exec(memory)?.[1] ?? 'unknown';
      if (policy !== 'noeviction') evicting.push(conn.cluster ? `${node.name} ${policy}` : policy);
    }
    add(
      'memory',
      evicting.length === 0 ? 'ok' : 'warn',
      evicting.length === 0
        ? `maxmemory-policy noeviction${conn.cluster ? ' on every master' : ''}`
        : `maxmemory-policy ${evicting.join(', ')}: evictions can drop rule state (see docs/durability.md)`,
    );
  } catch (err) {
    add('memory', 'warn', `INFO memory failed: ${oneLine(err)}`);
  }

  // Permissions: ACL DRYRUN for each command, when this user may ask who it is and run it.
  try {
    const user = String(await call(['ACL', 'WHOAMI']));
    const refused: string[] = [];
    for (const args of storeCommands(conn.keyPrefix, prefix, conn.cluster)) {
      const answer = String(await call(['ACL', 'DRYRUN', user, ...args]));
      if (answer !== 'OK') refused.push(`${args[0]} (${answer})`);
    }
    add(
      'acl',
      refused.length === 0 ? 'ok' : 'fail',
      refused.length === 0
        ? `ACL DRYRUN: user ${user} may run every command the store needs on ${conn.keyPrefix ? `${conn.keyPrefix}${prefix}:{…} keys and ${prefix}:{…} channels` : `${prefix}:{…} keys and channels`}`
        : `ACL DRYRUN: user ${user} may not run ${refused.join('; ')}`,
    );
  } catch (err) {
    add(
      'acl',
      'ok',
      `ACL WHOAMI or DRYRUN not permitted (${oneLine(err)}): checked by running the scripts below`,
    );
  }

  // Scripts: the read-only status script, then every store script on a scratch id.
  const scripts = await scriptsCheck(conn, prefix, timeout, await failovers(nodes, timeout));
  checks.push(scripts.check);
  const wakeUps = await wakeUpCheck(conn, prefix, timeout);
  // The probe is published by a script: held with the writes.
  if (scripts.writesHeld && wakeUps.level !== 'ok') wakeUps.detail += ' (publishing is held with the writes)';
  checks.push(wakeUps);
  return checks;
}

/** Masters in the middle of a FAILOVER (INFO replication), which holds writes until it ends: "<node> <state>". */
async function failovers(nodes: readonly NodeConn[], timeout: number): Promise<string[]> {
  const found: string[] = [];
  for (const node of nodes) {
    try {
      const info = String(await within(node.call(['INFO', 'replication']), timeout, 'INFO replication'));
      const state = /^master_failover_state:(\S+)/m.exec(info)?.[1];
      if (state !== undefined && state !== 'no-failover') found.push(`${node.name} ${state}`);
    } catch {
      // Unknown: the scripts check says what it finds.
    }
  }
  return found;
}

/**
 * Runs every store operation through redisStore itself on a scratch id, on a virtual clock
 * (the store's test clock, started at this machine's time) so that each script takes each of
 * its paths, every command inside them included, without waiting. Deletes its keys after.
 */
async function scriptsCheck(
  conn: Conn,
  prefix: string,
  timeout: number,
  failover: readonly string[],
): Promise<{ check: Check; writesHeld: boolean }> {
  const id = `valve-doctor:${randomBytes(4).toString('hex')}`;
  // As the server names them (for the cleanup and the report): the keyPrefix first.
  const keys = idKeys(conn.keyPrefix + prefix, id);
  const rules = [
    normalizeRule({ limit: 1000, interval: 1000, burst: 10 }, 'rules[0]'),
    normalizeRule({ limit: 1000, interval: 1000, algorithm: 'fixed-window' }, 'rules[1]'),
    normalizeRule({ limit: 10, interval: 1000, algorithm: 'sliding-window' }, 'rules[2]'),
  ];
  let t = Date.now();
  const clock = { now: () => t } as unknown as Clock;
  const store = redisStore({ client: conn.storeClient, prefix, timeout, unsafeTestClock: clock });
  const lease = { limit: 5, ttl: 30_000 };
  const record = recordOf(rules);
  let step = 'status script';
  try {
    await within(readStatus(conn, prefix, id, { scan: false }), timeout, 'status');
    step = 'acquire';
    const first = await store.acquire({ id, rules, costs: [1, 1], count: 2, lease, record });
    t += 500;
    await store.acquire({ id, rules, costs: [1], count: 1, lease, record });
    t += 700; // the first sliding-window entry leaves, the second stays: the log is trimmed
    const third = await store.acquire({ id, rules, costs: [1], count: 1, lease, record });
    if (first.granted !== 2 || third.granted !== 1)
      throw new Error(`acquire granted ${first.granted}, ${third.granted}`);
    const tokens = [...(first.leases ?? []), ...(third.leases ?? [])].map((l) => l.token);
    step = 'renew';
    await store.renew(id, tokens, 30_000);
    step = 'release';
    await store.release(id, tokens);
    step = 'pause';
    await store.pause(id, 1000);
    step = 'resume';
    await store.resume(id);
    step = 'cleanup';
    const all = [
      keys.pause,
      keys.leases,
      keys.fence,
      keys.rules,
      ...rules.map((r) => keys.rulePrefix + r.digest),
    ];
    for (const key of all) await within(conn.call(['DEL', key], key), timeout, 'DEL');
    const detail = `status, acquire (GCRA, fixed and sliding window, leases), renew, release, pause and resume ran on ${conn.keyPrefix}${prefix}:{${id}}`;
    return { check: { name: 'scripts', level: 'ok', detail }, writesHeld: false };
  } catch (err) {
    const message = oneLine(err);
    // The read-only status script answered, a store script (a write) did not: writes are held.
    const writesHeld = step !== 'status script' && isValveError(err, 'VALVE_REDIS_TIMEOUT');
    const hint = /can't run this command|NOPERM/.test(message)
      ? ' (the user lacks a command the scripts run: see the ACL rule in docs/redis.md)'
      : !writesHeld
        ? ''
        : failover.length > 0
          ? `; a FAILOVER is in progress (master_failover_state ${failover.join(', ')}), which holds writes until it ends: run doctor again after it`
          : '; the read-only status script answered and this write did not: the server is holding writes (a FAILOVER or CLIENT PAUSE WRITE: run doctor again after it) or is too slow for --timeout';
    return {
      check: {
        name: 'scripts',
        level: 'fail',
        detail: `${step} failed on ${conn.keyPrefix}${prefix}:{${id}}: ${message}${hint}`,
      },
      writesHeld,
    };
  }
}

/** Wake-ups: a subscriber connection receives the probe published on a scratch id's channel. */
async function wakeUpCheck(conn: Conn, prefix: string, timeout: number): Promise<Check> {
  const id = `valve-doctor:${randomBytes(4).toString('hex')}`;
  try {
    const subscriber = await within(conn.subscriber(), timeout, 'subscriber connection');
    // The subscriber has no keyPrefix: sharded pub/sub refuses one, classic channels never get it.
    const store = redisStore({ client: conn.storeClient, subscriber, prefix, timeout });
    if (!store.subscribe || !store.listening)
      throw new Error('this client cannot follow the store’s pub/sub');
    let refused: unknown;
    const stop = store.subscribe(
      id,
      () => {},
      (s) => {
        if (s.error !== undefined) refused = s.error;
      },
    );
    const deadline = Date.now() + timeout;
    while (!store.listening(id) && refused === undefined && Date.now() < deadline) await sleep(20);
    const ok = store.listening(id);
    stop();
    if (ok)
      return {
        name: 'wake-ups',
        level: 'ok',
        detail: `pub/sub delivers ${prefix}:{…}:wake (${conn.cluster ? 'SSUBSCRIBE' : 'SUBSCRIBE'})`,
      };
    return {
      name: 'wake-ups',
      level: 'warn',
      detail: `no wake-ups (${refused !== undefined ? oneLine(refused) : `no probe back within ${timeout} ms`}): valves still work, they notice other processes' pauses and releases later`,
    };
  } catch (err) {
    return { name: 'wake-ups', level: 'warn', detail: `no subscriber connection: ${oneLine(err)}` };
  }
}
