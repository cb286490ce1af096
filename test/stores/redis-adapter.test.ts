/**
 * The Redis adapter's direct EVALSHA path on standalone ioredis-family clients: the client's
 * own Command class is found (ioredis 5 and iovalkey mix EventEmitter's members, `constructor`
 * among them, into their prototype, so `client.constructor.Command` is not there), without
 * sending anything.
 */
import { Redis as IORedis, Command as IoCommand } from 'ioredis';
import IORedis6 from 'ioredis6';
import Valkey from 'iovalkey';
import { describe, expect, it } from 'vitest';
import { commandClass } from '../../src/stores/redis/adapter.js';

type Ctor = new (options: { lazyConnect: boolean }) => unknown;
const commandOf = (module: unknown): unknown => (module as { Command?: unknown }).Command;

describe('commandClass', () => {
  it.each([
    ['ioredis', () => new IORedis({ lazyConnect: true }), IoCommand],
    ['iovalkey', () => new (Valkey as unknown as Ctor)({ lazyConnect: true }), commandOf(Valkey)],
    ['ioredis6', () => new (IORedis6 as unknown as Ctor)({ lazyConnect: true }), commandOf(IORedis6)],
  ])('finds %s’s Command class, sending nothing', (_, make, expected) => {
    const client = make() as unknown as { status: string; disconnect(): void };
    try {
      expect(expected).toBeTypeOf('function');
      expect(commandClass(client)).toBe(expected);
      // Never connected, nothing queued.
      expect(client.status).toBe('wait');
      expect((client as unknown as { offlineQueue: { length: number } }).offlineQueue.length).toBe(0);
    } finally {
      client.disconnect();
    }
  });

  it('finds none on a client without one', () => {
    expect(commandClass({ evalsha() {}, eval() {} })).toBeUndefined();
    expect(
      commandClass({
        pipeline: () => ({
          evalsha() {
            throw new Error('no');
          },
        }),
      }),
    ).toBeUndefined();
  });
});
