/**
 * The first calls on an ioredis or iovalkey client (Redis or Cluster) handed to the store while
 * it is still connecting. With `enableOfflineQueue: false` (the setting valve recommends), such
 * a client refuses every command until it is ready ("Stream isn't writeable…", "Cluster isn't
 * ready…"), so `redisStore({ client: new Redis(url, { enableOfflineQueue: false }) })` would
 * fail its first jobs: a store error and a backoff under 'wait', STORE_UNAVAILABLE under
 * 'throw', jobs started without the rules under 'open'. Here those calls wait for the client's
 * first 'ready' instead, each within its own deadline (a call valve gave up on meanwhile is
 * never sent), and are sent at once if the connection attempt fails ('close' or 'end'), so
 * that they fail as the client answers them.
 *
 * Only the first connection is waited for: once the client was seen ready, calls go straight
 * to it (one boolean read), and a call made while it reconnects fails at once, as the offline
 * queue setting asks. One set of listeners per client, however many calls wait; they are
 * removed as soon as the client is ready or its attempt failed.
 */

import type { Gone } from './adapter.js';

/** What the gate reads of an ioredis or iovalkey client. */
interface IoStatusClient {
  readonly status?: unknown;
  connect?(): Promise<unknown>;
  once(event: string, listener: () => void): unknown;
  removeListener(event: string, listener: () => void): unknown;
}

/** The rejection of a call valve gave up on while it waited for the client (nobody hears it). */
const GAVE_UP = new Error('valve: the call timed out before the client was ready; not sent');

/** Statuses of a client that has not finished a connection attempt yet. */
const CONNECTING = new Set<unknown>(['wait', 'connecting', 'connect']);
/** The events that end a connection attempt. */
const SETTLED = ['ready', 'close', 'end'] as const;

function ignore(): void {}

export class FirstReady {
  /** True once the client was seen ready: calls are sent straight away from then on. */
  open = false;
  /** The wait in progress for the current connection attempt, shared by every call. */
  private waiting: Promise<void> | null = null;

  private constructor(private readonly client: IoStatusClient) {}

  /** A gate for an ioredis or iovalkey client (it has a `status`), or null for another client. */
  static of(client: object): FirstReady | null {
    const c = client as Partial<IoStatusClient>;
    if (
      typeof c.status !== 'string' ||
      typeof c.once !== 'function' ||
      typeof c.removeListener !== 'function'
    ) {
      return null;
    }
    return new FirstReady(client as IoStatusClient);
  }

  /**
   * Runs `send` now if the client is ready or not connecting (it then answers the call itself),
   * else once its connection attempt ended, unless `call` is done by then.
   */
  run(send: () => Promise<unknown>, call: Gone | undefined): Promise<unknown> {
    const status = this.client.status;
    if (status === 'ready') {
      this.open = true;
      return send();
    }
    if (!CONNECTING.has(status)) return send();
    if (this.waiting === null) this.waiting = this.attempt(status);
    return this.waiting.then(() => {
      if (call?.done) throw GAVE_UP;
      return send();
    });
  }

  /** Resolves when the current connection attempt ends (ready or failed). */
  private attempt(status: unknown): Promise<void> {
    return new Promise<void>((resolve) => {
      const client = this.client;
      const done = (): void => {
        for (const event of SETTLED) client.removeListener(event, done);
        this.waiting = null;
        if (client.status === 'ready') this.open = true;
        resolve();
      };
      for (const event of SETTLED) client.once(event, done);
      // A lazyConnect client never connected: connect it, as its own first command would.
      if (status === 'wait') client.connect?.().catch(ignore);
    });
  }
}
