import type { Clock } from '../../clock.js';
import { type Cut, maxWaitError, onAbort } from './waiting.js';

/*
 * The pauses of the GitHub resources valve has no lane for: any `x-ratelimit-resource` but `core`,
 * `search`, `code_search` and `graphql` (`code_scanning_upload`, `dependency_snapshots`,
 * `audit_log`, `source_import`…). Which requests spend such a resource is known only from
 * GitHub's answers, so a spent one pauses, in this client, the routes (method and path template)
 * whose answers named it, until its reset: no lane is paused, the budget's other requests go on.
 * Set by pauses.ts; waited for before each attempt (throttle.ts).
 */

/** One budget's spent resources: each one's pause end (clock ms), and the resource of each route met. */
interface Spent {
  readonly until: Map<string, number>;
  readonly routes: Map<string, string>;
}

export class ResourcePauses {
  private readonly budgets = new Map<string, Spent>();

  /** Pauses `resource` until `until` (clock ms, a pause never shortened) and ties `route` to it; forgets the pauses ended. */
  pause(budget: string, route: string, resource: string, until: number, now: number): void {
    this.forget(now);
    let spent = this.budgets.get(budget);
    if (spent === undefined) {
      spent = { until: new Map(), routes: new Map() };
      this.budgets.set(budget, spent);
    }
    spent.until.set(resource, Math.max(spent.until.get(resource) ?? 0, until));
    spent.routes.set(route, resource);
  }

  /** When the pause of the resource `route` spends ends (clock ms); 0 when none is known. */
  end(budget: string, route: string): number {
    const spent = this.budgets.get(budget);
    const resource = spent?.routes.get(route);
    return resource === undefined ? 0 : (spent!.until.get(resource) ?? 0);
  }

  /**
   * Waits, holding nothing, until the pause of the resource `route` spends ends: rejects with the
   * signal's reason, MAX_WAIT at `deadline` (clock ms), CLOSED on close() without drain.
   */
  async sleep(
    budget: string,
    route: string,
    clock: Clock,
    deadline: number,
    signal: AbortSignal | undefined,
    cut: Cut,
  ): Promise<void> {
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      if (cut.error !== undefined) throw cut.error;
      const now = clock.now();
      const end = this.end(budget, route);
      if (end <= now) return;
      if (deadline <= now) throw maxWaitError();
      await new Promise<void>((resolve, reject) => {
        let off: (() => void) | undefined;
        const timer = clock.setTimeout(() => {
          done();
          resolve();
        }, Math.min(end, deadline) - now);
        const fail = (reason: unknown) => {
          done();
          reject(reason);
        };
        const done = () => {
          clock.clearTimeout(timer);
          off?.();
          cut.cutters.delete(fail);
        };
        if (signal !== undefined) off = onAbort(signal, fail);
        cut.cutters.add(fail);
      });
    }
  }

  /** Drops the pauses that ended, with their routes. */
  private forget(now: number): void {
    for (const [budget, spent] of this.budgets) {
      for (const [resource, until] of spent.until) if (until <= now) spent.until.delete(resource);
      for (const [route, resource] of spent.routes)
        if (!spent.until.has(resource)) spent.routes.delete(route);
      if (spent.until.size === 0) this.budgets.delete(budget);
    }
  }
}
