#!/usr/bin/env node
// Fetches Valkey 8 (server + cli) for the tests, without installing it into the system and
// without changing the machine's package sources: Debian's <codename>-backports packages
// `valkey-server` and `valkey-tools` are downloaded with a private apt state (its own source
// list, lists and cache in a temp dir) from the same Debian mirror the machine already uses
// (read from /etc/apt at run time), then unpacked with `dpkg -x` into .cache/valkey/.
// Library dependencies the machine lacks are fetched and unpacked next to them.
//
// Usage: node scripts/fetch-valkey.mjs [--force]
// Result: .cache/valkey/valkey.json  { version, server, cli, libPath }  (paths relative to it)
// Idempotent: does nothing when the cache is already complete. Exit code 1 with a message
// on failure.
import { spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const cacheDir = path.join(root, '.cache', 'valkey');
const manifest = path.join(cacheDir, 'valkey.json');
const PACKAGES = ['valkey-server', 'valkey-tools'];
// Never fetched: not needed to run the binaries, or part of every Debian system.
const SKIP_DEPS = new Set(['adduser', 'libc6', 'libgcc-s1', 'lsb-base', 'init-system-helpers']);

class FetchError extends Error {}

function fail(message) {
  throw new FetchError(message);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  if (r.error) fail(`cannot run ${cmd}: ${r.error.message}`);
  if (r.status !== 0) fail(`${cmd} ${args.join(' ')} failed (exit ${r.status}):\n${r.stderr || r.stdout}`);
  return r.stdout;
}

/** The Debian codename of this machine (e.g. bookworm). */
function codename() {
  const osRelease = existsSync('/etc/os-release') ? readFileSync('/etc/os-release', 'utf8') : '';
  const m = /^VERSION_CODENAME=("?)([a-z]+)\1$/m.exec(osRelease);
  if (!m) fail('cannot read VERSION_CODENAME from /etc/os-release (is this Debian?)');
  return m[2];
}

/**
 * The apt source entries (deb822 `.sources` files and one-line `.list` files) of the machine,
 * as { uris, suites, components, signedBy }.
 */
function machineSources() {
  const entries = [];
  const dir = '/etc/apt/sources.list.d';
  const files = existsSync(dir) ? readdirSync(dir).map((f) => path.join(dir, f)) : [];
  if (existsSync('/etc/apt/sources.list')) files.push('/etc/apt/sources.list');
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    if (file.endsWith('.sources')) {
      for (const stanza of text.split(/\n\s*\n/)) {
        const fields = {};
        for (const line of stanza.split('\n')) {
          const m = /^([A-Za-z-]+):\s*(.*)$/.exec(line);
          if (m) fields[m[1].toLowerCase()] = m[2].trim();
        }
        if (!(fields.types ?? '').split(/\s+/).includes('deb')) continue;
        if ((fields.enabled ?? 'yes') === 'no') continue;
        entries.push({
          uris: (fields.uris ?? '').split(/\s+/).filter(Boolean),
          suites: (fields.suites ?? '').split(/\s+/).filter(Boolean),
          components: (fields.components ?? '').split(/\s+/).filter(Boolean),
          signedBy: fields['signed-by'],
        });
      }
    } else if (file.endsWith('.list')) {
      for (const raw of text.split('\n')) {
        const line = raw.replace(/#.*/, '').trim();
        const m = /^deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s+(.*)$/.exec(line);
        if (!m) continue;
        const signed = /signed-by=(\S+)/.exec(m[1] ?? '');
        entries.push({ uris: [m[2]], suites: [m[3]], components: m[4].split(/\s+/), signedBy: signed?.[1] });
      }
    }
  }
  return entries;
}

function isInstalled(pkg) {
  const r = spawnSync('dpkg-query', ['-W', `-f=\${db:Status-Status}`, pkg], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() === 'installed';
}

function complete() {
  if (!existsSync(manifest)) return false;
  try {
    const m = JSON.parse(readFileSync(manifest, 'utf8'));
    return existsSync(path.join(cacheDir, m.server)) && existsSync(path.join(cacheDir, m.cli));
  } catch {
    return false;
  }
}

function main(force) {
  for (const tool of ['apt-get', 'apt-cache', 'dpkg', 'dpkg-query', 'ldd']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0)
      fail(`${tool} is missing (a Debian machine is needed)`);
  }

  const suite = `${codename()}-backports`;
  const mirror = machineSources().find(
    (e) => e.suites.includes(codename()) && e.components.includes('main') && e.uris.length > 0,
  );
  if (!mirror)
    fail(`no apt source for "${codename()} main" found in /etc/apt to take the Debian mirror from`);
  const uri = mirror.uris[0];
  const signed = mirror.signedBy && !mirror.signedBy.includes('\n') ? `[signed-by=${mirror.signedBy}] ` : '';

  mkdirSync(path.dirname(cacheDir), { recursive: true });
  const work = mkdtempSync(path.join(os.tmpdir(), 'valve-apt-'));
  try {
    const state = path.join(work, 'state');
    const cache = path.join(work, 'cache');
    mkdirSync(path.join(state, 'lists', 'partial'), { recursive: true });
    mkdirSync(path.join(cache, 'archives', 'partial'), { recursive: true });
    const list = path.join(work, 'sources.list');
    writeFileSync(list, `deb ${signed}${uri} ${suite} main\n`);
    const aptOpts = [
      '-q',
      '-o',
      `Dir::Etc::SourceList=${list}`,
      '-o',
      'Dir::Etc::SourceParts=/dev/null',
      '-o',
      `Dir::State=${state}`,
      '-o',
      `Dir::Cache=${cache}`,
      '-o',
      'Dir::State::status=/var/lib/dpkg/status',
      '-o',
      'APT::Sandbox::User=root',
      '-o',
      'Debug::NoLocking=1',
      '-o',
      'Acquire::Retries=2',
      '-o',
      'Acquire::http::Timeout=20',
      '-o',
      'Acquire::https::Timeout=20',
    ];
    console.error(`fetch-valkey: reading ${suite} from the machine's Debian mirror`);
    run('apt-get', [...aptOpts, 'update'], { cwd: work });

    // Which library packages do the binaries need that this machine lacks?
    const show = run('apt-cache', [...aptOpts, 'show', ...PACKAGES], { cwd: work });
    const wanted = new Set(PACKAGES);
    let version = '';
    for (const stanza of show.split(/\n\n+/)) {
      const pkg = /^Package: (\S+)/m.exec(stanza)?.[1];
      if (pkg === 'valkey-server') version = /^Version: (\S+)/m.exec(stanza)?.[1] ?? '';
      const depends = /^Depends: (.*)$/m.exec(stanza)?.[1] ?? '';
      for (const dep of depends.split(',')) {
        const name = dep.trim().split(/[\s(|:]/)[0];
        if (name && !SKIP_DEPS.has(name) && !name.startsWith('valkey') && !isInstalled(name))
          wanted.add(name);
      }
    }
    if (!version.startsWith('8.')) fail(`expected Valkey 8 in ${suite}, found "${version || 'nothing'}"`);

    const debs = path.join(work, 'debs');
    mkdirSync(debs);
    console.error(`fetch-valkey: downloading ${[...wanted].join(', ')} (${version})`);
    run('apt-get', [...aptOpts, 'download', ...wanted], { cwd: debs });

    const unpack = path.join(path.dirname(cacheDir), `valkey.tmp-${process.pid}`);
    rmSync(unpack, { recursive: true, force: true });
    mkdirSync(unpack);
    for (const deb of readdirSync(debs).filter((f) => f.endsWith('.deb'))) {
      run('dpkg', ['-x', path.join(debs, deb), path.join(unpack, 'root')]);
    }
    const libPath = [
      'root/usr/lib/x86_64-linux-gnu',
      'root/lib/x86_64-linux-gnu',
      'root/usr/lib',
      'root/lib',
    ].filter((p) => existsSync(path.join(unpack, p)));
    const info = {
      version,
      suite,
      server: 'root/usr/bin/valkey-server',
      cli: 'root/usr/bin/valkey-cli',
      libPath,
      fetchedAt: new Date().toISOString(),
    };
    const env = {
      ...process.env,
      LD_LIBRARY_PATH: [...libPath.map((p) => path.join(unpack, p)), process.env.LD_LIBRARY_PATH]
        .filter(Boolean)
        .join(':'),
    };
    for (const bin of [info.server, info.cli]) {
      const ldd = run('ldd', [path.join(unpack, bin)], { env });
      const missing = ldd.split('\n').filter((l) => l.includes('not found'));
      if (missing.length > 0) fail(`${bin} lacks libraries:\n${missing.join('\n')}`);
    }
    const out = run(path.join(unpack, info.server), ['--version'], { env });
    if (!/Valkey server v=8\./.test(out)) fail(`unexpected valkey-server --version: ${out}`);
    writeFileSync(path.join(unpack, 'valkey.json'), `${JSON.stringify(info, null, 2)}\n`);

    // Publish atomically; if another run won the race, keep theirs.
    if (force || !complete()) rmSync(cacheDir, { recursive: true, force: true });
    try {
      renameSync(unpack, cacheDir);
    } catch {
      rmSync(unpack, { recursive: true, force: true });
      if (!complete()) fail(`could not move the unpacked files into ${cacheDir}`);
    }
    console.error(`fetch-valkey: Valkey ${version} ready in ${path.relative(root, cacheDir)}/`);
  } finally {
    rmSync(work, { recursive: true, force: true });
    rmSync(path.join(path.dirname(cacheDir), `valkey.tmp-${process.pid}`), { recursive: true, force: true });
  }
}

const force = process.argv.includes('--force');
if (force || !complete()) {
  try {
    main(force);
  } catch (err) {
    console.error(`fetch-valkey: ${err instanceof FetchError ? err.message : err}`);
    console.error(
      'fetch-valkey: tests that need Valkey fail until this works. Fix the cause and run ' +
        '`node scripts/fetch-valkey.mjs`, or put valkey-server and valkey-cli (Valkey 8) on PATH. See docs/testing.md.',
    );
    process.exit(1);
  }
}
