/**
 * Every request of the process through valve, with undici's dispatcher: an interceptor sends
 * each request through the valve of its host and credential (a valve group), and Node's global
 * fetch() uses it after setGlobalDispatcher().
 *
 *   API_URL=https://api.example.com npx tsx examples/undici.ts
 *
 * test/integrations/http-clients.test.ts drives createDispatcher() against local rate-limited
 * servers; test/acceptance/examples.test.ts runs this file.
 */

// #region imports
import { createHash } from 'node:crypto';
import { Agent, request, setGlobalDispatcher } from 'undici';
import { createValveGroup, memoryStore, type ValveGroup } from '../src/index.js';
import { requestHeader, valveInterceptor } from '../src/undici.js';
// #endregion imports

export function createDispatcher(group: ValveGroup): Agent {
  // #region dispatcher
  // One budget per host and credential (a digest: the token itself never reaches the store).
  const keyOf = (req: Parameters<typeof requestHeader>[0]) => {
    const token = requestHeader(req, 'authorization') ?? 'anonymous';
    const digest = createHash('sha256').update(token).digest('hex').slice(0, 16);
    return `${new URL(String(req.origin)).host}:${digest}`;
  };
  const dispatcher = new Agent().compose(valveInterceptor({ group, key: keyOf }));
  setGlobalDispatcher(dispatcher); // Node's fetch() goes through it too
  // #endregion dispatcher
  return dispatcher as unknown as Agent;
}

if (process.argv[1] === import.meta.filename) {
  const api = process.env.API_URL ?? 'https://api.example.com';
  // #region group
  const group = createValveGroup({
    rules: { limit: 10, interval: '1s' },
    store: memoryStore(),
    maxWait: '30s',
  });
  // #endregion group
  const dispatcher = createDispatcher(group);
  // #region calls
  const viaFetch = await fetch(`${api}/items`, { headers: { authorization: 'Bearer token-a' } });
  const viaRequest = await request(`${api}/items`, { headers: { authorization: 'Bearer token-b' } });
  // #endregion calls
  await Promise.all([viaFetch.text(), viaRequest.body.text()]);
  console.log(`fetch ${viaFetch.status}, request ${viaRequest.statusCode}, ${group.size} valves`);
  await group.close();
  await dispatcher.close();
}
