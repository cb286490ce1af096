/**
 * The embedded Lua: generated from src/stores/redis/lua/*.lua, never stale, each script
 * documented by its header, and the SHA1 the server computes equals the one embedded.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as scripts from '../../src/stores/redis/scripts.generated.js';
import { respCommand } from '../helpers/resp.js';
import { startRedis } from '../helpers/servers.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const luaDir = path.join(root, 'src/stores/redis/lua');
const all = [
  scripts.ACQUIRE,
  scripts.ACQUIRE_MANY,
  scripts.PAUSE,
  scripts.PROBE,
  scripts.RESUME,
  scripts.RENEW,
  scripts.RELEASE,
  scripts.STATUS,
  scripts.WINDOW,
];

describe('embedded Lua scripts', () => {
  it('scripts.generated.ts is up to date with the .lua files (run `node scripts/gen-lua.mjs`)', () => {
    const result = spawnSync(process.execPath, [path.join(root, 'scripts/gen-lua.mjs'), '--check'], {
      encoding: 'utf8',
    });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });

  it('embeds every script, each with the SHA1 of its source', () => {
    const files = readdirSync(luaDir).filter((f) => f.endsWith('.lua'));
    expect(all.map((s) => `${s.name}.lua`).sort()).toEqual(files.sort());
    for (const s of all) expect(s.sha).toBe(createHash('sha1').update(s.source).digest('hex'));
  });

  it('each script opens with a header listing every KEYS[i] and ARGV[i] it reads, and its reply', () => {
    for (const s of all) {
      const file = readFileSync(path.join(luaDir, `${s.name}.lua`), 'utf8');
      const header = /^(?:#![^\n]*\n)?--\[\[([\s\S]*?)\]\]/.exec(file)?.[1];
      expect(header, s.name).toBeDefined();
      expect(header).toMatch(/Reply:/);
      const code = file.slice(file.indexOf(']]'));
      for (const [, kind, n] of code.matchAll(/\b(KEYS|ARGV)\[(\d+)\]/g)) {
        expect(header, `${s.name}: ${kind}[${n}] is not in the header`).toMatch(
          new RegExp(`${kind}\\[${n}(\\]|\\.\\.)`),
        );
      }
      // Includes were expanded; nothing is left to read at runtime.
      expect(s.source).not.toMatch(/^-- @include/m);
    }
  });

  it('every script declares its flags with a #!lua shebang; only those that cannot grow memory run under OOM', () => {
    // Without allow-oom, Redis 7 / Valkey refuse the whole call under maxmemory + noeviction
    // before it runs (EVALSHA included): a script can never fail after a first write. release,
    // resume and probe only delete or write nothing; renew only updates what exists (running
    // jobs keep their leases on a full server). The command's status script only reads
    // (no-writes: the server refuses any write in it).
    for (const s of all) {
      const first = s.source.split('\n', 1)[0];
      expect(first, s.name).toBe(
        s.name === 'status'
          ? '#!lua flags=no-writes'
          : ['release', 'resume', 'probe', 'renew'].includes(s.name)
            ? '#!lua flags=allow-oom'
            : '#!lua',
      );
    }
  });

  it('the server computes the same SHA1 (SCRIPT LOAD)', async () => {
    const server = await startRedis();
    try {
      for (const s of all) {
        expect(await respCommand(server, ['SCRIPT', 'LOAD', s.source])).toBe(s.sha);
      }
    } finally {
      await server.stop();
    }
  });

  it('uses no command outside the documented ACL rule, and never KEYS, SCAN, FLUSH* or CONFIG', () => {
    const allowed = new Set([
      'TIME',
      'GET',
      'SET',
      'DEL',
      'EXISTS',
      'ZADD',
      'ZREM',
      'ZREMRANGEBYSCORE',
      'ZCARD',
      'ZRANGE',
      'ZSCORE',
      'LRANGE',
      'LINDEX',
      'LSET',
      'LTRIM',
      'RPUSH',
      'PEXPIRE',
      'PUBLISH',
      'SPUBLISH',
    ]);
    for (const s of all) {
      for (const [, command] of s.source.matchAll(/redis\.p?call\('([A-Z]+)'/g)) {
        expect(allowed.has(command!), `${s.name} calls ${command}`).toBe(true);
      }
      expect(s.source).not.toMatch(/'(KEYS|SCAN|FLUSHALL|FLUSHDB|CONFIG)'/);
    }
  });

  it('the store imports no Redis client and reads no file at runtime (clients are optional peers)', () => {
    const dir = path.join(root, 'src/stores/redis');
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
      const text = readFileSync(path.join(dir, file), 'utf8');
      expect(text, file).not.toMatch(/from ['"](ioredis|iovalkey|redis|@redis\/[a-z-]+)['"]/);
      expect(text, file).not.toMatch(/node:fs|readFileSync|__dirname/);
    }
  });
});
