import { expect } from 'vitest';
import type { Store } from '../../src/index.js';
import { createValve } from '../../src/index.js';

/**
 * Two valves of `id` under one global lease run a job each through `store`, and its
 * subscriber confirms every subscription (`notifies`) within 5 s: a store set-up works.
 */
export async function expectStoreWorks(store: Store, id: string): Promise<void> {
  const concurrency = { limit: 1, scope: 'global' as const, leaseTtl: 5000 };
  const a = createValve({ id, store, concurrency });
  const b = createValve({ id, store, concurrency });
  try {
    expect(await Promise.all([a.run(() => 'a'), b.run(() => 'b')])).toEqual(['a', 'b']);
    const until = Date.now() + 5000;
    while (store.notifies !== true && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    expect(store.notifies).toBe(true);
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
}
