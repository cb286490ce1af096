/**
 * docs/api.md, the import at the top of the page: the package root's main exports, imported
 * and used once each. Run by test/acceptance/api-docs.test.ts (memory store, no network).
 */
// #region import
import { createValve, isValveError, memoryStore, redisStore, ValveError } from '../../src/index.js';

// #endregion import

const valve = createValve({ id: 'api:import', store: memoryStore() });
const answer = await valve.run(() => 42);
await valve.close();
const closed = await valve.run(() => 0).catch((err: unknown) => err);
console.log(
  [
    `run ${answer}`,
    `closed ${isValveError(closed, 'CLOSED') && closed instanceof ValveError}`,
    `redisStore ${typeof redisStore}`,
  ].join(', '),
);
