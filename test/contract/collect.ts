/**
 * Registers the conformance suite on a minimal runner of our own (plain `describe`/`it`
 * functions, as node:test or mocha would call them) and returns its cases by full name, to be
 * run one by one (store-contract-fails.test.ts, store-contract-deadlines.test.ts).
 */
import type { StoreContractOptions, StoreUnderTest } from '../../src/testing.js';
import { storeContract } from '../../src/testing.js';

export interface Collected {
  name: string;
  run: () => Promise<void>;
}

export function collect(
  makeStore: () => StoreUnderTest | Promise<StoreUnderTest>,
  options: Omit<StoreContractOptions, 'describe' | 'it'> = {},
  name = 'probe',
): Collected[] {
  const cases: Collected[] = [];
  const path: string[] = [];
  storeContract(name, makeStore, {
    describe: (name, body) => {
      path.push(name);
      body();
      path.pop();
    },
    it: (name, body) => {
      cases.push({ name: [...path, name].join(' › '), run: body });
    },
    ...options,
  });
  return cases;
}
