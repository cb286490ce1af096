/**
 * docs/share-a-concurrency-limit.md, "Fencing": the job's lease, and a write the external
 * system accepts only from the newest owner. test/acceptance/docs-examples.test.ts runs
 * syncLedger() against an in-memory stand-in for the database that applies the same
 * conditional UPDATE, and checks that a stale owner's write is refused.
 */
import type { Valve, JobLease as ValveJobLease } from '../src/index.js';

// #region job-lease
interface JobLease {
  token: string; // unique per id: which lease
  fence: number; // fencing number: strictly increasing per id, across all processes
}
// #endregion job-lease

/** The page's JobLease is valve's, both ways. */
export const asLease = (lease: ValveJobLease): JobLease => lease;
export const asValveLease = (lease: JobLease): ValveJobLease => lease;

export interface Entry {
  position: number;
}
export interface Db {
  query(sql: string, params: unknown[]): Promise<{ rowCount: number | null }>;
}

export async function syncLedger(
  valve: Valve,
  db: Db,
  account: string,
  fetchEntries: (account: string, options: { signal: AbortSignal }) => Promise<Entry[]>,
) {
  // #region ledger
  await valve.run(async ({ signal, lease }) => {
    const entries = await fetchEntries(account, { signal });
    const { rowCount } = await db.query(
      `UPDATE ledger_cursor SET position = $1, fence = $2
        WHERE account = $3 AND fence <= $2`,
      [entries.at(-1)!.position, lease!.fence, account],
    );
    if (rowCount === 0) throw new Error('stale lease: a newer owner has written');
  });
  // #endregion ledger
}
