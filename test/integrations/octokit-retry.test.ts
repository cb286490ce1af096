/**
 * valve/octokit beside the real @octokit/plugin-retry, against the fake GitHub: in the order
 * docs/octokit.md gives (`Octokit.plugin(throttling, retry)`) every retry is admitted by valve; in
 * the other order the client warns that plugin-retry's retries go around valve.
 */
import { Octokit } from '@octokit/core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { throttling } from '../../src/integrations/octokit/index.js';
import { type FakeGitHub, startFakeGitHub } from '../helpers/fake-github.js';

// Loaded by a computed name, so that plugin-retry's type declarations stay out of the project's
// type check: beside them TypeScript can lose the `throttle` handlers' parameter types in other
// files, depending on the order it reads them (docs/octokit.md, "With @octokit/plugin-retry").
const retryPackage = '@octokit/plugin-retry';
const { retry } = (await import(retryPackage)) as { retry: Parameters<typeof Octokit.plugin>[0] };

let github: FakeGitHub;
beforeAll(async () => {
  github = await startFakeGitHub();
});
afterAll(() => github.stop());
beforeEach(() => github.reset());

let n = 0;
const freshId = () => `retry${++n}-${Math.random().toString(36).slice(2, 8)}`;
const SECONDARY = 'You have exceeded a secondary rate limit';

function logger() {
  const warnings: string[] = [];
  return {
    warnings,
    log: { debug() {}, info() {}, warn: (m: string) => warnings.push(String(m)), error() {} },
  };
}

/** Two requests a second on the REST lane; handlers retry as told; retries 10 ms per second of retry-after. */
function client(
  order: 'throttling first' | 'retry first',
  answer: boolean,
  extra: Record<string, unknown> = {},
) {
  const { warnings, log } = logger();
  const MyOctokit =
    order === 'throttling first' ? Octokit.plugin(throttling, retry) : Octokit.plugin(retry, throttling);
  const handlerCalls: number[] = [];
  const octokit = new MyOctokit({
    baseUrl: github.url,
    auth: `token-${freshId()}`,
    log,
    retry: { retryAfterBaseValue: 10 },
    throttle: {
      id: freshId(),
      retryAfterBaseValue: 10,
      limits: { rest: [{ limit: 2, interval: '1s', algorithm: 'sliding-window' }] },
      onRateLimit: () => answer,
      onSecondaryRateLimit: (_after, _options, _octokit, retryCount) => {
        handlerCalls.push(retryCount);
        return answer;
      },
    },
    ...extra,
  });
  return { octokit, warnings, handlerCalls };
}

/**
 * The most requests of the log in any window [t, t + 500) ms. valve grants on its own clock and a
 * request reaches the server some time after its grant (under load, 100 ms and more), so a
 * whole second of arrivals can hold a third request; without valve, all four arrive within
 * about 140 ms (plugin-retry's back-off of 10 + 40 + 90 ms), well inside 500 ms.
 */
function mostInOneSecond(times: number[]): number {
  let most = 0;
  for (const t of times) most = Math.max(most, times.filter((u) => u >= t && u < t + 500).length);
  return most;
}

describe('valve/octokit with @octokit/plugin-retry', () => {
  it('Octokit.plugin(throttling, retry): every retry of a 5xx waits for its grant', async () => {
    const { octokit, warnings } = client('throttling first', true);
    github.script({ status: 500 }, { status: 500 }, { status: 502 });
    const response = await octokit.request('GET /repos/{owner}/{repo}', { owner: 'o', repo: 'r' });
    expect(response.status).toBe(200);
    const times = github.log.map((e) => e.t);
    expect(github.log.map((e) => e.status)).toEqual([500, 500, 502, 200]);
    // plugin-retry alone would send all four within ~140 ms (10 + 40 + 90 ms of back-off).
    expect(mostInOneSecond(times)).toBeLessThanOrEqual(2);
    expect(times[2]! - times[0]!).toBeGreaterThanOrEqual(500);
    expect(warnings).toEqual([]);
    await octokit.throttle.close();
  }, 20_000);

  it('Octokit.plugin(throttling, retry): a 429 the handler declines is retried by plugin-retry, through valve', async () => {
    const { octokit, handlerCalls } = client('throttling first', false);
    const limited = { status: 429, headers: { 'retry-after': '3' }, body: { message: SECONDARY } };
    github.script(limited, limited, limited, limited);
    await expect(
      octokit.request('GET /repos/{owner}/{repo}', { owner: 'o', repo: 'r' }),
    ).rejects.toMatchObject({
      status: 429,
    });
    // plugin-retry's own 3 retries; each is a new request for valve (its handler count restarts).
    expect(github.log).toHaveLength(4);
    expect(handlerCalls).toEqual([0, 0, 0, 0]);
    const times = github.log.map((e) => e.t);
    // Each waits out the pause the answer before it wrote (3 × 10 ms) and the REST lane's 2 a second.
    for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(29);
    expect(mostInOneSecond(times)).toBeLessThanOrEqual(2);
    await octokit.throttle.close();
  }, 20_000);

  it("plugin-retry's doNotRetry with 429 leaves a declined 429 to the caller", async () => {
    const { octokit } = client('throttling first', false, {
      retry: { doNotRetry: [400, 401, 403, 404, 410, 422, 429, 451] },
    });
    github.script({ status: 429, headers: { 'retry-after': '1' }, body: { message: SECONDARY } });
    await expect(
      octokit.request('GET /repos/{owner}/{repo}', { owner: 'o', repo: 'r' }),
    ).rejects.toMatchObject({
      status: 429,
    });
    expect(github.log).toHaveLength(1);
    await octokit.throttle.close();
  });

  it('Octokit.plugin(retry, throttling) warns once: its retries would go around valve', async () => {
    const { octokit, warnings } = client('retry first', true);
    github.script({ status: 500 }, { status: 500 });
    await octokit.request('GET /repos/{owner}/{repo}', { owner: 'o', repo: 'r' });
    await octokit.request('GET /repos/{owner}/{repo}', { owner: 'o', repo: 'r' });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(
      /plugin-retry was applied before throttling.*Octokit\.plugin\(throttling, retry\)/,
    );
    // What the warning is about: the retries were not admitted (3 requests of the first call at once).
    expect(mostInOneSecond(github.log.map((e) => e.t))).toBeGreaterThan(2);
    await octokit.throttle.close();
  }, 20_000);

  it('Octokit.plugin(retry, throttling) with retry disabled does not warn', async () => {
    const { octokit, warnings } = client('retry first', true, { retry: { enabled: false } });
    await octokit.request('GET /repos/{owner}/{repo}', { owner: 'o', repo: 'r' });
    expect(warnings).toEqual([]);
    await octokit.throttle.close();
  });
});
