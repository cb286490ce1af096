import type { ValveInternals } from '../../feedback-port.js';
import { createValveGroup } from '../../group.js';
import type { ValveGroup } from '../../group-types.js';
import type { Rule } from '../../rules/rule.js';
import { memoryStore } from '../../stores/memory.js';
import type { Store } from '../../stores/store.js';
import type { Valve } from '../../types.js';
import type { GitHubLimits, RateLane } from './limits.js';
import { githubLimits, LANE_SUFFIX, RATE_LANES } from './limits.js';
import { limitsResult, type Settings } from './options.js';
import { internals, Turns } from './waiting.js';

/*
 * The valves of the plugin: one group per lane (limits.ts), each keyed by valve id. The lane `all`
 * (id `<budget>`) carries the concurrency limit and runs the request, whose job takes the rate
 * lanes' grants (id `<budget>:<suffix>`) before it sends (throttle.ts). Valves are created on
 * first use and dropped after five idle minutes; their budgets live in the store. A Budget keeps
 * one budget's valves at hand (made again once dropped), its turns, and what a `limits` function
 * said for it: asked once, when the budget's first valve is made, and kept while one of its valves
 * lives.
 */

/** A lane of a budget: `all` or a rate lane. */
export type Lane = RateLane | 'all';

const NO_VALVE = undefined;

/** One budget in this client: its valves (made again once their group dropped them), its turns, its limits. */
export class Budget {
  private readonly valves: Partial<Record<Lane, ValveInternals>> = {};
  private readonly slotTurns: Partial<Record<RateLane, Turns>> = {};
  private readonly grantTurns: Partial<Record<RateLane, Turns>> = {};
  /** What `limits(budget)` returned, once asked (see Lanes). */
  limits: GitHubLimits | undefined;
  asked = false;

  constructor(
    readonly id: string,
    private readonly lanes: Lanes,
  ) {}

  /** The valve of a lane (its scheduler hooks), made if none lives. */
  valve(lane: Lane): ValveInternals {
    const known = this.valves[lane];
    if (known !== NO_VALVE && !known.isClosed()) return known;
    const made = this.lanes.make(this.id, lane);
    made.on('pause', this.lanes.onPause);
    const inner = internals(made);
    this.valves[lane] = inner;
    return inner;
  }

  /**
   * The lock of a lane (see Throttle.attempt()): `slot` is the turn to take a slot for a request
   * whose first lane it is, `grant` the turn to wait for the lane's grant inside the slot.
   */
  turns(lane: RateLane, kind: 'slot' | 'grant'): Turns {
    const locks = kind === 'slot' ? this.slotTurns : this.grantTurns;
    const lock = locks[lane];
    if (lock !== undefined) return lock;
    const made = new Turns();
    locks[lane] = made;
    return made;
  }

  /** Whether one of its valves lives. */
  live(): boolean {
    for (const lane in this.valves) if (!this.valves[lane as Lane]!.isClosed()) return true;
    return false;
  }

  /** Neither a valve that lives nor a turn held: forgotten by the next sweep. */
  unused(): boolean {
    if (this.live()) return false;
    for (const locks of [this.slotTurns, this.grantTurns]) {
      for (const lane in locks) if (locks[lane as RateLane]!.busy) return false;
    }
    return true;
  }
}

/** Without `store`, every Octokit of the process shares this one (as plugin-throttling's groups are per process). */
let processStore: Store | undefined;

function defaultStore(): Store {
  processStore ??= memoryStore();
  return processStore;
}

function asRules(value: Rule | readonly Rule[]): readonly Rule[] {
  return Array.isArray(value) ? (value as readonly Rule[]) : [value as Rule];
}

export class Lanes {
  /** One group per rate lane. */
  private readonly rate: Record<RateLane, ValveGroup>;
  /** The lane `all`: concurrency (global) and secondary pauses. */
  private readonly all: ValveGroup;
  /** The budgets met (swept of those with no valve and no turn when the map doubles). */
  private readonly budgets = new Map<string, Budget>();
  private sweepAt = 64;
  /** Called on each 'pause' of a valve (Pauses sets it: the jobs waiting for grants look again). */
  onPause: () => void = () => undefined;
  /** A `limits` function (per budget), or undefined. */
  private readonly perId: ((budget: string) => unknown) | undefined;

  constructor(settings: Settings) {
    const store = settings.store ?? defaultStore();
    const limitsOption = settings.limits;
    const base: GitHubLimits = typeof limitsOption === 'object' ? limitsOption : {};
    const perId = typeof limitsOption === 'function' ? limitsOption : undefined;
    this.perId = perId;
    // No maxWait here: a request's one deadline is spread over the lanes it passes (index.ts).
    const common = { store, idleTimeout: '5m' };
    const rate = {} as Record<RateLane, ValveGroup>;
    for (const lane of RATE_LANES) {
      const suffix = `:${LANE_SUFFIX[lane]}`;
      rate[lane] = createValveGroup({
        ...common,
        rules: asRules(base[lane] ?? githubLimits[lane]),
        ...(perId === undefined
          ? {}
          : {
              options: (valveId: string) => {
                const budget = valveId.slice(0, -suffix.length);
                const own = this.limitsOf(budget)?.[lane];
                return own === undefined ? undefined : { rules: asRules(own) };
              },
            }),
      });
    }
    this.rate = rate;
    const concurrency = (limit: number) => ({ limit, scope: 'global' as const });
    this.all = createValveGroup({
      ...common,
      rules: [],
      concurrency: concurrency(base.concurrency ?? githubLimits.concurrency),
      ...(perId === undefined
        ? {}
        : {
            options: (valveId: string) => {
              const own = this.limitsOf(valveId)?.concurrency;
              return own === undefined ? undefined : { concurrency: concurrency(own) };
            },
          }),
    });
  }

  /**
   * Closes every group (see ValveGroup.close): the lane `all` first, whose running requests may
   * still wait for their rate grants, then the rate lanes.
   */
  async close(options?: { drain?: boolean }): Promise<void> {
    const all = this.all.close(options);
    if (options?.drain === true) await all.catch(() => undefined);
    await Promise.all([all, ...RATE_LANES.map((lane) => this.rate[lane].close(options))]);
  }

  /** A budget of this client (its valves are made on first use). */
  budget(id: string): Budget {
    let budget = this.budgets.get(id);
    if (budget === undefined) {
      if (this.budgets.size >= this.sweepAt) this.sweep();
      budget = new Budget(id, this);
      this.budgets.set(id, budget);
    }
    return budget;
  }

  /** A lane's valve for a budget, from its group (made there if none lives). */
  make(budget: string, lane: Lane): Valve {
    return lane === 'all' ? this.all.valve(budget) : this.rate[lane].valve(`${budget}:${LANE_SUFFIX[lane]}`);
  }

  /**
   * What the `limits` function says for a budget: asked when the budget's first valve is made,
   * and again only once every valve of the budget was dropped. Throws its result's TypeError.
   */
  private limitsOf(id: string): GitHubLimits | undefined {
    const budget = this.budget(id);
    if (!budget.asked || !budget.live()) {
      budget.limits = limitsResult(this.perId!(id), id);
      budget.asked = true;
    }
    return budget.limits;
  }

  /** Forgets the budgets with no valve and no turn; the next sweep when the map has doubled. */
  private sweep(): void {
    for (const [id, budget] of this.budgets) if (budget.unused()) this.budgets.delete(id);
    this.sweepAt = Math.max(64, this.budgets.size * 2);
  }
}
