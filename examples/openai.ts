/**
 * The official OpenAI SDK through a valve: requests paced by a rule and by OpenAI's own
 * x-ratelimit-* headers, 429s retried by valve alone, and the tokens each completion used
 * charged to a token-per-minute rule.
 *
 *   OPENAI_API_KEY=sk-… npx tsx examples/openai.ts           # OPENAI_BASE_URL for another endpoint
 *
 * test/integrations/sdks.test.ts drives createOpenAI() against a local fake of OpenAI;
 * test/acceptance/examples.test.ts runs this file.
 */
// #region imports
import OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { createValve, memoryStore, type Store } from '../src/index.js';
// #endregion imports

export interface OpenAIClientOptions {
  apiKey: string;
  baseURL?: string | undefined;
  store?: Store;
  /** Requests and tokens per minute of your OpenAI tier. */
  rpm?: number;
  tpm?: number;
}

/** Rough count of the tokens of a prompt (about 4 characters a token in English). */
function estimateTokens(messages: ChatCompletionMessageParam[]): number {
  let chars = 0;
  for (const m of messages) chars += typeof m.content === 'string' ? m.content.length : 100;
  return Math.ceil(chars / 4) + 4 * messages.length;
}

export function createOpenAI({
  apiKey,
  baseURL,
  store = memoryStore(),
  rpm = 500,
  tpm = 200_000,
}: OpenAIClientOptions) {
  // #region client
  // One valve for the requests of a project's key, one for its tokens, in a shared store.
  const requests = createValve({
    id: 'openai:proj-1:requests',
    rules: { limit: rpm, interval: '1m' },
    store,
  });
  const tokens = createValve({
    id: 'openai:proj-1:tokens',
    rules: { limit: tpm, interval: '1m', burst: tpm }, // a bucket of tpm tokens refilled over a minute, as OpenAI's
    store,
  });

  const openai = new OpenAI({
    apiKey,
    baseURL,
    fetch: requests.wrapFetch(fetch), // every attempt waits for the rule and OpenAI's announced pauses
    maxRetries: 0, // valve retries 429s at their place in the queue; the SDK's retries would multiply them
  });
  // #endregion client

  // #region tokens
  /** A chat completion charged to the token rule: its estimate before it starts, the rest after. */
  async function chat(messages: ChatCompletionMessageParam[], maxTokens: number, signal?: AbortSignal) {
    // OpenAI counts max_tokens against the limit when the request arrives. A cost is at most
    // the rule's burst: a larger estimate waits for the whole bucket instead.
    const estimate = Math.min(estimateTokens(messages) + maxTokens, tpm);
    // Aborted while the estimate waits: nothing was sent, and the call ends as the SDK ends one.
    await tokens
      .run(() => {}, { cost: estimate, signal })
      .catch((err: unknown) => {
        throw signal?.aborted ? new OpenAI.APIUserAbortError() : err;
      });
    const completion = await openai.chat.completions.create(
      { model: 'gpt-4o-mini', messages, max_tokens: maxTokens },
      { signal },
    );
    const extra = (completion.usage?.total_tokens ?? 0) - estimate;
    // Spent more than estimated: charged now, so later calls wait for it.
    if (extra > 0) tokens.run(() => {}, { cost: Math.min(extra, tpm) }).catch(() => {});
    return completion;
  }
  // #endregion tokens

  const close = () => Promise.all([requests.close(), tokens.close()]).then(() => {});
  return { openai, chat, requests, tokens, close };
}

if (process.argv[1] === import.meta.filename) {
  const client = createOpenAI({
    apiKey: process.env.OPENAI_API_KEY ?? '',
    baseURL: process.env.OPENAI_BASE_URL,
  });
  const answers = await Promise.all(
    ['one', 'two', 'three'].map((word) => client.chat([{ role: 'user', content: `Say ${word}.` }], 16)),
  );
  const used = answers.reduce((sum, a) => sum + (a.usage?.total_tokens ?? 0), 0);
  console.log(`${answers.length} completions, ${used} tokens, ${client.requests.stats().started} requests`);
  await client.close();
}
