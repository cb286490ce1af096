// The Store conformance suite under vitest, in a project that depends on valve
// (test/acceptance/built-package.test.ts runs it from outside the package, on the build).
// #region vitest

import { memoryStore } from 'valve';
import { storeContract } from 'valve/testing';
import { describe, it } from 'vitest';

storeContract(
  'memory store',
  () => ({
    store: memoryStore(),
    // Optional: runs after each case, pass or fail (close a connection, delete keys).
    cleanup: async () => {},
  }),
  { describe, it },
);
// #endregion vitest
