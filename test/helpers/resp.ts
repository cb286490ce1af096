/**
 * A tiny RESP client for the test harness: one connection, one command, one reply. It exists
 * so that the harness can check readiness, read CLUSTER INFO or set ACL users without
 * depending on a client library under test (ioredis, node-redis, ...).
 */
import net from 'node:net';
import tls from 'node:tls';

export type RespValue = string | number | null | RespError | RespValue[];

/** An error reply (`-ERR ...`) returned as a value, not thrown. */
export class RespError extends Error {
  override readonly name = 'RespError';
}

export interface RespTarget {
  host: string;
  port: number;
  /** Connect with TLS, trusting this CA (PEM). */
  tls?: { ca: string } | undefined;
  /** AUTH before the command. */
  auth?: { username: string; password: string } | undefined;
}

/** Encodes a command as a RESP array of bulk strings. */
export function encodeCommand(args: readonly (string | number)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const arg of args) {
    const b = Buffer.from(String(arg));
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

/**
 * Parses one RESP2/RESP3 value from `buf` at `offset`. Returns the value and the offset after
 * it, or `undefined` when the buffer does not hold a complete value yet.
 */
export function parseReply(buf: Buffer, offset = 0): { value: RespValue; next: number } | undefined {
  const eol = buf.indexOf('\r\n', offset);
  if (eol < 0) return undefined;
  const type = String.fromCharCode(buf[offset] ?? 0);
  const line = buf.toString('utf8', offset + 1, eol);
  const after = eol + 2;
  switch (type) {
    case '+':
      return { value: line, next: after };
    case '-':
      return { value: new RespError(line), next: after };
    case ':':
      return { value: Number(line), next: after };
    case '_':
      return { value: null, next: after };
    case '$':
    case '=': {
      const len = Number(line);
      if (len < 0) return { value: null, next: after };
      if (buf.length < after + len + 2) return undefined;
      return { value: buf.toString('utf8', after, after + len), next: after + len + 2 };
    }
    case '*':
    case '~':
    case '%': {
      let count = Number(line);
      if (count < 0) return { value: null, next: after };
      if (type === '%') count *= 2;
      const items: RespValue[] = [];
      let at = after;
      for (let i = 0; i < count; i++) {
        const item = parseReply(buf, at);
        if (!item) return undefined;
        items.push(item.value);
        at = item.next;
      }
      return { value: items, next: at };
    }
    default:
      throw new Error(`RESP: unexpected reply type ${JSON.stringify(type)}`);
  }
}

/**
 * Sends `args` (after AUTH, if given) on a fresh connection and resolves with the reply.
 * Error replies resolve as `RespError` values; connection problems reject.
 */
export function respCommand(
  target: RespTarget,
  args: readonly (string | number)[],
  timeoutMs = 5_000,
): Promise<RespValue> {
  return new Promise((resolve, reject) => {
    const commands: Buffer[] = [];
    if (target.auth) commands.push(encodeCommand(['AUTH', target.auth.username, target.auth.password]));
    commands.push(encodeCommand(args));
    const expected = commands.length;
    const socket = target.tls
      ? tls.connect({ host: target.host, port: target.port, ca: target.tls.ca, servername: 'localhost' })
      : net.connect({ host: target.host, port: target.port });
    let buf = Buffer.alloc(0);
    const replies: RespValue[] = [];
    let done = false;
    const finish = (err: Error | undefined, value?: RespValue) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(value ?? null);
    };
    const timer = setTimeout(
      () => finish(new Error(`RESP ${args[0]} to ${target.host}:${target.port} timed out`)),
      timeoutMs,
    );
    socket.once(target.tls ? 'secureConnect' : 'connect', () => socket.write(Buffer.concat(commands)));
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      try {
        for (;;) {
          const parsed = parseReply(buf);
          if (!parsed) break;
          buf = buf.subarray(parsed.next);
          replies.push(parsed.value);
        }
      } catch (err) {
        finish(err as Error);
        return;
      }
      if (replies.length >= expected) {
        const authReply = target.auth ? replies[0] : undefined;
        if (authReply instanceof RespError) finish(authReply);
        else finish(undefined, replies[expected - 1]);
      }
    });
    socket.on('error', (err) => finish(err));
    socket.on('close', () =>
      finish(new Error(`RESP connection to ${target.host}:${target.port} closed early`)),
    );
  });
}
