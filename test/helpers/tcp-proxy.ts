/**
 * A TCP fault proxy for tests: clients connect to the proxy (loopback), the proxy connects
 * each of them to `target` and forwards bytes both ways, with faults switched on demand:
 *
 * - setLatency(ms): every chunk is delivered `ms` after it arrived, in each direction
 *   (a round trip costs 2 × ms); order is kept.
 * - blackhole(true): connections stay open, bytes are accepted and held, nothing is
 *   forwarded (a partition: timeouts, no errors). blackhole(false) delivers what was held,
 *   as TCP would once the network heals.
 * - dropAll(): resets every current connection (both sides see ECONNRESET); new ones work.
 * - refuse(true): new connections are reset as soon as they are accepted.
 */
import net from 'node:net';

export interface ProxyTarget {
  host: string;
  port: number;
}

export interface StartProxyOptions {
  target: ProxyTarget;
  /** Port to listen on (default: any free port). */
  port?: number;
  /** Initial one-way latency in ms (default 0). */
  latencyMs?: number;
}

export interface TcpProxy {
  readonly host: string;
  readonly port: number;
  readonly target: ProxyTarget;
  /** One-way delay (ms) for chunks that arrive from now on. */
  setLatency(ms: number): void;
  /** Hold (true) or deliver (false) every byte, in both directions, on all connections. */
  blackhole(on: boolean): void;
  /** Resets every current connection, client and server side. */
  dropAll(): void;
  /** Reset (true) or accept (false) new connections. */
  refuse(on: boolean): void;
  /** Number of open client connections. */
  connections(): number;
  /** Stops listening and destroys every connection. */
  close(): Promise<void>;
}

interface Pending {
  at: number;
  data: Buffer;
}

interface Settings {
  latencyMs: number;
  blackholed: boolean;
}

/** One direction of one connection: from → (delay, hold) → to. */
class Pipe {
  private queue: Pending[] = [];
  private ended = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    from: net.Socket,
    private readonly to: net.Socket,
    private readonly settings: Settings,
  ) {
    from.on('data', (data: Buffer) => {
      this.queue.push({ at: Date.now() + this.settings.latencyMs, data });
      this.pump();
    });
    from.on('end', () => {
      this.ended = true;
      this.pump();
    });
  }

  pump(): void {
    if (this.settings.blackholed || this.to.destroyed) return;
    const now = Date.now();
    while (this.queue.length > 0 && this.queue[0]!.at <= now) {
      this.to.write(this.queue.shift()!.data);
    }
    const head = this.queue[0];
    if (head) {
      if (!this.timer) {
        this.timer = setTimeout(
          () => {
            this.timer = undefined;
            this.pump();
          },
          Math.max(1, head.at - now),
        );
      }
    } else if (this.ended) {
      this.to.end();
    }
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.queue = [];
  }
}

interface Conn {
  client: net.Socket;
  upstream: net.Socket;
  pipes: Pipe[];
}

function reset(socket: net.Socket): void {
  if (socket.destroyed) return;
  // resetAndDestroy sends RST; it needs a connected handle, plain destroy otherwise.
  if (socket.readyState === 'open' || socket.readyState === 'readOnly' || socket.readyState === 'writeOnly') {
    socket.resetAndDestroy();
  } else {
    socket.destroy();
  }
}

export function startProxy(opts: StartProxyOptions): Promise<TcpProxy> {
  const settings: Settings = { latencyMs: opts.latencyMs ?? 0, blackholed: false };
  const conns = new Set<Conn>();
  let refusing = false;

  const closeConn = (conn: Conn, hard: boolean) => {
    if (!conns.delete(conn)) return;
    for (const p of conn.pipes) p.stop();
    if (hard) {
      reset(conn.client);
      reset(conn.upstream);
    } else {
      conn.client.destroy();
      conn.upstream.destroy();
    }
  };

  const server = net.createServer({ pauseOnConnect: false }, (client) => {
    if (refusing) {
      client.on('error', () => {});
      reset(client);
      return;
    }
    const upstream = net.connect({ host: opts.target.host, port: opts.target.port });
    const conn: Conn = { client, upstream, pipes: [] };
    conns.add(conn);
    conn.pipes.push(new Pipe(client, upstream, settings), new Pipe(upstream, client, settings));
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    // An abrupt end on either side ends the other; a clean close (both ends done) too.
    const onGone = () => closeConn(conn, false);
    client.on('error', onGone);
    upstream.on('error', () => closeConn(conn, true));
    client.on('close', onGone);
    upstream.on('close', onGone);
  });

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: opts.port ?? 0 }, () => {
      server.off('error', reject);
      const address = server.address() as net.AddressInfo;
      resolve({
        host: '127.0.0.1',
        port: address.port,
        target: opts.target,
        setLatency(ms) {
          if (!(ms >= 0)) throw new RangeError(`latency must be >= 0, got ${ms}`);
          settings.latencyMs = ms;
        },
        blackhole(on) {
          settings.blackholed = on;
          if (!on) for (const c of conns) for (const p of c.pipes) p.pump();
        },
        dropAll() {
          for (const c of [...conns]) closeConn(c, true);
        },
        refuse(on) {
          refusing = on;
        },
        connections: () => conns.size,
        close() {
          for (const c of [...conns]) closeConn(c, false);
          return new Promise<void>((res) => server.close(() => res()));
        },
      });
    });
  });
}

export interface ClusterProxies {
  /** One proxy per cluster node, in the order of `nodes`. */
  readonly proxies: readonly TcpProxy[];
  /** Seed addresses for a cluster client: the proxies. */
  readonly seeds: { host: string; port: number }[];
  /**
   * `"host:port"` of each real node → its proxy. Pass as ioredis Cluster `natMap`, or as
   * node-redis `nodeAddressMap`, so that the addresses the cluster announces (MOVED, CLUSTER
   * SLOTS) are reached through the proxies too.
   */
  readonly natMap: Record<string, { host: string; port: number }>;
  setLatency(ms: number): void;
  blackhole(on: boolean): void;
  dropAll(): void;
  refuse(on: boolean): void;
  close(): Promise<void>;
}

/**
 * A proxy in front of every node of a cluster (client traffic only: the cluster bus between
 * nodes is not proxied). The group methods act on every proxy; use `proxies[i]` for one node.
 */
export async function startClusterProxies(nodes: readonly ProxyTarget[]): Promise<ClusterProxies> {
  const proxies = await Promise.all(nodes.map((target) => startProxy({ target })));
  const natMap: Record<string, { host: string; port: number }> = {};
  for (const [i, n] of nodes.entries()) {
    natMap[`${n.host}:${n.port}`] = { host: proxies[i]!.host, port: proxies[i]!.port };
  }
  return {
    proxies,
    seeds: proxies.map((p) => ({ host: p.host, port: p.port })),
    natMap,
    setLatency(ms) {
      for (const p of proxies) p.setLatency(ms);
    },
    blackhole(on) {
      for (const p of proxies) p.blackhole(on);
    },
    dropAll() {
      for (const p of proxies) p.dropAll();
    },
    refuse(on) {
      for (const p of proxies) p.refuse(on);
    },
    close: async () => {
      await Promise.all(proxies.map((p) => p.close()));
    },
  };
}
