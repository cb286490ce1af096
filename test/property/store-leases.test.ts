import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { inspectMemoryStore, type MemoryStoreContents, memoryStore } from '../../src/stores/memory.js';
import type { AcquireResult, Store } from '../../src/stores/store.js';
import { FakeClock } from '../helpers/fake-clock.js';

/**
 * Global-concurrency leases of the memory store against a model, with random
 * acquisitions, renewals (of live, released, expired and unknown tokens), releases
 * and clock steps:
 * - at most `limit` leases are held at any time, and a free slot is always granted;
 * - tokens are never reused, fences strictly increase across the whole run;
 * - renew answers true exactly for leases still held, and never resurrects one;
 * - the concurrency hint is the time until the earliest expiry;
 * - the store holds no more leases than are live.
 */

const ID = 'lease-prop';

type Command =
  | { kind: 'acquire'; id: number; n: number; ttlUs: number }
  | { kind: 'renew'; id: number; picks: number[]; ttlUs: number }
  | { kind: 'release'; id: number; picks: number[] }
  | { kind: 'advance'; us: number }
  /** Moves the clock exactly to the earliest live expiry (the boundary case). */
  | { kind: 'toExpiry' };

/** Several ids, so that the store's round-robin sweep does not always clean the id just used. */
const IDS = 5;
const idArb = fc.integer({ min: 0, max: IDS - 1 });

const ttlArb = fc.integer({ min: 1, max: 5_000_000 });
const picksArb = fc.array(fc.nat(), { maxLength: 4 });
const commandArb: fc.Arbitrary<Command> = fc.oneof(
  fc.record({
    kind: fc.constant('acquire' as const),
    id: idArb,
    n: fc.integer({ min: 1, max: 5 }),
    ttlUs: ttlArb,
  }),
  fc.record({ kind: fc.constant('renew' as const), id: idArb, picks: picksArb, ttlUs: ttlArb }),
  fc.record({ kind: fc.constant('release' as const), id: idArb, picks: picksArb }),
  fc.record({ kind: fc.constant('advance' as const), us: fc.integer({ min: 0, max: 3_000_000 }) }),
  fc.constant({ kind: 'toExpiry' as const }),
);

const contents = (store: Store): MemoryStoreContents =>
  (store as unknown as { [inspectMemoryStore](): MemoryStoreContents })[inspectMemoryStore]();

describe('memory store lease properties', () => {
  it('limit, fences, tokens, renewals and hints follow the model', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }),
        fc.array(commandArb, { minLength: 1, maxLength: 120 }),
        (limit, commands) => {
          const clock = new FakeClock();
          const store = memoryStore({ clock });
          let nowUs = Math.round(clock.now() * 1000);
          const models = Array.from({ length: IDS }, () => ({
            live: new Map<string, number>(), // token → expiry µs
            issued: [] as string[],
            lastFence: Number.NEGATIVE_INFINITY,
          }));
          const allTokens = new Set<string>();
          const purge = () => {
            for (const m of models) for (const [token, exp] of m.live) if (exp <= nowUs) m.live.delete(token);
          };
          // Mostly this id's tokens (live or dead), sometimes another id's or an unknown one.
          const pick = (id: number, picks: number[]) =>
            picks.map((p) => {
              const own = models[id]!.issued;
              const other = models[(id + 1) % IDS]!.issued;
              if (p % 7 === 6) return `unknown-${p}`;
              if (p % 7 === 5 && other.length > 0) return other[p % other.length]!;
              return own.length > 0 ? own[p % own.length]! : `unknown-${p}`;
            });

          for (const c of commands) {
            switch (c.kind) {
              case 'advance':
                nowUs += c.us;
                clock.advance(nowUs / 1000 - clock.now());
                break;
              case 'toExpiry': {
                purge();
                const next = Math.min(...models.flatMap((m) => [...m.live.values()]));
                if (Number.isFinite(next)) {
                  nowUs = next;
                  clock.advance(nowUs / 1000 - clock.now());
                }
                break;
              }
              case 'acquire': {
                purge();
                const m = models[c.id]!;
                const costs = Array.from({ length: c.n }, () => 1);
                const r = store.acquire({
                  id: `${ID}:${c.id}`,
                  rules: [],
                  costs,
                  count: c.n,
                  lease: { limit, ttl: c.ttlUs / 1000 },
                }) as AcquireResult;
                expect(Math.round(r.now * 1000)).toBe(nowUs);
                const free = limit - m.live.size;
                expect(r.granted).toBe(Math.min(c.n, free));
                expect(r.leases).toHaveLength(r.granted);
                for (const lease of r.leases!) {
                  expect(allTokens.has(lease.token)).toBe(false);
                  expect(lease.fence).toBeGreaterThan(m.lastFence);
                  expect(Math.round(lease.expiresAt * 1000)).toBe(nowUs + c.ttlUs);
                  m.lastFence = lease.fence;
                  m.issued.push(lease.token);
                  allTokens.add(lease.token);
                  m.live.set(lease.token, nowUs + c.ttlUs);
                }
                if (r.granted < c.n) {
                  expect(r.blocked).toBe('concurrency');
                  const earliest = Math.min(...m.live.values());
                  expect(Math.round(r.retryAfter * 1000)).toBe(earliest - nowUs);
                } else {
                  expect(r.blocked).toBeNull();
                }
                break;
              }
              case 'renew': {
                purge();
                const m = models[c.id]!;
                const tokens = pick(c.id, c.picks);
                const result = store.renew(`${ID}:${c.id}`, tokens, c.ttlUs / 1000) as boolean[];
                // True exactly for this id's leases still held: never a resurrection.
                expect(result).toEqual(tokens.map((t) => m.live.has(t)));
                for (const t of tokens) if (m.live.has(t)) m.live.set(t, nowUs + c.ttlUs);
                break;
              }
              case 'release': {
                const m = models[c.id]!;
                const tokens = pick(c.id, c.picks);
                store.release(`${ID}:${c.id}`, tokens);
                for (const t of tokens) m.live.delete(t);
                break;
              }
            }
            // The store holds at most `limit` leases per id (expired ones are purged before any grant).
            expect(contents(store).leases).toBeLessThanOrEqual(limit * IDS);
          }
          // After every lease expired, other traffic sweeps every id away.
          nowUs += 10_000_000;
          clock.advance(nowUs / 1000 - clock.now());
          for (let i = 0; i < IDS; i++) store.resume('other');
          expect(contents(store)).toMatchObject({ ids: 0, leases: 0 });
        },
      ),
      { numRuns: 300 },
    );
  });
});
