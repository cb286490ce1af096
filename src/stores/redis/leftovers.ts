/**
 * Channels a subscriber connection may still hold after their last listener left (ioredis,
 * iovalkey). Such a client keeps its own list of channels and subscribes them again on every
 * reconnection; an UNSUBSCRIBE made while the connection is down is rejected (e.g. with
 * `maxRetriesPerRequest: 0`), lost, or sent before that resubscription, so the channel would
 * stay subscribed for good. A channel is kept here until an UNSUBSCRIBE sent while the
 * connection was ready is answered, and unsubscribed again on each 'ready' unless a listener
 * came back meanwhile. node-redis forgets a channel at once and does not need this.
 */
export class Leftovers {
  /** Channel → the token of its latest UNSUBSCRIBE (an older answer must not clear a newer one). */
  private readonly names = new Map<string, object>();

  constructor(private readonly unsubscribe: (name: string) => unknown) {}

  /** Sends UNSUBSCRIBE for `name`, kept until answered when sent on a `ready` connection. */
  send(name: string, ready: boolean): void {
    const token = {};
    this.names.set(name, token);
    let result: unknown;
    try {
      result = this.unsubscribe(name);
    } catch {
      return; // kept: sent again on the next 'ready'
    }
    Promise.resolve(result).then(
      () => {
        if (ready && this.names.get(name) === token) this.names.delete(name);
      },
      () => {},
    );
  }

  /** A listener subscribed `name` again: the subscription is wanted. */
  forget(name: string): void {
    this.names.delete(name);
  }

  /** On each 'ready' (after the client resubscribed its own list): unsubscribe what is left. */
  resend(wanted: (name: string) => boolean): void {
    for (const name of [...this.names.keys()]) {
      if (wanted(name)) this.names.delete(name);
      else this.send(name, true);
    }
  }

  /** Channels still waiting for an answered UNSUBSCRIBE (for tests). */
  get size(): number {
    return this.names.size;
  }
}
