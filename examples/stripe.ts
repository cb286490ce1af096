/**
 * The Stripe SDK through a valve, with Stripe's fetch HTTP client: requests paced by a rule
 * below Stripe's limit, a 429 (Stripe sends no rate-limit header) backed off and retried by
 * valve alone.
 *
 *   STRIPE_SECRET_KEY=sk_test_… npx tsx examples/stripe.ts      # STRIPE_API_URL for another endpoint
 *
 * test/integrations/sdks.test.ts drives createStripe() against a local fake of Stripe;
 * test/acceptance/examples.test.ts runs this file.
 */
// #region imports
import Stripe from 'stripe';
import { createValve, memoryStore, type Valve } from '../src/index.js';
// #endregion imports

/** Where the API is (only to point the SDK at a test server): host, port, protocol. */
export type StripeEndpoint = Pick<Stripe.StripeConfig, 'host' | 'port' | 'protocol'>;

export function createStripe(valve: Valve, apiKey: string, endpoint: StripeEndpoint = {}) {
  // #region client
  const stripe = new Stripe(apiKey, {
    httpClient: Stripe.createFetchHttpClient(valve.wrapFetch(fetch)), // every attempt through the valve
    maxNetworkRetries: 0, // valve retries 429s; Stripe's retries (2 by default) would multiply them
    ...endpoint, // host, port, protocol: only to point the SDK at a test server
  });
  // #endregion client
  return stripe;
}

function endpointOf(url: string | undefined): StripeEndpoint {
  if (url === undefined) return {};
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port), protocol: u.protocol === 'http:' ? 'http' : 'https' };
}

if (process.argv[1] === import.meta.filename) {
  // #region valve
  // One valve per Stripe account, below its limit (25 requests/s in test mode, 100 live).
  const valve = createValve({
    id: 'stripe:acct_1',
    rules: { limit: 20, interval: '1s' },
    store: memoryStore(),
  });
  // #endregion valve
  const stripe = createStripe(
    valve,
    process.env.STRIPE_SECRET_KEY ?? '',
    endpointOf(process.env.STRIPE_API_URL),
  );
  const customers = await Promise.all([1, 2, 3].map(() => stripe.customers.create({ description: 'valve' })));
  console.log(`${customers.length} customers, ${valve.stats().started} requests`);
  await valve.close();
}
