/**
 * Wake-ups over pub/sub: one optional subscriber connection, shared by every id of a store.
 * Messages on `<prefix>:{<id>}:wake` are "pause:<until ms>", "resume" and "release": cues only
 * (wakeups.ts), as channels are server-wide (other databases and keyPrefixes hear them too).
 *
 * Classic pub/sub (SUBSCRIBE/PUBLISH) on a standalone server; sharded pub/sub
 * (SSUBSCRIBE/SPUBLISH, Redis 7+) on a cluster, where the channel's hash tag puts it in the
 * slot of the id's keys. ioredis Cluster needs `shardedSubscribers: true` for SSUBSCRIBE;
 * iovalkey's Cluster cannot do it: then the store does without notifications (`notifies` is
 * false), which is slower to notice but still correct.
 */
import { randomBytes } from 'node:crypto';
import type { WakeEvent, WakeStatus } from '../store.js';
import { closedForGood, Leftovers } from './leftovers.js';
import { onShardLoss } from './shard-loss.js';
import { parseWake, text } from './wake-messages.js';

export type PubSubMode = 'classic' | 'sharded';

type Fn = (...args: unknown[]) => unknown;
type Listener = (event: WakeEvent) => void;
type StatusListener = (status: WakeStatus) => void;
/** Publishes `message` on the channel through the store's command connection (probe.lua). */
export type Probe = (message: string) => Promise<unknown>;

/** First wait for a probe to come back before the subscription is sent again; doubles to the max. */
const PROBE_WAIT_MIN = 1000;
const PROBE_WAIT_MAX = 30_000;
/**
 * How often a confirmed channel with listeners is probed again (ms). A subscription can end
 * without the client noticing (a Redis Cluster slot migration drops the shard channels of the
 * slot); a probe that does not come back unconfirms the channel and resends the subscription.
 */
const RECHECK_EVERY = 30_000;
/**
 * A channel whose last listener left stays subscribed this long (ms), holding no listener: a
 * valve that goes idle between jobs then finds it confirmed again without a SUBSCRIBE and a probe.
 */
export const CHANNEL_LINGER = 1000;

/** The (un)subscribe methods of each client family, per pub/sub flavour. */
const COMMANDS = {
  ioredis: { classic: ['subscribe', 'unsubscribe'], sharded: ['ssubscribe', 'sunsubscribe'] },
  'node-redis': { classic: ['subscribe', 'unsubscribe'], sharded: ['sSubscribe', 'sUnsubscribe'] },
} as const;

function call(target: object, name: string, ...args: unknown[]): unknown {
  const fn = (target as Record<string, unknown>)[name];
  if (typeof fn !== 'function') throw new TypeError(`valve: the subscriber has no ${name}()`);
  return (fn as Fn).apply(target, args);
}

interface Channel {
  readonly listeners: Set<Listener>;
  /** Told when the channel becomes confirmed or stops being so, or its subscription is refused. */
  readonly statusListeners: Set<StatusListener>;
  /** node-redis calls a listener per channel; kept to unsubscribe it. */
  readonly nodeListener: (message: unknown) => void;
  /** Publishes a probe on the channel (from the store that subscribed it first). */
  readonly probe: Probe | undefined;
  /** A probe published since the last (re)subscription came back: false when the connection drops. */
  confirmed: boolean;
  /** The message of the probe in flight ('' when none). */
  nonce: string;
  /**
   * Earlier probes of this channel not yet back (at most 4): any of them arriving proves the
   * server delivers the channel to this connection, so a probe that came back after its wait
   * ran out (a busy machine) still confirms the subscription instead of starting a longer wait.
   */
  earlier: string[];
  /** Resends the subscription when the probe did not come back in time. */
  timer: ReturnType<typeof setTimeout> | undefined;
  /** The current wait for a probe, doubling from PROBE_WAIT_MIN to PROBE_WAIT_MAX. */
  wait: number;
  /** A refusal was reported to the status listeners since the channel was last confirmed. */
  reported: boolean;
  /** Unsubscribes the channel CHANNEL_LINGER after its last listener left (unless one comes back). */
  linger: ReturnType<typeof setTimeout> | undefined;
}

/**
 * One hub per subscriber connection and flavour, shared by every store using that connection,
 * so a connection carries one message listener however many stores (prefixes) use it.
 */
const hubs = new WeakMap<object, Map<PubSubMode, WakeHub>>();

export function wakeHub(sub: object, mode: PubSubMode): WakeHub {
  let byMode = hubs.get(sub);
  if (!byMode) {
    byMode = new Map();
    hubs.set(sub, byMode);
  }
  let hub = byMode.get(mode);
  if (!hub) {
    hub = new WakeHub(sub, mode);
    byMode.set(mode, hub);
  }
  return hub;
}

/** Manages the subscriptions on one subscriber connection (see {@link wakeHub}). */
export class WakeHub {
  /** channel name → its listeners; a channel is subscribed while it has listeners. */
  private readonly channels = new Map<string, Channel>();
  private readonly family: 'ioredis' | 'node-redis';
  /** False when this client cannot subscribe in `mode` (iovalkey Cluster, ioredis Cluster without shardedSubscribers). */
  readonly supported: boolean;
  /** The store warned once that this connection cannot follow its pub/sub flavour. */
  warned = false;
  /**
   * Channels to subscribe on the next 'ready' (or, after a failure, the retry timer's): their
   * last subscribe command failed (e.g. sent while disconnected, or refused by an ACL), or was
   * held during an ioredis handshake (see send()).
   */
  private readonly unsent = new Set<string>();
  /** Subscribe commands sent and not yet confirmed: wake-ups may be missed until they are. */
  private pending = 0;
  /** Unsubscribed channels (node-redis: listeners) the client may still hold (see leftovers.ts). */
  private readonly leftovers = new Leftovers(
    (name, listener) => this.send(name, false, listener),
    (name) => this.channels.has(name),
    () => this.family !== 'ioredis' || this.connected(), // node-redis: answered is done
    () => closedForGood(this.sub, this.family === 'ioredis'),
  );

  constructor(
    private readonly sub: object,
    private readonly mode: PubSubMode,
  ) {
    const s = sub as Record<string, unknown>;
    if (typeof s.sSubscribe === 'function' || (typeof s.subscribe === 'function' && 'isOpen' in s)) {
      this.family = 'node-redis';
      this.supported = mode === 'classic' || typeof s.sSubscribe === 'function';
    } else if (typeof s.subscribe === 'function' && typeof s.on === 'function') {
      this.family = 'ioredis';
      if (mode === 'classic') {
        this.supported = true;
      } else if (s.isCluster === true) {
        const options = s.options as { shardedSubscribers?: unknown } | undefined;
        this.supported = typeof s.ssubscribe === 'function' && options?.shardedSubscribers === true;
      } else {
        this.supported = typeof s.ssubscribe === 'function';
      }
      if (this.supported) this.listenIoredis();
    } else {
      throw new TypeError(
        'Expected `subscriber` to be an ioredis, iovalkey or node-redis connection (or cluster) with subscribe()',
      );
    }
    if (this.supported) this.listenReady();
  }

  /** True while wake-ups are being delivered: supported, connected, and every subscription sent and confirmed. */
  get live(): boolean {
    if (!this.supported || this.unsent.size > 0 || this.pending > 0) return false;
    for (const entry of this.channels.values()) if (!entry.confirmed) return false;
    return this.connected();
  }

  /** True while the server delivers `name` to this connection (confirmed by a probe) and someone listens. */
  listening(name: string): boolean {
    const entry = this.channels.get(name);
    return entry?.confirmed === true && entry.listeners.size > 0 && this.connected();
  }

  private connected(): boolean {
    const s = this.sub as Record<string, unknown>;
    if (this.family === 'ioredis') return s.status === 'ready';
    if (typeof s.isReady === 'boolean') return s.isReady;
    return s.isOpen === true;
  }

  private listenIoredis(): void {
    const event = this.mode === 'sharded' ? 'smessage' : 'message';
    call(this.sub, 'on', event, (channel: unknown, message: unknown) => this.deliver(text(channel), message));
    // ioredis resubscribes after a reconnect unless autoResubscribe is off; then we do it.
    const options = (this.sub as { options?: { autoResubscribe?: unknown } }).options;
    this.resubscribeAll = options?.autoResubscribe === false;
  }

  /** Resend every subscription on each (re)connection, not only after a failure. */
  private resubscribeAll = false;

  /**
   * On every (re)connection: resubscribe when a subscribe command failed (e.g. it was refused
   * while the connection was down, so the client does not know the channel) or was held during
   * the handshake, or when the client does not resubscribe by itself.
   */
  private listenReady(): void {
    const on = (this.sub as { on?: unknown }).on;
    if (typeof on !== 'function') return;
    call(this.sub, 'on', 'ready', () => {
      this.leftovers.resend(true);
      for (const [name, entry] of this.channels) {
        this.unconfirm(entry);
        if (this.resubscribeAll || this.unsent.has(name)) this.send(name, true);
        // The client resubscribes by itself, but may not have: check with a probe.
        else this.startProbe(name, entry);
      }
    });
    const down = () => {
      for (const entry of this.channels.values()) this.unconfirm(entry);
    };
    // ioredis 'close'; node-redis 'end' and 'reconnecting'.
    for (const event of ['close', 'end', 'reconnecting']) call(this.sub, 'on', event, down);
    // A cluster stays ready while one shard's subscriber connection is down (shard-loss.ts).
    if (this.mode === 'sharded') onShardLoss(this.sub, this.family, (isDown) => this.shardLost(isDown));
  }

  /** A shard's subscriber connection dropped: its channels count as unconfirmed until a probe comes back. */
  private shardLost(isDown: (name: string) => boolean): void {
    if (closedForGood(this.sub, this.family === 'ioredis')) return;
    for (const [name, entry] of this.channels) {
      if (!entry.confirmed || !isDown(name)) continue;
      this.unconfirm(entry);
      entry.wait = PROBE_WAIT_MIN;
      if (entry.timer === undefined) this.startProbe(name, entry);
    }
  }

  private unconfirm(entry: Channel): void {
    if (!entry.confirmed) return;
    entry.confirmed = false;
    for (const fn of [...entry.statusListeners]) tell(fn, { listening: false });
  }

  /** Publishes a probe on the channel; resends the subscription when it does not come back. */
  private startProbe(name: string, entry: Channel): void {
    if (entry.probe === undefined) return;
    if (entry.timer !== undefined) clearTimeout(entry.timer);
    const nonce = `probe:${randomBytes(6).toString('hex')}`;
    if (entry.nonce !== '') {
      entry.earlier.push(entry.nonce);
      if (entry.earlier.length > 4) entry.earlier.shift();
    }
    entry.nonce = nonce;
    entry.probe(nonce).catch(() => {});
    const timer = setTimeout(() => {
      // Read what the connection already received first (timers run before I/O in a turn of
      // the event loop: after a long stall the probe may be waiting in the socket).
      setImmediate(() => {
        if (entry.timer !== timer) return; // confirmed, or another probe started meanwhile
        entry.timer = undefined;
        if (this.channels.get(name) !== entry) return;
        // Not delivered: a confirmed channel (probed again, see recheck) no longer is.
        this.unconfirm(entry);
        entry.wait = Math.min(PROBE_WAIT_MAX, entry.wait * 2);
        this.send(name, true);
      });
    }, entry.wait);
    timer.unref?.();
    entry.timer = timer;
  }

  private deliver(channel: string, message: unknown): void {
    const entry = this.channels.get(channel);
    if (!entry) return;
    const body = text(message);
    if (body === entry.nonce || (body.startsWith('probe:') && entry.earlier.includes(body))) {
      // Our probe came back: the server delivers this channel to this connection.
      entry.nonce = '';
      entry.earlier.length = 0;
      if (entry.timer !== undefined) clearTimeout(entry.timer);
      entry.timer = undefined;
      entry.wait = PROBE_WAIT_MIN;
      if (!entry.confirmed) {
        entry.confirmed = true;
        entry.reported = false;
        for (const fn of [...entry.statusListeners]) tell(fn, { listening: true });
      }
      return;
    }
    const event = parseWake(body);
    if (!event) return;
    for (const listener of [...entry.listeners]) {
      try {
        listener(event);
      } catch {
        // A listener's failure must not stop the others (and never reaches the connection).
      }
    }
  }

  /** Sends the (un)subscribe command; for an unsubscribe, returns its result. */
  private send(name: string, subscribe: boolean, listener = this.channels.get(name)?.nodeListener): unknown {
    const entry = this.channels.get(name);
    let result: unknown;
    try {
      if (this.family === 'ioredis') {
        // ioredis 5.8.2 and later write a SUBSCRIBE made during the handshake (status
        // 'connect') at once; the ready check's INFO after it then fails in subscriber mode, and
        // the connection reports an error and reconnects (ioredis issue #2037). Held for 'ready'.
        if (subscribe && (this.sub as { status?: unknown }).status === 'connect') {
          this.unsent.add(name);
          return;
        }
        result = call(this.sub, COMMANDS[this.family][this.mode][subscribe ? 0 : 1], name);
      } else {
        // node-redis delivers per listener: pass the channel's own, to add or remove it.
        result = call(this.sub, COMMANDS[this.family][this.mode][subscribe ? 0 : 1], name, listener);
      }
    } catch (err) {
      if (subscribe) return this.refused(name, err);
      result = Promise.reject(err);
    }
    if (!subscribe) {
      Promise.resolve(result).catch(() => {});
      return result;
    }
    this.pending++;
    Promise.resolve(result).then(
      () => {
        this.pending--;
        this.unsent.delete(name);
        // The client says subscribed; count it only once a probe comes back.
        const current = this.channels.get(name);
        if (current !== undefined && current === entry) this.startProbe(name, current);
      },
      (err: unknown) => {
        this.pending--;
        this.refused(name, err);
      },
    );
  }

  /** A subscribe command failed: retried on the next ready, or after a wait; reported once. */
  private refused(name: string, err: unknown): void {
    const entry = this.channels.get(name);
    if (entry === undefined) return;
    this.unsent.add(name);
    if (!entry.reported && isRefusal(err)) {
      entry.reported = true;
      for (const fn of [...entry.statusListeners]) tell(fn, { listening: false, error: err });
    }
    if (entry.timer !== undefined) clearTimeout(entry.timer);
    entry.timer = setTimeout(() => {
      entry.timer = undefined;
      if (this.channels.get(name) !== entry || !this.unsent.has(name) || !this.connected()) return;
      entry.wait = Math.min(PROBE_WAIT_MAX, entry.wait * 2);
      this.send(name, true);
    }, entry.wait);
    entry.timer.unref?.();
  }

  /** The one timer that probes confirmed channels again; set while any channel is kept. */
  private recheckTimer: ReturnType<typeof setInterval> | undefined = undefined;

  private startRecheck(): void {
    if (this.recheckTimer !== undefined) return;
    this.recheckTimer = setInterval(() => this.recheck(), RECHECK_EVERY);
    this.recheckTimer.unref?.();
  }

  /** Probes every confirmed channel someone listens to; stops once no channel is kept. */
  private recheck(): void {
    if (this.channels.size === 0) {
      clearInterval(this.recheckTimer);
      this.recheckTimer = undefined;
      return;
    }
    for (const [name, entry] of this.channels) {
      if (entry.confirmed && entry.listeners.size > 0 && entry.timer === undefined) {
        this.startProbe(name, entry);
      }
    }
  }

  /**
   * Adds a listener for a channel; returns the function that removes it. `probe` publishes on
   * the channel through a command connection; `onStatus` hears when the channel becomes
   * confirmed, stops being so, or its subscription is refused.
   */
  subscribe(name: string, listener: Listener, probe?: Probe, onStatus?: StatusListener): () => void {
    if (!this.supported) return () => {};
    let entry = this.channels.get(name);
    if (!entry) {
      const kept = this.leftovers.forget(name);
      entry = {
        listeners: new Set(),
        statusListeners: new Set(),
        nodeListener: kept ?? ((message: unknown) => this.deliver(name, message)),
        probe,
        confirmed: false,
        nonce: '',
        earlier: [],
        timer: undefined,
        wait: PROBE_WAIT_MIN,
        reported: false,
        linger: undefined,
      };
      this.channels.set(name, entry);
      entry.listeners.add(listener);
      if (onStatus) entry.statusListeners.add(onStatus);
      this.send(name, true);
      this.startRecheck();
    } else {
      if (entry.linger !== undefined) clearTimeout(entry.linger);
      entry.linger = undefined;
      entry.listeners.add(listener);
      if (onStatus) entry.statusListeners.add(onStatus);
    }
    const channel = entry;
    let active = true;
    return () => {
      if (!active) return;
      active = false;
      const current = this.channels.get(name);
      if (!current) return;
      current.listeners.delete(listener);
      if (onStatus) channel.statusListeners.delete(onStatus);
      if (current.listeners.size === 0 && current.linger === undefined) {
        current.linger = setTimeout(() => this.drop(name, current), CHANNEL_LINGER);
        current.linger.unref?.();
      }
    };
  }

  /** Unsubscribes a channel nobody listens to any more (it lingered CHANNEL_LINGER ms). */
  private drop(name: string, entry: Channel): void {
    entry.linger = undefined;
    if (this.channels.get(name) !== entry || entry.listeners.size > 0) return;
    if (entry.timer !== undefined) clearTimeout(entry.timer);
    entry.timer = undefined;
    this.leftovers.send(name, this.family === 'ioredis' ? undefined : entry.nodeListener);
    this.channels.delete(name);
    this.unsent.delete(name);
  }
}

/** Calls a status listener; its failure must not disturb the hub. */
function tell(fn: StatusListener, status: WakeStatus): void {
  try {
    fn(status);
  } catch {
    // The listener's own business.
  }
}

/** A refusal by the server (e.g. NOPERM from an ACL), not a connection that is down. */
function isRefusal(err: unknown): boolean {
  const message = err instanceof Error ? err.message : String(err);
  return (
    /NOPERM|ERR|WRONGPASS|NOAUTH/.test(message) &&
    !/(Stream isn't writeable|closed|offline|ECONN)/i.test(message)
  );
}
