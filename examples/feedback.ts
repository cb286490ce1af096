/**
 * The code of docs/provider-feedback.md: observe() and wrapFetch() on a provider's answers,
 * backoff settings, the 'feedback-ignored' event, and observe() called from axios, got,
 * undici and the SDKs. Each function takes what the page leaves to you (a store, a fetch, a
 * base URL, a logger); test/acceptance/docs-examples.test.ts runs each against a local server
 * (or a local fetch) that answers as the provider would, and checks the pause that results.
 */
import Anthropic from '@anthropic-ai/sdk';
import { Octokit } from '@octokit/core';
import axios from 'axios';
import got from 'got';
import OpenAI from 'openai';
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import type Stripe from 'stripe';
import {
  type Clock,
  createValve,
  type FeedbackReading,
  type Rule,
  type Store,
  type Valve,
} from '../src/index.js';

/** The page's opening example: GitHub's answers pause every valve with the id. */
export async function githubFeedback(store: Store, fetch: typeof globalThis.fetch, response: Response) {
  // #region intro
  const github = createValve({ id: 'github:app-42', rules: { limit: 5000, interval: '1h' }, store });

  // Either let valve run the requests…
  const ghFetch = github.wrapFetch(fetch);
  const res = await ghFetch('https://api.github.com/repos/octo/hello');

  // …or hand it the responses you get some other way.
  github.observe(response);
  // #endregion intro
  return { github, res };
}

/** What observe() returns for GitHub's 403 `x-ratelimit-remaining: 0`, 30 s before its reset. */
export function githubReading(clock: Clock): FeedbackReading | undefined {
  const valve = createValve({ id: 'github:app-42', clock });
  const response = new Response(null, {
    status: 403,
    headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1714138800' },
  });
  return valve.observe(response);
}

export const expectedReading: FeedbackReading =
  // #region reading
  {
    waitMs: 30000,
    until: 1714138800000,
    source: 'ratelimit-header',
    header: 'x-ratelimit-reset',
    raw: '1714138800',
    status: 403,
    model: 'window',
    earliest: 1714138799000,
    coarse: true,
  };
// #endregion reading

/** Backoff and cap settings. */
export function withFeedback(id: string, rules: Rule) {
  // #region backoff
  const valve = createValve({
    id,
    rules,
    feedback: { backoffInitial: '500ms', backoffMax: '30s', maxPause: '15m' },
  });
  // #endregion backoff
  return valve;
}

export interface Log {
  warn(fields: object, message: string): void;
}

/** Every header value observe() did not use as sent, logged. */
export function logIgnored(valve: Valve, log: Log) {
  // #region feedback-ignored
  valve.on('feedback-ignored', ({ header, value, reason, status, cappedTo, requestedMs }) => {
    log.warn({ header, value, reason, status, cappedTo, requestedMs }, 'rate-limit header not used as sent');
  });
  // #endregion feedback-ignored
}

/** wrapFetch with its options: 429s retried at their place in the queue. */
export async function postItem(valve: Valve, fetch: typeof globalThis.fetch, item: object) {
  // #region wrap-fetch
  const api = valve.wrapFetch(fetch, { retries: 3, cost: () => 1, priority: 0 });
  const res = await api('https://api.example.com/items', { method: 'POST', body: JSON.stringify(item) });
  // #endregion wrap-fetch
  return res;
}

export async function axiosItems(valve: Valve, baseURL: string) {
  // #region axios
  const http = axios.create({ baseURL });
  http.interceptors.response.use(
    (res) => {
      valve.observe(res); // { status, headers: AxiosHeaders }
      return res;
    },
    (err) => {
      if (err.response) valve.observe(err.response);
      throw err;
    },
  );
  const data = await valve.run(() => http.get('/items'));
  // #endregion axios
  return data;
}

export async function gotItems(valve: Valve, prefixUrl: string) {
  // #region got
  const client = got.extend({
    prefixUrl,
    retry: { limit: 0 }, // valve decides
    hooks: {
      afterResponse: [
        (res) => {
          valve.observe(res); // { statusCode, headers }
          return res;
        },
      ],
    },
  });
  const body = await valve.run(() => client('items').json());
  // #endregion got
  return body;
}

/** SDKs that accept a fetch: the wrapped fetch, and the SDK's own retries off. */
export function sdkClients(valve: Valve) {
  // #region sdk-fetch
  const openai = new OpenAI({ fetch: valve.wrapFetch(fetch), maxRetries: 0 });
  const anthropic = new Anthropic({ fetch: valve.wrapFetch(fetch), maxRetries: 0 });
  const octokit = new Octokit({ request: { fetch: valve.wrapFetch(fetch) } });
  // #endregion sdk-fetch
  return { openai, anthropic, octokit };
}

/** SDKs that expose the response: observe it, and the error's status and headers. */
export async function sdkResponses(
  valve: Valve,
  openai: OpenAI,
  stripe: Stripe,
  params: ChatCompletionCreateParamsNonStreaming,
) {
  // #region sdk-response
  const { data, response } = await valve.run(() => openai.chat.completions.create(params).withResponse());
  valve.observe(response);
  // On errors: catch (err) { if (err.status) valve.observe({ status: err.status, headers: err.headers }); throw err; }

  stripe.on('response', (e: Stripe.ResponseEvent) => valve.observe({ status: e.status, headers: {} })); // a bare 429 backs off
  // #endregion sdk-response
  return data;
}
