/**
 * docs/provider-feedback.md, "undici": undici's fetch wrapped, and observe() on what
 * undici's request() returns. test/acceptance/docs-examples.test.ts runs it against a local
 * server whose answer pauses the valve.
 */
// #region undici
import { fetch, request } from 'undici';
// #endregion undici
import type { Valve } from '../src/index.js';

export async function undiciCalls(valve: Valve, url: string) {
  // #region undici
  const api = valve.wrapFetch(fetch); // undici's fetch, wrapped

  const { statusCode, headers, body } = await valve.run(() => request(url));
  valve.observe({ statusCode, headers }); // request(): IncomingHttpHeaders-like
  // #endregion undici
  return { api, statusCode, text: await body.text() };
}
