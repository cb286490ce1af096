// The Store conformance suite under vitest, in a project that depends on valve
// (test/acceptance/built-package.test.ts runs it from outside the package, on the build).
// #region vitest

import { memoryStore } from 'valve';
import { storeContract } from 'valve/testing';
import { describe, it } from 'vitest';

// vitest's default timeout is 5 s: give each case 10 s (the suite's own deadlines, 5 s per store
// call and 9 s per case, fail a store that hangs first, and run its cleanup).
const test = (name, body) => it(name, body, 10_000);

storeContract(
  'memory store',
  () => ({
    store: memoryStore(),
    // Optional: runs after each case, pass or fail (close a connection, delete keys).
    cleanup: async () => {},
  }),
  { describe, it: test },
);
// #endregion vitest
