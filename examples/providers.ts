/**
 * The worked examples of docs/choose-an-algorithm.md: the rules for GitHub, Stripe, HubSpot,
 * OpenAI, Shopify and Discord, each in the valve(s) it configures. test/acceptance/docs-examples.test.ts
 * runs them (GitHub on a test Redis, OpenAI against a local fake of its API) and checks what
 * each doc paragraph says of them.
 */
import type { Redis } from 'ioredis';
import type OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { createValve, redisStore, type Store, type Valve } from '../src/index.js';

/** GitHub: reads and writes share the hourly rule, the pause and the 100 global slots. */
export function github(client: Redis) {
  // #region github
  const store = redisStore({ client });
  const reads = createValve({
    id: 'github:app-42',
    store,
    rules: { limit: 4901, interval: '1h', burst: 100 }, // ≤ 5,000 in any hour, bursts of 100
    concurrency: { limit: 100, scope: 'global' },
  });
  const writes = createValve({
    id: 'github:app-42:writes',
    store,
    rules: [
      { limit: 80, interval: '1m' }, // content creation: ≤ 80 in any minute
      { limit: 421, interval: '1h', burst: 80 }, // and ≤ 500 in any hour
    ],
  });

  const gh = reads.wrapFetch(fetch);
  // A write takes a content-creation grant, then goes out like any request.
  const ghWrite: typeof fetch = (input, init) => writes.run(() => gh(input, init));
  // #endregion github
  return { reads, writes, gh, ghWrite };
}

export function stripe(store: Store, accountId: string) {
  // #region stripe
  const stripe = createValve({
    id: `stripe:${accountId}`,
    rules: { limit: 90, interval: '1s', burst: 10 }, // ≤ 99 in any second, bursts of 10
    store,
  });
  // #endregion stripe
  return stripe;
}

export function hubspot(store: Store) {
  // #region hubspot
  const hubspot = createValve({
    id: 'hubspot:portal-123',
    rules: [
      { limit: 91, interval: '10s', burst: 10 }, // ≤ 100 in any 10 s
      { limit: 250_000, interval: '1d', algorithm: 'fixed-window' }, // per UTC day
    ],
    store,
  });
  // #endregion hubspot
  return hubspot;
}

/** Rough count of the tokens of a prompt (about 4 characters a token in English). */
export function estimatePromptTokens(messages: ChatCompletionMessageParam[]): number {
  let chars = 0;
  for (const m of messages) chars += typeof m.content === 'string' ? m.content.length : 100;
  return Math.ceil(chars / 4) + 4 * messages.length;
}

/** OpenAI: one valve for the tokens, one for the requests. */
export function openaiValves(store: Store) {
  // #region openai
  const tokens = createValve({
    id: 'openai:proj-1:gpt-4o:tpm',
    rules: { limit: 192_001, interval: '1m', burst: 8_000 }, // ≤ 200,000 tokens in any minute
    store,
  });
  const requests = createValve({
    id: 'openai:proj-1:gpt-4o:rpm',
    rules: { limit: 500, interval: '1m' }, // one start every 120 ms
    store,
  });
  // #endregion openai
  return { tokens, requests };
}

/** Each call runs through both valves, its tokens as the cost. */
export async function complete(
  openai: OpenAI,
  { tokens, requests }: { tokens: Valve; requests: Valve },
  model: string,
  messages: ChatCompletionMessageParam[],
  maxTokens: number,
) {
  // #region openai
  const cost = estimatePromptTokens(messages) + maxTokens; // an overestimate is safe
  const reply = await tokens.run(
    () =>
      requests.run(({ signal }) =>
        openai.chat.completions.create({ model, messages, max_tokens: maxTokens }, { signal }),
      ),
    { cost },
  );
  // #endregion openai
  return reply;
}

export function shopify(store: Store, shop: string) {
  // #region shopify
  const shopify = createValve({
    id: `shopify:${shop}`,
    rules: { limit: 2, interval: '1s', burst: 40 }, // 40 at once, then 2 per second
    store,
  });
  // #endregion shopify
  return shopify;
}

export function discord(store: Store) {
  // #region discord
  const discord = createValve({
    id: 'discord:bot-1',
    rules: { limit: 50, interval: '1s' }, // one start every 20 ms
    store,
  });
  // #endregion discord
  return discord;
}
