/**
 * A cluster subscriber holds one connection per master for sharded pub/sub, and neither client
 * reports the loss of one of them on the cluster object as it does for a standalone connection
 * ('close', 'reconnecting'): the cluster stays ready while the shard's subscriber reconnects,
 * and a message published on that shard meanwhile is lost. What each client does tell:
 *
 * - ioredis `Cluster` (`shardedSubscribers: true`): '-node' (redis, nodeKey) when a shard's
 *   subscriber connection ends (it is recreated, and its channels subscribed again, once the
 *   node answers), also for the cluster's own node connections. The channel's master is
 *   `slots[slot][0]`, a nodeKey `host:port`.
 * - node-redis cluster: 'node-error' and 'node-reconnecting' for any node client; the sharded
 *   subscriber of a slot is `slots[slot].master.pubSub.client`, ready or not.
 *
 * `onShardLoss` calls `lost` with a test of which channels may have lost their subscription.
 */
import { keySlot } from './adapter.js';

type IsDown = (channel: string) => boolean;

interface IoredisNode {
  options?: { host?: unknown; port?: unknown };
}

interface NodeRedisSlot {
  master?: { pubSub?: { client?: { isReady?: unknown } } };
}

/** Listens for the loss of one shard's subscriber connection; false when `sub` is not such a cluster client. */
export function onShardLoss(
  sub: object,
  family: 'ioredis' | 'node-redis',
  lost: (isDown: IsDown) => void,
): boolean {
  const s = sub as { on?: unknown; isCluster?: unknown; slots?: unknown; masters?: unknown };
  if (typeof s.on !== 'function') return false;
  const on = (event: string, fn: (...args: unknown[]) => void) =>
    (s.on as (event: string, fn: (...args: unknown[]) => void) => unknown).call(sub, event, fn);
  if (family === 'ioredis') {
    if (s.isCluster !== true) return false;
    on('-node', (redis: unknown, nodeKey: unknown) => {
      const options = (redis as IoredisNode | null | undefined)?.options;
      const key =
        typeof nodeKey === 'string' ? nodeKey : options ? `${options.host}:${options.port}` : undefined;
      lost((channel) => {
        if (key === undefined) return true;
        const owner = (s.slots as unknown[][] | undefined)?.[keySlot(channel)]?.[0];
        return owner === undefined || owner === key;
      });
    });
    return true;
  }
  if (!('slots' in s) || !('masters' in s)) return false; // a node-redis client, not a cluster
  const check = () =>
    lost((channel) => {
      const slot = (s.slots as (NodeRedisSlot | undefined)[] | undefined)?.[keySlot(channel)];
      return slot?.master?.pubSub?.client?.isReady !== true;
    });
  on('node-error', check);
  on('node-reconnecting', check);
  return true;
}
