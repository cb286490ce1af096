/**
 * ky through a valve: its `fetch` option takes valve.wrapFetch(), and its own retries are off.
 *
 *   API_URL=https://api.example.com npx tsx examples/ky.ts
 *
 * test/integrations/http-clients.test.ts drives createKy() against a local rate-limited server;
 * test/acceptance/examples.test.ts runs this file.
 */
// #region imports
import ky from 'ky';
import { createValve, memoryStore, type Valve } from '../src/index.js';
// #endregion imports

export function createKy(valve: Valve, prefixUrl: string) {
  // #region client
  const api = ky.create({
    prefixUrl,
    fetch: valve.wrapFetch(fetch), // each attempt through the valve; 429s retried at their place
    retry: 0, // valve retries 429s; ky's retries (2 by default, 429 included) would multiply them
    timeout: false, // ky's timeout counts the wait in valve's queue too: bound that with maxWait
  });
  // #endregion client
  return api;
}

if (process.argv[1] === import.meta.filename) {
  // #region valve
  const valve = createValve({
    id: 'api.example.com',
    rules: { limit: 10, interval: '1s' },
    store: memoryStore(),
    maxWait: '30s',
  });
  // #endregion valve
  const api = createKy(valve, process.env.API_URL ?? 'https://api.example.com');
  const items = await Promise.all(['a', 'b', 'c'].map((id) => api.get(`items/${id}`).json()));
  console.log(`${items.length} items, ${valve.stats().started} requests`);
  await valve.close();
}
