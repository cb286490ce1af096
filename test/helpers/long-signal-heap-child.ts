/**
 * Child process of test/feedback/long-signal-heap.test.ts (run with --expose-gc --import tsx):
 * requests through `valve.wrapFetch()` (or an Octokit with valve/octokit's throttling) that all
 * carry one long-lived caller signal, as a shutdown signal given to every request. Three rounds
 * of `count` requests (100 at a time, fake fetch); prints one JSON line: the heap growth per
 * request from the second round to the third (the first warms the code and the tables), and
 * the most 'abort' listeners the shared signal had while requests were in flight.
 *
 *   node --expose-gc --import tsx long-signal-heap-child.ts <fetch|octokit> <count>
 */
import { getEventListeners } from 'node:events';
import { Octokit } from '@octokit/core';
import { createValve, memoryStore } from '../../src/index.js';
import { throttling } from '../../src/integrations/octokit/index.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with --expose-gc');
const mode = process.argv[2] ?? 'fetch';
const count = Number(process.argv[3] ?? '30000');
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Several collections, with turns between them (a WeakRef target lives to the end of its turn). */
async function heap(): Promise<number> {
  for (let i = 0; i < 6; i++) {
    gc!();
    await sleep(10);
  }
  return process.memoryUsage().heapUsed;
}

const shutdown = new AbortController();
const headers = {
  'content-type': 'application/json',
  'x-ratelimit-limit': '1000000',
  'x-ratelimit-remaining': '1000000',
  'x-ratelimit-reset': String(Math.floor(Date.now() / 1000) + 3600),
  'x-ratelimit-resource': 'core',
};
const fakeFetch = async (_input: unknown, _init?: unknown) => new Response('{}', { status: 200, headers });
const store = memoryStore();
const huge = { limit: 1_000_000_000, interval: '1s' } as const;

let send: () => Promise<unknown>;
if (mode === 'octokit') {
  const ThrottledOctokit = Octokit.plugin(throttling);
  const octokit = new ThrottledOctokit({
    request: { fetch: fakeFetch },
    throttle: {
      store,
      limits: { core: huge, rest: huge },
      onRateLimit: () => false,
      onSecondaryRateLimit: () => false,
    },
  });
  const request = octokit.request as unknown as (route: string, params: object) => Promise<unknown>;
  send = () =>
    request('GET /repos/{owner}/{repo}', { owner: 'o', repo: 'r', request: { signal: shutdown.signal } });
} else {
  const valve = createValve({ id: 'long-signal', store, rules: huge });
  const wrapped = valve.wrapFetch(fakeFetch);
  send = () => wrapped('https://api.example.com/', { signal: shutdown.signal });
}

let listeners = 0;
async function round(): Promise<void> {
  for (let i = 0; i < count; i += 100) {
    const calls: Promise<unknown>[] = [];
    for (let k = 0; k < 100; k++) calls.push(send());
    listeners = Math.max(listeners, getEventListeners(shutdown.signal, 'abort').length);
    await Promise.all(calls);
  }
}

await round();
await round();
const before = await heap();
await round();
const after = await heap();
process.stdout.write(`${JSON.stringify({ mode, count, perRequest: (after - before) / count, listeners })}\n`);
