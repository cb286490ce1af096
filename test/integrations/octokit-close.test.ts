/**
 * valve/octokit: octokit.throttle.close() without drain, as each request meets it. A request not
 * yet sent rejects with ValveError CLOSED saying it was not sent (whether it waited for a pause,
 * its turn, a slot, or, holding a slot, a lane's grant); a request in flight is aborted (its
 * fetch's signal) and rejects with CLOSED saying it was aborted in flight. Real @octokit/core
 * against the fake GitHub.
 */
import { Octokit } from '@octokit/core';
import { afterEach, describe, expect, it } from 'vitest';
import { throttling } from '../../src/integrations/octokit/index.js';
import { memoryStore } from '../../src/stores/memory.js';
import { type FakeGitHub, startFakeGitHub } from '../helpers/fake-github.js';

const ThrottledOctokit = Octokit.plugin(throttling);
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

let gh: FakeGitHub | undefined;
afterEach(async () => {
  await gh?.stop();
  gh = undefined;
});

const settle = (p: Promise<unknown>) =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({
      ok: false as const,
      error: error as { name?: string; code?: string; message?: string },
    }),
  );

describe('close() without drain', () => {
  it('rejects every request not yet sent with CLOSED "not sent", and aborts the one in flight with CLOSED', async () => {
    gh = await startFakeGitHub({ latencyMs: 1500 });
    const octokit = new ThrottledOctokit({
      baseUrl: gh.url,
      log: quiet,
      throttle: {
        onRateLimit: () => true,
        onSecondaryRateLimit: () => true,
        store: memoryStore(),
        limits: { concurrency: 3, rest: { limit: 1, interval: '1h', algorithm: 'fixed-window' } },
      },
    });
    // In flight for 1.5 s: it spent the one `rest` unit.
    const inFlight = settle(octokit.request('GET /in-flight'));
    while (gh.log.length === 0) await new Promise((r) => setTimeout(r, 10));
    // Holds a slot (and its `core` grant) while it waits for `rest`.
    const inSlot = settle(octokit.request('GET /in-slot'));
    // Holds the last slot (and its `core` grant) while it waits for its turn at `rest`.
    const turn = settle(octokit.request('GET /turn'));
    // Waits in the queue for a slot, holding its turn at `core`.
    const queued = settle(octokit.request('GET /queued'));
    // Waits outside every valve for its turn at `core`.
    const outside = settle(octokit.request('GET /outside'));
    await new Promise((r) => setTimeout(r, 100));
    await octokit.throttle.close();
    const results = await Promise.all([inFlight, inSlot, turn, queued, outside]);
    for (const r of results)
      expect(r).toMatchObject({ ok: false, error: { name: 'ValveError', code: 'CLOSED' } });
    const messages = results.map((r) => (r.ok ? '' : r.error.message));
    expect(messages[0]).toMatch(/in flight/);
    for (const m of messages.slice(1)) {
      expect(m).toMatch(/before the request was sent/);
      expect(m).not.toMatch(/before the job started/);
    }
    expect(gh.log.map((e) => e.path)).toEqual(['/in-flight']);
  });
});
