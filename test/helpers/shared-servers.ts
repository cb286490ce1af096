/**
 * The servers started once by ./global-setup.ts, for test files. Each getter throws (so the
 * test fails, never skips) when its server is unavailable, with the reason and how to fix it.
 *
 *   const redis = sharedRedis();            // { host, port, url, version }
 *   const cluster = sharedCluster('valkey'); // { nodes: [{ host, port }, ...] }
 *   const prefix = uniquePrefix('gcra');    // keys under it belong to this test alone
 */
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import type { SharedCluster, SharedKind, SharedStandalone } from './global-setup.js';
import type { ServerKind } from './servers.js';

function shared(kind: ServerKind): Extract<SharedKind, { ok: true }> {
  const servers = inject('valveServers');
  if (!servers) {
    throw new Error(
      'No shared test servers: run the tests through vitest.config.ts (its globalSetup starts them).',
    );
  }
  const entry = servers[kind];
  if (!entry.ok) throw new Error(`${kind} test server unavailable: ${entry.error}`);
  return entry;
}

/** The shared standalone server of a kind (default Redis). */
export function sharedRedis(kind: ServerKind = 'redis'): SharedStandalone {
  return shared(kind).standalone;
}

/** The shared 3-master cluster of a kind (default Redis). */
export function sharedCluster(kind: ServerKind = 'redis'): SharedCluster {
  return shared(kind).cluster;
}

/** A key prefix no other test (or run) uses, e.g. `t:gcra:5f1c2a9b`. */
export function uniquePrefix(label = 't'): string {
  return `t:${label}:${randomBytes(4).toString('hex')}`;
}
