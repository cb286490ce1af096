import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeGitHub, startFakeGitHub } from '../helpers/fake-github.js';
import { runExample } from '../helpers/run-example.js';
import { sharedRedis } from '../helpers/shared-servers.js';

let github: FakeGitHub;
beforeAll(async () => {
  github = await startFakeGitHub();
});
afterAll(() => github.stop());

const run = (env: Record<string, string>) => runExample('examples/octokit.ts', env, 30_000);

describe('examples/octokit.ts', () => {
  it('runs against the fake GitHub with Redis, and exits by itself', async () => {
    const { privateKey } = generateKeyPairSync('rsa', {
      modulusLength: 2048,
      publicKeyEncoding: { type: 'spki', format: 'pem' },
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    });
    const redis = sharedRedis();
    const result = await run({
      GITHUB_URL: github.url,
      GITHUB_TOKEN: 'example-token',
      GITHUB_APP_ID: '1',
      GITHUB_APP_PRIVATE_KEY: privateKey,
      GITHUB_INSTALLATION_IDS: '42,7',
      REDIS_URL: `redis://${redis.host}:${redis.port}`,
    });
    expect({ code: result.code, stderr: result.stderr, stdout: result.stdout }).toMatchObject({
      code: 0,
      stderr: '',
    });
    expect(result.stdout).toContain('token client:');
    expect(result.stdout).toContain('installations: 42: 200, 7: 200');
    const paths = github.log.map((e) => `${e.method} ${e.path} ${e.token}`);
    expect(paths).toContain('GET /zen example-token');
    expect(paths.some((p) => p.startsWith('POST /app/installations/42/access_tokens'))).toBe(true);
    expect(paths.filter((p) => p.startsWith('POST /app/installations/'))).toHaveLength(2);
    expect(paths).toContain('GET /installation/repositories ghs_42');
    expect(paths).toContain('GET /installation/repositories ghs_7');
  }, 40_000);
});
