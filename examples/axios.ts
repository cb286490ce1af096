/**
 * axios through valve: an adapter sends each request through the valve, 429s are retried at
 * their place in the queue, and axios's errors stay axios's (AxiosError, CanceledError).
 *
 *   API_URL=https://api.example.com npx tsx examples/axios.ts
 *
 * test/integrations/http-clients.test.ts drives createAxios() against a local rate-limited
 * server; test/acceptance/examples.test.ts runs this file.
 */
// #region imports
import axios, { isAxiosError } from 'axios';
import { valveAdapter } from '../src/axios.js';
import { createValve, memoryStore, type Valve } from '../src/index.js';
// #endregion imports

export function createAxios(valve: Valve, baseURL: string) {
  // #region client
  const api = axios.create({ baseURL, adapter: valveAdapter({ valve, retries: 3 }) });
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
  const api = createAxios(valve, process.env.API_URL ?? 'https://api.example.com');
  // #region calls
  try {
    const { data } = await api.get('/items', { signal: AbortSignal.timeout(10_000) });
    console.log(`items: ${JSON.stringify(data)}`);
  } catch (err) {
    // A 429 still there after valve's retries, a 404…: an AxiosError with the response, as always.
    if (isAxiosError(err)) console.log(`failed: ${err.response?.status ?? err.code}`);
    else throw err; // a ValveError: the request never started (MAX_WAIT, CLOSED)
  }
  // #endregion calls
  await valve.close();
}
