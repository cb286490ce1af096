import { describe } from './duration.js';
import { EVENT_NAMES, type ValveEventName, type ValveEvents } from './events.js';
import type { Valve } from './types.js';

/*
 * A valve group's events: a listener on the group hears that event of every valve of the group,
 * with the valve's key after the valve's own arguments. A valve carries a forwarder only for the
 * events the group has listeners for (attached when it is created, or to every live valve when
 * the first listener of an event arrives; detached when the last one leaves).
 */

/** A group listener: the valve's event arguments, then the valve's key. */
export type ValveGroupListener<E extends ValveEventName> = (
  ...args: [...ValveEvents[E], key: string]
) => void;

type AnyListener = (...args: unknown[]) => void;

/** Per valve: its forwarder of each event the group listens to. */
export type Forwarders = Partial<Record<ValveEventName, AnyListener>>;

export class GroupEvents {
  /** Event → the group's listeners (copy-on-write arrays: a listener may add or remove listeners). */
  private readonly listeners = new Map<ValveEventName, AnyListener[]>();

  constructor(
    /** Every live valve with its key and forwarders (to attach or detach an event on all). */
    private readonly live: () => Iterable<{ key: string; valve: Valve; forwarders: Forwarders | null }>,
  ) {}

  on(event: unknown, listener: unknown, once = false): void {
    const name = checkListener(event, listener);
    let fn = listener as AnyListener;
    if (once) {
      const original = fn;
      const wrapper = ((...args: unknown[]) => {
        this.remove(name, wrapper);
        return original(...args);
      }) as AnyListener & { listener: AnyListener };
      wrapper.listener = original;
      fn = wrapper;
    }
    const list = this.listeners.get(name);
    this.listeners.set(name, list === undefined ? [fn] : [...list, fn]);
    if (list === undefined) for (const entry of this.live()) this.attachOne(entry, name);
  }

  off(event: unknown, listener: unknown): void {
    this.remove(checkListener(event, listener), listener as AnyListener);
  }

  /** Attaches the forwarders of every event the group listens to (a new valve). */
  attach(entry: { key: string; valve: Valve; forwarders: Forwarders | null }): void {
    for (const name of this.listeners.keys()) this.attachOne(entry, name);
  }

  private attachOne(
    entry: { key: string; valve: Valve; forwarders: Forwarders | null },
    name: ValveEventName,
  ): void {
    if (entry.forwarders === null) entry.forwarders = {};
    const forwarders = entry.forwarders;
    if (forwarders[name] !== undefined) return;
    const key = entry.key;
    const forward: AnyListener = (a, b) => this.emit(name, key, a, b);
    forwarders[name] = forward;
    entry.valve.on(name, forward as never);
  }

  private remove(name: ValveEventName, listener: AnyListener): void {
    const list = this.listeners.get(name);
    if (list === undefined) return;
    const i = list.findIndex(
      (l) => l === listener || (l as Partial<{ listener: AnyListener }>).listener === listener,
    );
    if (i < 0) return;
    if (list.length > 1) {
      this.listeners.set(
        name,
        list.filter((_, j) => j !== i),
      );
      return;
    }
    this.listeners.delete(name);
    for (const entry of this.live()) {
      const forward = entry.forwarders?.[name];
      if (forward === undefined) continue;
      entry.valve.off(name, forward as never);
      delete entry.forwarders![name];
    }
  }

  private emit(name: ValveEventName, key: string, a: unknown, b: unknown): void {
    const list = this.listeners.get(name);
    if (list === undefined) return;
    for (const listener of list) {
      try {
        // The valve's arguments (none for 'idle', two for 'store-error', one otherwise), then the key.
        const result: unknown =
          name === 'idle' ? listener(key) : name === 'store-error' ? listener(a, b, key) : listener(a, key);
        if (
          result !== null &&
          typeof result === 'object' &&
          typeof (result as PromiseLike<unknown>).then === 'function'
        ) {
          (result as PromiseLike<unknown>).then(undefined, (err: unknown) => report(name, err));
        }
      } catch (err) {
        report(name, err);
      }
    }
  }
}

function checkListener(event: unknown, listener: unknown): ValveEventName {
  if (typeof event !== 'string' || !EVENT_NAMES.has(event)) {
    throw new TypeError(
      `Expected \`event\` to be one of ${[...EVENT_NAMES].map((e) => `'${e}'`).join(', ')}, got ${describe(event)}${
        event === 'error' ? " (valve has no 'error' event; store failures are 'store-error')" : ''
      }`,
    );
  }
  if (typeof listener !== 'function') {
    throw new TypeError(`Expected \`listener\` to be a function, got ${describe(listener)}`);
  }
  return event as ValveEventName;
}

/** A listener that throws never disturbs the valves or the other listeners: reported as a warning. */
function report(event: string, err: unknown): void {
  try {
    const warning = new Error(`A listener of the valve group event '${event}' threw`, { cause: err });
    warning.name = 'ValveListenerError';
    process.emitWarning(warning);
  } catch {
    // Reporting must never throw into the scheduler.
  }
}
