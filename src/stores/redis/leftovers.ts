/**
 * Channels a subscriber connection may still hold after their last listener left. ioredis and
 * iovalkey keep their own list of channels and subscribe it again on every reconnection; an
 * UNSUBSCRIBE made while the connection is down is rejected (e.g. with `maxRetriesPerRequest:
 * 0`), lost, or sent before that resubscription. node-redis forgets a channel only once the
 * server answered its UNSUBSCRIBE: one that fails (a node-redis cluster's shard connection down,
 * with the documented `disableOfflineQueue: true`) leaves the channel in its list, subscribed
 * again when that connection is back. Either way the channel would stay subscribed for good. A
 * channel is kept here until an UNSUBSCRIBE sent while the connection was ready is answered, and
 * unsubscribed again on each 'ready' and on a retry timer (a cluster's shard connection comes
 * back without the client saying so), unless a listener came back meanwhile (node-redis: it
 * subscribes with the listener the client kept).
 */

/** First wait before the unanswered unsubscriptions are sent again (ms); doubles to the max. */
const RETRY_MIN = 1000;
const RETRY_MAX = 30_000;

type NodeListener = (message: unknown) => void;

export class Leftovers {
  /**
   * Channel → its latest UNSUBSCRIBE (an older answer must not clear a newer one: compared by identity),
   * whether that one is still unanswered, and (node-redis) the listener it removes.
   */
  private readonly names = new Map<string, { busy: boolean; listener?: NodeListener }>();
  private timer: ReturnType<typeof setTimeout> | undefined = undefined;
  private wait = RETRY_MIN;

  constructor(
    /** Sends the UNSUBSCRIBE; returns the client's result. */
    private readonly unsubscribe: (name: string, listener?: NodeListener) => unknown,
    /** Whether a listener subscribed the channel again (it is wanted, not a leftover). */
    private readonly wanted: (name: string) => boolean,
    /** Whether an answer now means the client let the channel go (ioredis: the connection is ready). */
    private readonly ready: () => boolean,
    /** Whether the client was closed for good (its channels are gone with it): retries stop. */
    private readonly closed: () => boolean = () => false,
  ) {}

  /** Sends UNSUBSCRIBE for `name`, kept until answered when sent on a ready connection. */
  send(name: string, listener?: NodeListener): void {
    const item = { busy: true, listener };
    const ready = this.ready();
    this.names.set(name, item);
    this.schedule();
    let result: unknown;
    try {
      result = this.unsubscribe(name, listener);
    } catch {
      item.busy = false;
      return; // kept: sent again on the next 'ready' or retry
    }
    Promise.resolve(result).then(
      () => {
        item.busy = false;
        if (ready && this.names.get(name) === item) this.names.delete(name);
      },
      () => {
        item.busy = false;
      },
    );
  }

  /**
   * A listener subscribed `name` again: the subscription is wanted. Returns the node-redis
   * listener the client may still hold for it, to subscribe again with (never two for a channel).
   */
  forget(name: string): NodeListener | undefined {
    const item = this.names.get(name);
    this.names.delete(name);
    return item?.listener;
  }

  /**
   * On each 'ready' (after the client resubscribed its own list; `all`), and on retry: unsubscribe
   * what is left. A node-redis UNSUBSCRIBE still unanswered is not sent twice: a second one, sent
   * after the channel was subscribed again, would end that subscription behind the client's back.
   */
  resend(all: boolean): void {
    for (const [name, item] of [...this.names]) {
      if (this.wanted(name)) this.names.delete(name);
      else if (!item.busy || (all && item.listener === undefined)) this.send(name, item.listener);
    }
  }

  /** Retries while channels are left, every RETRY_MIN doubling to RETRY_MAX. */
  private schedule(): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.closed()) this.names.clear();
      if (this.names.size === 0) {
        this.wait = RETRY_MIN;
        return;
      }
      this.wait = Math.min(RETRY_MAX, this.wait * 2);
      this.resend(false);
      this.schedule();
    }, this.wait);
    this.timer.unref?.();
  }

  /** Channels still waiting for an answered UNSUBSCRIBE (for tests). */
  get size(): number {
    return this.names.size;
  }
}

/** Whether a subscriber client was closed for good: ioredis disconnect()/quit(), node-redis close()/destroy(). */
export function closedForGood(sub: object, ioredis: boolean): boolean {
  const s = sub as { status?: unknown; isOpen?: unknown };
  return ioredis ? s.status === 'end' : s.isOpen === false;
}
