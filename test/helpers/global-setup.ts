/**
 * vitest globalSetup: starts the servers that test files share, once per `vitest run`:
 * a Redis standalone, a Redis cluster (3 masters), a Valkey standalone and a Valkey cluster,
 * all on free loopback ports, and stops them at the end. Test files read the addresses with
 * the helpers in ./shared-servers.ts (vitest `inject`). Sharing is safe because every test
 * uses its own key prefix (`uniquePrefix()`).
 *
 * A server kind that cannot start (binary missing, Valkey not fetchable) does not stop the
 * run: its error is provided instead, and every test that asks for it fails with that
 * message (tests never skip silently). VALVE_TEST_SERVERS=none|redis|valkey limits what starts.
 */
import type { TestProject } from 'vitest/node';
import { type RedisCluster, type RedisServer, type ServerKind, startCluster, startRedis } from './servers.js';
import { ensureValkey } from './valkey.js';

export interface SharedStandalone {
  kind: ServerKind;
  host: string;
  port: number;
  url: string;
  version: string;
}

export interface SharedCluster {
  kind: ServerKind;
  nodes: { host: string; port: number }[];
  version: string;
}

export type SharedKind =
  | { ok: true; standalone: SharedStandalone; cluster: SharedCluster }
  | { ok: false; error: string };

export interface SharedServers {
  redis: SharedKind;
  valkey: SharedKind;
}

declare module 'vitest' {
  export interface ProvidedContext {
    valveServers: SharedServers;
  }
}

async function version(server: RedisServer): Promise<string> {
  const info = String(await server.command(['INFO', 'server']));
  return (
    /^valkey_version:(\S+)/m.exec(info)?.[1] ??
    /^redis_version:(\S+)/m.exec(info)?.[1] ??
    'unknown'
  ).trim();
}

async function startKind(kind: ServerKind, running: (RedisServer | RedisCluster)[]): Promise<SharedKind> {
  const started = Date.now();
  try {
    if (kind === 'valkey') {
      const problem = await ensureValkey();
      if (problem) throw new Error(problem);
    }
    const [standalone, cluster] = await Promise.allSettled([startRedis({ kind }), startCluster({ kind })]);
    if (standalone.status === 'fulfilled') running.push(standalone.value);
    if (cluster.status === 'fulfilled') running.push(cluster.value);
    if (standalone.status === 'rejected') throw standalone.reason;
    if (cluster.status === 'rejected') throw cluster.reason;
    const v = await version(standalone.value);
    console.error(
      `test servers: ${kind} ${v} on ${standalone.value.port}, cluster on ` +
        `${cluster.value.nodes.map((n) => n.port).join(',')} (${Date.now() - started} ms)`,
    );
    return {
      ok: true,
      standalone: {
        kind,
        host: standalone.value.host,
        port: standalone.value.port,
        url: standalone.value.url,
        version: v,
      },
      cluster: { kind, nodes: cluster.value.nodes, version: v },
    };
  } catch (err) {
    const error = err instanceof Error ? err.message : String(err);
    console.error(`test servers: ${kind} is unavailable; tests that need it will fail:\n${error}`);
    return { ok: false, error };
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const wanted = (process.env.VALVE_TEST_SERVERS ?? 'redis,valkey').split(',').map((s) => s.trim());
  const running: (RedisServer | RedisCluster)[] = [];
  const skipped = (kind: ServerKind): SharedKind => ({
    ok: false,
    error: `${kind} servers were not started (VALVE_TEST_SERVERS=${process.env.VALVE_TEST_SERVERS}).`,
  });
  const [redis, valkey] = await Promise.all(
    (['redis', 'valkey'] as const).map((kind) =>
      wanted.includes(kind) ? startKind(kind, running) : Promise.resolve(skipped(kind)),
    ),
  );
  project.provide('valveServers', { redis: redis!, valkey: valkey! });
  return async () => {
    await Promise.all(running.map((s) => s.stop()));
  };
}
