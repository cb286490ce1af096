/**
 * `--key-prefix <p>`: the command addresses an application whose ioredis or iovalkey client has
 * `keyPrefix: <p>`. Such a client puts `<p>` before every key it sends (the keys of valve's
 * scripts too), and before no channel: the store's keys are `<p><prefix>:{<id>}:…` while its
 * wake channel stays `<prefix>:{<id>}:wake` (classic pub/sub; docs/redis.md). The command
 * composes the keys it reads itself (status, doctor), and hands redisStore() (pause, resume,
 * doctor's scripts) a client that prefixes the keys of each script call and nothing else, as
 * ioredis does, whichever client the command uses: node-redis has no keyPrefix of its own.
 */
import { usageError } from './errors.js';

// biome-ignore lint/suspicious/noExplicitAny: the client packages are loaded at runtime, untyped here
type Any = any;

/** Validates --key-prefix (any non-empty string of well-formed Unicode, as a client takes it). */
export function checkKeyPrefix(value: string): string {
  if (value === '') {
    throw usageError(
      "--key-prefix: expected the client's keyPrefix (e.g. app:), got an empty string; leave the option out for a client without one",
    );
  }
  // A lone surrogate: UTF-8 cannot encode it, so it would not name the application's keys.
  if (/\p{Cs}/u.test(value)) {
    throw usageError(
      `--key-prefix: expected well-formed Unicode, got a lone surrogate in ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/** On a cluster, a hash tag in the keyPrefix is refused, as redisStore() refuses the client. */
export function checkKeyPrefixOnCluster(keyPrefix: string): void {
  if (/[{}]/.test(keyPrefix)) {
    throw usageError(
      `--key-prefix: expected no '{' or '}' on a cluster, got ${JSON.stringify(keyPrefix)}: a hash tag in the keyPrefix puts every key in one slot and the wake-up channels in others, so redisStore() refuses such a client`,
    );
  }
}

/**
 * A client for redisStore() that runs scripts on `client` with `keyPrefix` before each key and
 * the arguments (the wake channel among them) as they are. It has node-redis's script methods
 * (`evalSha`, `eval`) whichever client `family` is, and `getSlotMaster` on a cluster, which is
 * how the store tells a cluster client (and so defaults to sharded pub/sub).
 */
export function prefixingClient(
  client: Any,
  family: 'ioredis' | 'iovalkey' | 'redis',
  cluster: boolean,
  keyPrefix: string,
): object {
  type Script = { keys: readonly string[]; arguments: readonly string[] };
  const run = (command: 'evalsha' | 'eval', text: string, s: Script): Promise<unknown> => {
    const keys = s.keys.map((k) => keyPrefix + k);
    if (family === 'redis') {
      return command === 'evalsha'
        ? client.evalSha(text, { keys, arguments: s.arguments })
        : client.eval(text, { keys, arguments: s.arguments });
    }
    return client[command](text, keys.length, [...keys, ...s.arguments]);
  };
  const wrapper: Record<string, unknown> = {
    evalSha: (sha: string, s: Script) => run('evalsha', sha, s),
    eval: (source: string, s: Script) => run('eval', source, s),
  };
  if (cluster) {
    // Which master serves a slot: the store loads each script once per server with it.
    wrapper.getSlotMaster = (slot: number) => {
      if (family === 'redis') return client.getSlotMaster(slot);
      const owner: unknown = client.slots?.[slot]?.[0];
      return typeof owner === 'string' ? { address: owner } : undefined;
    };
  }
  return wrapper;
}
