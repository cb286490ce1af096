import type { PauseSource } from './events.js';
import type { ValveInternals } from './feedback-port.js';
import type { Forwarders } from './group-events.js';
import { IdleEntry, type IdleList } from './group-idle.js';
import type { ValveOptions } from './options.js';
import type { PauseCarry } from './pauses-types.js';
import { type RulesCarry, settleCarry } from './rulesets.js';
import type { Valve } from './types.js';
import { internalsOf } from './valve.js';

/*
 * What a valve group's idle list holds (group-idle.ts): its live valves, and the keys whose
 * valve was dropped while the pause it knew lasts. Such a key keeps a small record of that
 * pause (its end and cause) until the pause ends: it still counts as paused (group.stats(),
 * valve/otel's valve.paused), and the key's next valve takes the pause over as its own. A key
 * dropped during a rule change is in the list too, until its change is over (CarriedRules).
 */

/** One live valve of the group. */
export class Entry extends IdleEntry {
  /** The valve's forwarders of the group's events (null until the group has a listener). */
  forwarders: Forwarders | null = null;
  private readonly internals: ValveInternals | undefined;
  constructor(
    readonly key: string,
    readonly valve: Valve,
    /** The rules the key gets without any set by setRules(): options(key)'s, or the group's. */
    readonly defaults: ValveOptions['rules'],
  ) {
    super();
    this.internals = internalsOf(valve);
  }
  /** Whether close() was called on the valve (by the group, or by hand). */
  isClosed(): boolean {
    return this.internals?.isClosed() ?? false;
  }
  /** End of a pause the valve applied that the store has not confirmed (0: none). */
  unconfirmedPauseEnd(): number {
    return this.internals?.pauseCarrier?.unconfirmedUntil ?? 0;
  }
  /** The valve's known pause, for the key's next valve (undefined: none). */
  pauseCarry(): PauseCarry | undefined {
    return this.internals?.pauseCarrier?.carry();
  }
  /** The valve takes over the pause its key's last valve knew (before its first store call). */
  adopt(pause: PauseCarry): void {
    this.internals?.pauseCarrier?.adopt(pause);
  }
  /** What the key's next valve takes over of this one's rule changes (undefined: nothing). */
  rulesCarry(): RulesCarry | undefined {
    return this.internals?.rulesCarry?.();
  }
}

/** A key whose valve was dropped while the pause it knew lasts: its pause, looked at every idleTimeout. */
export class PausedKey extends IdleEntry {
  constructor(
    readonly key: string,
    readonly pause: PauseCarry,
  ) {
    super();
  }
}

/**
 * The group's dropped keys still paused, by key. Each is in the group's idle list (no timer of
 * its own): when due it is kept for another idleTimeout while its pause lasts, else forgotten
 * (as it is by the group's stats() and metrics once its pause ended).
 */
export class PausedKeys {
  private readonly byKey = new Map<string, PausedKey>();

  constructor(private readonly idle: IdleList<Entry | PausedKey | CarriedKey>) {}

  /** Keeps the pause of a key whose valve is being dropped (nothing when it has none, or it ended). */
  keep(key: string, pause: PauseCarry | undefined, now: number): void {
    if (pause === undefined || pause.until <= now) return;
    const record = new PausedKey(key, pause);
    this.byKey.set(key, record);
    this.idle.touch(record, now);
  }

  /** The key's pause for its new valve, forgotten here (undefined: none, or it ended). */
  take(key: string, now: number): PauseCarry | undefined {
    const record = this.byKey.get(key);
    if (record === undefined) return undefined;
    this.forget(record);
    return record.pause.until > now ? record.pause : undefined;
  }

  /** The idle list found the record due: kept while its pause lasts. */
  due(record: PausedKey, now: number): void {
    if (record.pause.until > now) this.idle.touch(record, now);
    else this.forget(record);
  }

  /** Dropped keys whose pause lasts at `now` (the ended ones are forgotten on the way). O(records). */
  count(now: number): number {
    let n = 0;
    for (const record of this.byKey.values()) {
      if (record.pause.until > now) n++;
      else this.forget(record);
    }
    return n;
  }

  /** Calls `visit` with each dropped key whose pause lasts at `now`, and the pause's source. */
  forEach(now: number, visit: (key: string, source: PauseSource) => void): void {
    for (const record of this.byKey.values()) {
      if (record.pause.until > now) visit(record.key, record.pause.cause.source);
      else this.forget(record);
    }
  }

  /** Forgets every record (the group closed). */
  clear(): void {
    for (const record of this.byKey.values()) this.idle.unlink(record);
    this.byKey.clear();
  }

  private forget(record: PausedKey): void {
    this.idle.unlink(record);
    this.byKey.delete(record.key);
  }
}

/** A key whose valve was dropped during a rule change: what its next valve takes over, looked at every idleTimeout. */
export class CarriedKey extends IdleEntry {
  constructor(
    readonly key: string,
    public carry: RulesCarry,
  ) {
    super();
  }
}

/**
 * Per dropped key whose valve changed its rules, what its next valve takes over
 * (RuleSet.carry()). A change still in progress is kept whole, in the group's idle list (no
 * timer of its own); once it is over only the times from which the key's rules count are kept
 * (a small record, none when they are the rules' first), or nothing (settleCarry()).
 */
export class CarriedRules {
  private readonly byKey = new Map<string, RulesCarry | CarriedKey>();

  constructor(private readonly idle: IdleList<Entry | PausedKey | CarriedKey>) {}

  /** Keeps what a dropped valve leaves (undefined: nothing). */
  keep(key: string, carry: RulesCarry | undefined, now: number): void {
    this.forget(key);
    const settled = carry === undefined ? undefined : settleCarry(carry, now);
    if (settled === undefined) return;
    // A conversion still to be asked for waits for the next valve: nothing to look at meanwhile.
    if (settled.change === undefined || settled.change.previousEnd === Number.POSITIVE_INFINITY) {
      this.byKey.set(key, settled);
      return;
    }
    const record = new CarriedKey(key, settled);
    this.byKey.set(key, record);
    this.idle.touch(record, now);
  }

  /** What the key's next valve takes over, at `now` (undefined: nothing). Kept until forget(). */
  peek(key: string, now: number): RulesCarry | undefined {
    const value = this.byKey.get(key);
    if (value === undefined) return undefined;
    return value instanceof CarriedKey ? settleCarry(value.carry, now) : value;
  }

  /** The idle list found a change due: kept whole while it lasts, then settled. */
  due(record: CarriedKey, now: number): void {
    const settled = settleCarry(record.carry, now);
    if (settled !== undefined && settled.change !== undefined) {
      record.carry = settled;
      this.idle.touch(record, now);
      return;
    }
    this.idle.unlink(record);
    if (settled === undefined) this.byKey.delete(record.key);
    else this.byKey.set(record.key, settled);
  }

  /** Forgets the key's record (its new valve took it over). */
  forget(key: string): void {
    const value = this.byKey.get(key);
    if (value === undefined) return;
    if (value instanceof CarriedKey) this.idle.unlink(value);
    this.byKey.delete(key);
  }

  /** Forgets every record (the group closed). */
  clear(): void {
    for (const value of this.byKey.values()) if (value instanceof CarriedKey) this.idle.unlink(value);
    this.byKey.clear();
  }
}
