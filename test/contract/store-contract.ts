/**
 * The Store conformance suite on vitest: the shipped `valve/testing` export (src/testing.ts)
 * with vitest's `describe` and `it`, under the signature the project's store tests use.
 *
 *   storeContract('memory', () => ({ store: memoryStore() }), { controlledClock: false });
 */
import { describe, it } from 'vitest';
import type { MaybePromise } from '../../src/stores/store.js';
import {
  type StoreContractOptions,
  type StoreUnderTest,
  storeContract as shipped,
} from '../../src/testing.js';

export type { StoreUnderTest } from '../../src/testing.js';

/** What the store under test can do (see `StoreContractOptions`). */
export type StoreCapabilities = Omit<StoreContractOptions, 'describe' | 'it'>;

export function storeContract(
  name: string,
  makeStore: () => MaybePromise<StoreUnderTest>,
  capabilities: StoreCapabilities = {},
): void {
  shipped(name, makeStore, { describe, it, ...capabilities });
}
