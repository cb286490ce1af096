/**
 * The command's connection: whichever Redis client is installed (ioredis, iovalkey or
 * node-redis, the package's optional peers), standalone or cluster, behind one small
 * interface. The client object itself goes to redisStore() (with --key-prefix, a thin
 * wrapper that puts the keyPrefix before its script keys: key-prefix.ts), so pause and resume
 * take the store's own code path.
 */
import { keySlot } from '../stores/redis/adapter.js';
import { CliError, EXIT, failure, oneLine, usageError } from './errors.js';
import { checkKeyPrefixOnCluster, prefixingClient } from './key-prefix.js';

export type ClientName = 'ioredis' | 'iovalkey' | 'redis';
export const CLIENT_NAMES: readonly ClientName[] = ['ioredis', 'iovalkey', 'redis'];

/** Where and how to connect, from the command line. */
export interface Target {
  /** Seed URLs (one for a standalone server). */
  urls: string[];
  /** Connect as a cluster client even with one seed (otherwise detected with INFO cluster). */
  cluster: boolean;
  /** A client package to use instead of the first installed one. */
  client: ClientName | undefined;
  /** PEM of a CA to trust for rediss:// (besides Node's own and NODE_EXTRA_CA_CERTS). */
  ca: string | undefined;
  /** ms for connecting and for each command. */
  timeout: number;
  /** Keep reconnecting after a lost connection (watch), instead of failing. */
  reconnect: boolean;
  /** The application client's keyPrefix (--key-prefix); none when '' or left out. */
  keyPrefix?: string;
}

export interface Address {
  host: string;
  port: number;
  username: string | undefined;
  password: string | undefined;
  tls: boolean;
  db: number;
}

/** A node of a cluster (or the standalone server) for per-node commands. */
export interface NodeConn {
  readonly name: string;
  call(args: readonly string[]): Promise<unknown>;
}

export interface Conn {
  readonly family: ClientName;
  readonly cluster: boolean;
  readonly tls: boolean;
  /** The client object: the command's own script calls (keys as given, the keyPrefix included). */
  readonly client: object;
  /** The application client's keyPrefix (--key-prefix), '' for none: the command's keys start with it. */
  readonly keyPrefix: string;
  /** For redisStore(): `client`, or one that puts the keyPrefix before each key of a script call, as ioredis does. */
  readonly storeClient: object;
  /** A command routed by `key` (cluster), or on the only server. */
  call(args: readonly string[], key?: string): Promise<unknown>;
  /** The node that owns `key`'s slot (the server itself when standalone). */
  nodeFor(key: string): Promise<NodeConn>;
  /** Every master (the server itself when standalone). */
  nodes(): Promise<NodeConn[]>;
  /** A second connection for pub/sub (closed by close()). */
  subscriber(): Promise<object>;
  close(): Promise<void>;
}

/** A connection before the keyPrefix is applied. */
type BaseConn = Omit<Conn, 'keyPrefix' | 'storeClient'>;

/** Parses a redis://, rediss://, valkey:// or valkeys:// URL. */
export function parseUrl(url: string): Address {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw usageError(
      `--redis: not a URL: ${JSON.stringify(url)} (expected redis://[user:password@]host:port)`,
    );
  }
  const scheme = u.protocol.replace(/:$/, '');
  if (!['redis', 'rediss', 'valkey', 'valkeys'].includes(scheme)) {
    throw usageError(`--redis: expected a redis:// or rediss:// URL, got ${JSON.stringify(`${scheme}:`)}`);
  }
  const db = u.pathname && u.pathname !== '/' ? Number(u.pathname.slice(1)) : 0;
  if (!Number.isInteger(db) || db < 0) {
    throw usageError(
      `--redis: expected a database number as the URL's path, got ${JSON.stringify(u.pathname)}`,
    );
  }
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  if (host === '') throw usageError(`--redis: no host in ${JSON.stringify(url)}`);
  return {
    host,
    port: u.port ? Number(u.port) : 6379,
    username: u.username ? decodeURIComponent(u.username) : undefined,
    password: u.password ? decodeURIComponent(u.password) : undefined,
    tls: scheme === 'rediss' || scheme === 'valkeys',
    db,
  };
}

// biome-ignore lint/suspicious/noExplicitAny: the client packages are loaded at runtime, untyped here
type Any = any;

async function load(name: ClientName): Promise<Any | undefined> {
  try {
    return await import(name);
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') return undefined;
    throw failure(`could not load the ${name} package: ${oneLine(err)}`);
  }
}

async function loadClient(wanted: ClientName | undefined): Promise<{ name: ClientName; lib: Any }> {
  for (const name of wanted ? [wanted] : CLIENT_NAMES) {
    const lib = await load(name);
    if (lib) return { name, lib };
  }
  throw failure(
    wanted
      ? `--client ${wanted}: the ${wanted} package is not installed (npm install ${wanted})`
      : 'no Redis client installed: install one of ioredis, iovalkey or redis (e.g. npm install ioredis)',
  );
}

/** Rejects after `ms` with a one-line failure, unless `promise` settles first. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(failure(`${what}: no answer within ${ms} ms`)), ms);
    promise.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

const quiet = () => {};

/**
 * Connects `client`; on failure stops it and rejects with the reason the client reported as an
 * error event (ioredis rejects connect() with "Connection is closed." and emits the reason).
 * Afterwards errors go to `quiet`: each command reports its own.
 */
async function connectOrReason(client: Any, stop: () => void, events = ['error']): Promise<void> {
  let lastError: unknown;
  const remember = (e: unknown) => {
    lastError = e;
  };
  for (const e of events) client.on(e, remember);
  try {
    await client.connect();
  } catch (err) {
    // node-redis's destroy() throws ClientClosedError on a client that never opened: the
    // reason the connection failed is what the user needs, not that.
    try {
      stop();
    } catch {}
    throw lastError ?? err;
  }
  for (const e of events) {
    client.removeListener(e, remember);
    client.on(e, quiet);
  }
}

/** The connection to a standalone server, whichever the client. */
function standaloneConn(
  family: ClientName,
  a: Address,
  client: Any,
  call: (args: readonly string[]) => Promise<unknown>,
  duplicate: () => Any,
  stop: (c: Any) => void,
): BaseConn {
  const self: NodeConn = { name: `${a.host}:${a.port}`, call };
  const subs: Any[] = [];
  return {
    family,
    cluster: false,
    tls: a.tls,
    client,
    call,
    nodeFor: async () => self,
    nodes: async () => [self],
    async subscriber() {
      const sub = duplicate();
      sub.on('error', quiet);
      subs.push(sub);
      await sub.connect();
      return sub;
    },
    async close() {
      for (const c of [client, ...subs]) {
        try {
          stop(c);
        } catch {}
      }
    },
  };
}

/** Connects to the target with the first installed client (or the one asked for). */
export async function connect(target: Target): Promise<Conn> {
  if (target.urls.length === 0) {
    throw usageError('no server: pass --redis <url> or set VALVE_REDIS_URL');
  }
  const addresses = target.urls.map(parseUrl);
  const { name, lib } = await loadClient(target.client);
  const where = `${addresses[0]!.host}:${addresses[0]!.port}`;
  let cluster = target.cluster || addresses.length > 1;
  const keyPrefix = target.keyPrefix ?? '';
  if (cluster) checkKeyPrefixOnCluster(keyPrefix);
  let conn: BaseConn | undefined;
  try {
    if (!cluster) {
      conn = await within(
        connectStandalone(name, lib, addresses[0]!, target),
        target.timeout,
        `connect to ${where}`,
      );
      const info = String(await within(conn.call(['INFO', 'cluster']), target.timeout, 'INFO cluster'));
      if (/^cluster_enabled:1/m.test(info)) {
        await conn.close();
        conn = undefined;
        cluster = true;
      }
    }
    if (cluster) {
      conn = await within(
        connectCluster(name, lib, addresses, target),
        target.timeout,
        `connect to cluster ${where}`,
      );
    }
    if (keyPrefix === '') return { ...conn!, keyPrefix, storeClient: conn!.client };
    if (conn!.cluster) checkKeyPrefixOnCluster(keyPrefix);
    return {
      ...conn!,
      keyPrefix,
      storeClient: prefixingClient(conn!.client, name, conn!.cluster, keyPrefix),
    };
  } catch (err) {
    await conn?.close().catch(quiet);
    if (err instanceof CliError) throw err;
    throw new CliError(EXIT.failure, `cannot use ${where}: ${oneLine(err)}`);
  }
}

function tlsOptions(a: Address, target: Target): object | undefined {
  if (!a.tls) return undefined;
  return {
    servername: /^[\d.:]+$/.test(a.host) ? undefined : a.host,
    ...(target.ca ? { ca: target.ca } : {}),
  };
}

async function connectStandalone(name: ClientName, lib: Any, a: Address, target: Target): Promise<BaseConn> {
  if (name === 'redis') {
    const options = {
      socket: {
        host: a.host,
        port: a.port,
        connectTimeout: target.timeout,
        reconnectStrategy: target.reconnect ? (n: number) => Math.min(200 * (n + 1), 1000) : false,
        ...(a.tls ? { tls: true, ...tlsOptions(a, target) } : {}),
      },
      username: a.username,
      password: a.password,
      database: a.db || undefined,
      disableOfflineQueue: true,
    };
    const client = lib.createClient(options);
    await connectOrReason(client, () => client.destroy?.());
    return standaloneConn(
      name,
      a,
      client,
      (args) => client.sendCommand([...args]),
      () => client.duplicate(),
      (c) => c.destroy(),
    );
  }
  const Redis = lib.Redis ?? lib.default;
  const client = new Redis({
    host: a.host,
    port: a.port,
    username: a.username,
    password: a.password,
    db: a.db,
    tls: tlsOptions(a, target),
    lazyConnect: true,
    connectTimeout: target.timeout,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: target.reconnect ? (n: number) => Math.min(200 * n, 1000) : () => null,
  });
  await connectOrReason(client, () => client.disconnect());
  if (a.db > 0) {
    // ioredis and iovalkey go on in database 0 when their SELECT fails (a database the server
    // does not have, a user who may not SELECT): ask it here and fail instead. The db option
    // above stays, so a reconnect (watch) selects it again.
    try {
      await client.call('SELECT', String(a.db));
    } catch (err) {
      try {
        client.disconnect();
      } catch {}
      throw new Error(`SELECT ${a.db} failed: ${oneLine(err)}`);
    }
  }
  return standaloneConn(
    name,
    a,
    client,
    (args) => client.call(...args),
    () => client.duplicate({ lazyConnect: true }),
    (c) => c.disconnect(),
  );
}

async function connectCluster(
  name: ClientName,
  lib: Any,
  seeds: Address[],
  target: Target,
): Promise<BaseConn> {
  const a = seeds[0]!;
  if (name === 'redis') {
    const cluster = lib.createCluster({
      rootNodes: seeds.map((s) => ({ socket: { host: s.host, port: s.port } })),
      defaults: {
        username: a.username,
        password: a.password,
        disableOfflineQueue: true,
        socket: {
          connectTimeout: target.timeout,
          reconnectStrategy: target.reconnect ? (n: number) => Math.min(200 * (n + 1), 1000) : false,
          ...(a.tls ? { tls: true, ...tlsOptions(a, target) } : {}),
        },
      },
    });
    await connectOrReason(cluster, () => cluster.destroy?.());
    const wrap = (client: Any, nodeName: string): NodeConn => ({
      name: nodeName,
      call: (args) => client.sendCommand([...args]),
    });
    const subs: Any[] = [];
    return {
      family: name,
      cluster: true,
      tls: a.tls,
      client: cluster,
      call: (args, key) => cluster.sendCommand(key, false, [...args]),
      async nodeFor(key) {
        const node = cluster.getSlotMaster(keySlot(key));
        return wrap(await cluster.nodeClient(node), `${node.host}:${node.port}`);
      },
      async nodes() {
        return Promise.all(
          cluster.masters.map(async (m: Any) => wrap(await cluster.nodeClient(m), `${m.host}:${m.port}`)),
        );
      },
      async subscriber() {
        return cluster;
      },
      async close() {
        for (const c of [cluster, ...subs]) {
          try {
            c.destroy();
          } catch {}
        }
      },
    };
  }
  const Cluster = lib.Cluster;
  const redisOptions = {
    username: a.username,
    password: a.password,
    tls: tlsOptions(a, target),
    connectTimeout: target.timeout,
    maxRetriesPerRequest: 0,
  };
  const options = {
    lazyConnect: true,
    enableOfflineQueue: false,
    clusterRetryStrategy: target.reconnect ? (n: number) => Math.min(200 * n, 1000) : () => null,
    slotsRefreshTimeout: target.timeout,
    redisOptions,
  };
  const cluster = new Cluster(
    seeds.map((s) => ({ host: s.host, port: s.port })),
    options,
  );
  await connectOrReason(cluster, () => cluster.disconnect(), ['error', 'node error']);
  const wrap = (node: Any): NodeConn => ({
    name: `${node.options.host}:${node.options.port}`,
    call: (args) => node.call(...args),
  });
  const subs: Any[] = [];
  return {
    family: name,
    cluster: true,
    tls: a.tls,
    client: cluster,
    call: (args) => cluster.call(...args),
    async nodeFor(key) {
      const owner: string | undefined = cluster.slots[keySlot(key)]?.[0];
      const node = cluster.nodes('master').find((n: Any) => `${n.options.host}:${n.options.port}` === owner);
      if (!node) throw failure(`no cluster node serves the slot of ${key}`);
      return wrap(node);
    },
    async nodes() {
      return cluster.nodes('master').map(wrap);
    },
    async subscriber() {
      // Sharded pub/sub needs an ioredis Cluster with shardedSubscribers (iovalkey has none).
      const sub = new Cluster(
        seeds.map((s) => ({ host: s.host, port: s.port })),
        { ...options, shardedSubscribers: true },
      );
      sub.on('error', quiet);
      subs.push(sub);
      await sub.connect();
      return sub;
    },
    async close() {
      for (const c of [cluster, ...subs]) c.disconnect();
    },
  };
}
