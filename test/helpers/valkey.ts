/**
 * Where the tests find Valkey 8: the cache that scripts/fetch-valkey.mjs fills
 * (.cache/valkey/, from Debian's backports, never installed into the system), else
 * valkey-server / valkey-cli on PATH.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const VALKEY_CACHE = path.join(REPO_ROOT, '.cache', 'valkey');
const FETCH_SCRIPT = path.join(REPO_ROOT, 'scripts', 'fetch-valkey.mjs');

export const VALKEY_HINT =
  'Valkey 8 is fetched from Debian bookworm-backports into .cache/valkey/ by `node scripts/fetch-valkey.mjs` ' +
  '(needs network access to the Debian mirror in /etc/apt); run it and read its message, or put ' +
  'valkey-server and valkey-cli on PATH. See docs/testing.md.';

interface Manifest {
  version: string;
  server: string;
  cli: string;
  libPath: string[];
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir && existsSync(path.join(dir, name))) return path.join(dir, name);
  }
  return undefined;
}

/** The Valkey binaries and the environment to run them in, or throws saying how to get them. */
export function valkeyBinaries(): { server: string; cli: string; env: NodeJS.ProcessEnv; version: string } {
  const manifestFile = path.join(VALKEY_CACHE, 'valkey.json');
  if (existsSync(manifestFile)) {
    const m = JSON.parse(readFileSync(manifestFile, 'utf8')) as Manifest;
    const server = path.join(VALKEY_CACHE, m.server);
    const cli = path.join(VALKEY_CACHE, m.cli);
    if (existsSync(server) && existsSync(cli)) {
      const libs = m.libPath.map((p) => path.join(VALKEY_CACHE, p));
      const LD_LIBRARY_PATH = [...libs, process.env.LD_LIBRARY_PATH].filter(Boolean).join(':');
      return { server, cli, env: { ...process.env, LD_LIBRARY_PATH }, version: m.version };
    }
  }
  const server = onPath('valkey-server');
  const cli = onPath('valkey-cli');
  if (server && cli) return { server, cli, env: process.env, version: 'from PATH' };
  throw new Error(`Valkey is not available. ${VALKEY_HINT}`);
}

/**
 * Makes sure Valkey is available, running scripts/fetch-valkey.mjs once if the cache is
 * empty. Resolves with undefined when it is, or with the reason (including the script's
 * output) when it is not.
 */
export async function ensureValkey(): Promise<string | undefined> {
  try {
    valkeyBinaries();
    return undefined;
  } catch {
    // fetch below
  }
  const output = await new Promise<string>((resolve) => {
    const child = spawn(process.execPath, [FETCH_SCRIPT], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString('utf8');
    });
    child.stderr.on('data', (c: Buffer) => {
      out += c.toString('utf8');
    });
    // apt has its own timeouts; this one only guards against a hung download.
    const timer = setTimeout(() => {
      out += '\n(fetch-valkey.mjs stopped after 180 s)';
      child.kill('SIGKILL');
    }, 180_000);
    child.once('error', (err) => resolve(`cannot run ${FETCH_SCRIPT}: ${err.message}`));
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(out);
    });
  });
  try {
    valkeyBinaries();
    return undefined;
  } catch (err) {
    return `${(err as Error).message}\nOutput of scripts/fetch-valkey.mjs:\n${output}`;
  }
}
