/**
 * Runs examples/octokit.ts (the blocks of docs/octokit.md) as a user would, against the fake
 * GitHub and the test Redis: the token client and each installation's client get their
 * answers, the installation tokens are fetched through the plugin, and the process exits by
 * itself (nothing left open).
 */
import { spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeGitHub, startFakeGitHub } from '../helpers/fake-github.js';
import { sharedRedis } from '../helpers/shared-servers.js';

const root = resolve(import.meta.dirname, '../..');
let github: FakeGitHub;
beforeAll(async () => {
  github = await startFakeGitHub();
});
afterAll(() => github.stop());

function run(env: Record<string, string>) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((done, fail) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/octokit.ts'], {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('error', fail);
    child.on('exit', (code) => {
      clearTimeout(killer);
      done({ code, stdout, stderr });
    });
  });
}

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
