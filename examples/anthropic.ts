/**
 * The Anthropic SDK through a valve: requests paced by a rule and by Anthropic's
 * anthropic-ratelimit-* headers, 429s retried by valve alone, and each message's output
 * tokens charged to an output-tokens-per-minute rule.
 *
 *   ANTHROPIC_API_KEY=sk-ant-… npx tsx examples/anthropic.ts     # ANTHROPIC_BASE_URL for another endpoint
 *
 * test/integrations/sdks.test.ts drives createAnthropic() against a local fake of Anthropic;
 * test/acceptance/examples.test.ts runs this file.
 */
// #region imports
import Anthropic from '@anthropic-ai/sdk';
import { createValve, memoryStore, type Store } from '../src/index.js';
// #endregion imports

export interface AnthropicClientOptions {
  apiKey: string;
  baseURL?: string | undefined;
  store?: Store;
  /** Requests and output tokens per minute of your Anthropic tier. */
  rpm?: number;
  otpm?: number;
}

export function createAnthropic({
  apiKey,
  baseURL,
  store = memoryStore(),
  rpm = 50,
  otpm = 8_000,
}: AnthropicClientOptions) {
  // #region client
  const requests = createValve({
    id: 'anthropic:ws-1:requests',
    rules: { limit: rpm, interval: '1m' },
    store,
  });
  const outputTokens = createValve({
    id: 'anthropic:ws-1:output-tokens',
    rules: { limit: otpm, interval: '1m', burst: otpm }, // a bucket refilled over a minute, as Anthropic's
    store,
  });

  const anthropic = new Anthropic({
    apiKey,
    baseURL,
    fetch: requests.wrapFetch(fetch), // every attempt waits for the rule and Anthropic's announced pauses
    maxRetries: 0, // valve retries 429s at their place in the queue; the SDK's retries would multiply them
  });
  // #endregion client

  // #region tokens
  /** A message whose output tokens are charged to the output-token rule once Anthropic reports them. */
  async function ask(prompt: string, maxTokens: number, signal?: AbortSignal) {
    const message = await anthropic.messages.create(
      { model: 'claude-sonnet-4-5', max_tokens: maxTokens, messages: [{ role: 'user', content: prompt }] },
      { signal },
    );
    const used = Math.min(message.usage.output_tokens, otpm);
    if (used > 0) {
      // Spent already: charged without the caller's signal, so an abort cannot drop the charge.
      const charged = outputTokens.run(() => {}, { cost: used });
      // The call returns once the bucket has room for them; the caller's signal ends that wait.
      await unlessAborted(charged, signal);
    }
    return message;
  }

  /** Settles as `done` does, or rejects with the SDK's abort error first if `signal` fires. */
  function unlessAborted<T>(done: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    if (signal === undefined) return done;
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => reject(new Anthropic.APIUserAbortError());
      signal.addEventListener('abort', onAbort, { once: true });
      if (signal.aborted) onAbort();
      done.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }
  // #endregion tokens

  const close = () => Promise.all([requests.close(), outputTokens.close()]).then(() => {});
  return { anthropic, ask, requests, outputTokens, close };
}

if (process.argv[1] === import.meta.filename) {
  const client = createAnthropic({
    apiKey: process.env.ANTHROPIC_API_KEY ?? '',
    baseURL: process.env.ANTHROPIC_BASE_URL,
  });
  const answers = await Promise.all(['one', 'two', 'three'].map((word) => client.ask(`Say ${word}.`, 16)));
  const used = answers.reduce((sum, a) => sum + a.usage.output_tokens, 0);
  console.log(
    `${answers.length} messages, ${used} output tokens, ${client.requests.stats().started} requests`,
  );
  await client.close();
}
