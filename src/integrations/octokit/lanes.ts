import { createValveGroup } from '../../group.js';
import type { ValveGroup } from '../../group-types.js';
import type { Rule } from '../../rules/rule.js';
import { memoryStore } from '../../stores/memory.js';
import type { Store } from '../../stores/store.js';
import type { GitHubLimits, RateLane } from './limits.js';
import { githubLimits, LANE_SUFFIX, RATE_LANES } from './limits.js';
import { limitsResult, type Settings } from './options.js';

/*
 * The valves of the plugin: one group per lane (limits.ts), each keyed by valve id. The lane `all`
 * (id `<budget>`) carries the concurrency limit and runs the request, whose job takes the rate
 * lanes' grants (id `<budget>:<suffix>`) before it sends (throttle.ts). Valves are created on first use and dropped after five idle
 * minutes; their budgets live in the store.
 */

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
  readonly all: ValveGroup;

  constructor(settings: Settings) {
    const store = settings.store ?? defaultStore();
    const limitsOption = settings.limits;
    const base: GitHubLimits = typeof limitsOption === 'object' ? limitsOption : {};
    const perId = typeof limitsOption === 'function' ? limitsOption : undefined;
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
                const own = limitsResult(perId(budget), budget)?.[lane];
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
              const own = limitsResult(perId(valveId), valveId)?.concurrency;
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

  /** The group of a rate lane. */
  group(lane: RateLane): ValveGroup {
    return this.rate[lane];
  }

  /** The valve id of a rate lane for a budget. */
  static id(budget: string, lane: RateLane): string {
    return `${budget}:${LANE_SUFFIX[lane]}`;
  }
}
