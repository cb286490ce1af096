/** Conformance cases: isolation of ids and rule digests, one budget per rule and id, rule sets and rule changes, and wake-ups. */
import type { WakeEvent, WakeStatus } from '../stores/store.js';
import { AT_ONCE, slow3 } from './admission.js';
import { expect } from './expect.js';
import {
  acquireOn,
  type CaseRegistry,
  expectMs,
  hourly3,
  hourlyWindow,
  leaseOf,
  ones,
  rule,
  sleep,
  waitFor,
} from './suite.js';

export function sharingCases(c: CaseRegistry): void {
  const { newId } = c;
  c.describe('isolation and sharing', () => {
    c.it('ids are isolated: budget, pause and slots', async (s) => {
      const a = newId();
      const b = newId();
      expect((await s.acquire({ id: a, rules: [hourly3], costs: ones(4) })).granted).toBe(3);
      expect((await s.acquire({ id: b, rules: [hourly3], costs: ones(4) })).granted).toBe(3);
      const untilA = await s.store.pause(a, 60_000);
      expect((await s.acquire({ id: b, rules: [], costs: [1] })).granted, 'b granted while a is paused').toBe(
        1,
      );
      // Each id keeps its own pause: pausing b neither ends nor moves a's.
      const untilB = await s.store.pause(b, 30_000);
      expect(untilB, "b's pause ends before a's").toBeLessThan(untilA);
      const pausedA = await s.acquire({ id: a, rules: [], costs: [1] });
      expect(pausedA.blocked, 'a, once b is paused too').toBe('pause');
      expectMs(pausedA.pausedUntil!, untilA);
      const pausedB = await s.acquire({ id: b, rules: [], costs: [1] });
      expect(pausedB.blocked, 'b').toBe('pause');
      expectMs(pausedB.pausedUntil!, untilB);
      await s.store.resume(b);
      expect((await s.acquire({ id: b, rules: [], costs: [1] })).granted, 'b after resume(b)').toBe(1);
      const stillA = await s.acquire({ id: a, rules: [], costs: [1] });
      expect(stillA.blocked, 'a after resume(b)').toBe('pause');
      expectMs(stillA.pausedUntil!, untilA);
    });

    c.it('different rules (digests) on one id do not share state', async (s) => {
      const id = newId();
      const r1 = rule({ limit: 3600, interval: '1h', burst: 3 });
      const r2 = rule({ limit: 3601, interval: '1h', burst: 3 });
      const r3 = rule({ limit: 3600, interval: '1h', burst: 3, algorithm: 'gcra' });
      expect(r1.digest).not.toBe(r2.digest);
      expect((await s.acquire({ id, rules: [r1], costs: ones(4) })).granted).toBe(3);
      expect((await s.acquire({ id, rules: [r2], costs: ones(4) })).granted).toBe(3);
      expect((await s.acquire({ id, rules: [r3], costs: ones(4) })).granted).toBe(0); // same as r1
    });

    c.it('the same rule on the same id is one budget for every valve using the store', async (s) => {
      const id = newId();
      const valveA = [rule({ limit: 3600, interval: '1h', burst: 3 })];
      const valveB = [rule({ limit: 3600, interval: 3_600_000, burst: 3 })];
      expect((await s.acquire({ id, rules: valveA, costs: ones(2) })).granted).toBe(2);
      expect((await s.acquire({ id, rules: valveB, costs: ones(2) })).granted).toBe(1);
      expect((await s.acquire({ id, rules: valveA, costs: [1] })).granted).toBe(0);
    });

    c.it('a rule shared by two rule sets is spent by both', async (s) => {
      const id = newId();
      const shared = rule({ limit: 3, interval: '1h', algorithm: 'fixed-window' });
      const other = rule({ limit: 100, interval: '1h', algorithm: 'fixed-window' });
      expect((await s.acquire({ id, rules: [shared, other], costs: ones(2) })).granted).toBe(2);
      expect((await s.acquire({ id, rules: [shared], costs: ones(2) })).granted).toBe(1);
    });
  });

  if (c.shared)
    c.describe('two stores on one state (shared)', () => {
      c.itShared('a pause, a budget and leases set through one store hold in the other', async (s) => {
        const { store: one, other } = s;
        const id = newId();
        const until = await one.pause(id, 60_000);
        const paused = await acquireOn(other, { id, rules: [], costs: [1] });
        expect(paused.blocked, 'the other store, while the first paused the id').toBe('pause');
        expectMs(paused.pausedUntil!, until);
        await other.resume(id);
        expect(
          (await acquireOn(one, { id, rules: [], costs: [1] })).granted,
          'after resume() through the other',
        ).toBe(1);

        expect((await acquireOn(one, { id, rules: [slow3], costs: ones(2) })).granted).toBe(2);
        expect(
          (await acquireOn(other, { id, rules: [slow3], costs: ones(2) })).granted,
          'the other store, after the first spent 2 of 3',
        ).toBe(1);
        expect((await acquireOn(one, { id, rules: [slow3], costs: [1] })).granted).toBe(0);

        const lease = { limit: 2, ttl: 60_000 };
        const held = await acquireOn(one, { id, rules: [], costs: [1], lease });
        const mine = leaseOf(held, 0);
        const theirs = await acquireOn(other, { id, rules: [], costs: ones(2), lease });
        expect(theirs.granted, 'leases the other store grants while the first holds 1 of 2').toBe(1);
        expect(leaseOf(theirs, 0).fence, "the other store's fence").toBeGreaterThan(mine.fence);
        expect(
          await other.renew(id, [mine.token], 60_000),
          "renewing the first store's lease through the other",
        ).toEqual([true]);
        await other.release(id, [mine.token]);
        expect(await one.renew(id, [mine.token], 60_000), 'a lease released through the other store').toEqual(
          [false],
        );
        expect((await acquireOn(one, { id, rules: [], costs: ones(2), lease })).granted).toBe(1);
      });

      c.itShared(
        `${AT_ONCE} acquisitions at once through two stores grant what the rules allow, in total`,
        async (s) => {
          const id = newId();
          const leased = newId();
          const lease = { limit: 3, ttl: 60_000 };
          const stores = [s.store, s.other];
          const results = await Promise.all(
            Array.from({ length: AT_ONCE }, (_, i) =>
              acquireOn(stores[i % 2]!, { id, rules: [slow3], costs: [1] }),
            ),
          );
          const leases = await Promise.all(
            Array.from({ length: AT_ONCE }, (_, i) =>
              acquireOn(stores[i % 2]!, { id: leased, rules: [], costs: [1], lease }),
            ),
          );
          expect(
            results.reduce((sum, r) => sum + r.granted, 0),
            `jobs granted by ${AT_ONCE} concurrent calls through two stores under GCRA 3 per hour, burst 3`,
          ).toBe(3);
          const held = leases.flatMap((r) => r.leases ?? []);
          expect(
            held,
            `leases granted by ${AT_ONCE} concurrent calls through two stores under a limit of 3`,
          ).toHaveLength(3);
          expect(new Set(held.map((l) => l.token)).size, 'distinct tokens').toBe(3);
          expect(new Set(held.map((l) => l.fence)).size, 'distinct fences').toBe(3);
        },
      );
    });

  c.describe('rule sets and rule changes', () => {
    const fiveHourly = rule({ limit: 5, interval: '1h', algorithm: 'fixed-window' });

    c.it('records the rule set of an id and answers `recorded` when another set was recorded', async (s) => {
      const id = newId();
      const first = await s.acquire({ id, rules: [hourlyWindow], costs: [1], record: hourlyWindow.digest });
      expect(first.recorded).toBeUndefined();
      const same = await s.acquire({ id, rules: [hourlyWindow], costs: [1], record: hourlyWindow.digest });
      expect(same.recorded).toBeUndefined();
      const other = await s.acquire({ id, rules: [fiveHourly], costs: [1], record: fiveHourly.digest });
      expect(other.recorded).toEqual([hourlyWindow.digest]);
      // The latest set is the one recorded now.
      const back = await s.acquire({ id, rules: [hourlyWindow], costs: [1], record: hourlyWindow.digest });
      expect(back.recorded).toEqual([fiveHourly.digest]);
      // Without `record`, nothing is compared.
      expect((await s.acquire({ id, rules: [fiveHourly], costs: [1] })).recorded).toBeUndefined();
    });

    c.it('converts: a new rule counts what the previous rules prove was spent in its window', async (s) => {
      const id = newId();
      expect((await s.acquire({ id, rules: [hourlyWindow], costs: ones(3) })).granted).toBe(3);
      const changed = await s.acquire({
        id,
        rules: [fiveHourly],
        previous: [hourlyWindow],
        convert: true,
        costs: ones(5),
      });
      // 3 of fiveHourly's 5 are spent already, and hourlyWindow (still spent) has none left.
      expect(changed.granted).toBe(0);
      expect(changed.blocked).toBe('rate');
      // Once the old rule is dropped, the new one has 5 − 3 left in this window.
      expect((await s.acquire({ id, rules: [fiveHourly], costs: ones(5) })).granted).toBe(2);
    });

    c.it(
      'takes no source whose state counts grants only since the new window began (previousSince)',
      async (s) => {
        const threeSliding = rule({ limit: 3, interval: '1h', algorithm: 'sliding-window' });
        const fiveSliding = rule({ limit: 5, interval: '1h', algorithm: 'sliding-window' });
        // The same spend, converted twice: once from a state that has counted every grant,
        // once from one that counts only since a moment inside the new rule's hour (a rule a
        // change introduced then), and once from one whose conversion is not known.
        const left = async (since: (spentAt: number) => number | undefined) => {
          const id = newId();
          const spent = await s.acquire({ id, rules: [threeSliding], costs: ones(3) });
          expect(spent.granted).toBe(3);
          const at = since(spent.now);
          await s.acquire({
            id,
            rules: [fiveSliding],
            previous: [threeSliding],
            previousSince: at === undefined ? undefined : [at],
            convert: true,
            costs: ones(1),
          });
          return (await s.acquire({ id, rules: [fiveSliding], costs: ones(5) })).granted;
        };
        expect(await left(() => undefined), 'no previousSince: the old state counts').toBe(2);
        expect(await left(() => Number.NEGATIVE_INFINITY), 'previousSince -Infinity: the same').toBe(2);
        // Counting only since the first spend (inside the new rule's hour): it cannot tell what
        // the hour held before, so the new rule starts spent.
        expect(await left((t) => t), 'a source younger than the window').toBe(0);
        expect(await left(() => Number.POSITIVE_INFINITY), 'a source of unknown age').toBe(0);
      },
    );

    c.it(
      "spends the previous rules too, and a cost above a previous rule's largest does not fit (no error)",
      async (s) => {
        const id = newId();
        const big = rule({ limit: 10, interval: '1h', algorithm: 'fixed-window' });
        const r = await s.acquire({ id, rules: [big], previous: [hourlyWindow], costs: [2, 5] });
        expect(r.granted).toBe(1);
        expect(r.blocked).toBe('rate');
        expect((await s.acquire({ id, rules: [hourlyWindow], costs: ones(2) })).granted).toBe(1);
      },
    );
  });

  if (c.wakeUps)
    c.describe('wake-ups', () => {
      c.itWake(
        'subscribers hear pause, resume and release for their id only, until they unsubscribe',
        async (s) => {
          const id = newId();
          const other = newId();
          const events: WakeEvent[] = [];
          const foreign: WakeEvent[] = [];
          const subscribed = Date.now();
          const unsubscribeStore = s.store.subscribe!(id, (e) => events.push(e));
          // The case unsubscribes itself (twice) before it ends; when it fails before that, the
          // subscription ends after it all the same (a store may hold a timer or a connection).
          let unsubscribed = false;
          const unsubscribe = () => {
            unsubscribed = true;
            unsubscribeStore();
          };
          s.defer(() => {
            if (!unsubscribed) unsubscribeStore();
          });
          const unsubscribeOther = s.store.subscribe!(other, (e) => foreign.push(e));
          s.defer(unsubscribeOther);
          const heard = () => `(heard so far: ${JSON.stringify(events)})`;
          if (s.store.notifies === false) {
            await waitFor(
              () => s.store.notifies === true,
              "the store's `notifies` to turn true after subscribe() (it was false)",
              5000,
            );
          }
          // A subscription may take a moment to become active (e.g. SSUBSCRIBE on a cluster), and
          // wake-ups sent before that are lost (they are hints). Probe with resume() until one
          // arrives: 5 s from subscribing in all.
          while (!events.some((e) => e.type === 'resume') || !foreign.some((e) => e.type === 'resume')) {
            if (Date.now() > subscribed + 5000) {
              throw new Error(
                `no 'resume' wake-up arrived within 5 s of subscribing, resume() called every 20 ms (heard for the id: ${JSON.stringify(events)}, for a second id: ${JSON.stringify(foreign)})`,
              );
            }
            await s.store.resume(id);
            await s.store.resume(other);
            await sleep(20);
          }
          await sleep(30); // late duplicates of the probe
          events.length = 0;
          foreign.length = 0;

          const until = await s.store.pause(id, 60_000);
          await waitFor(
            () => events.length >= 1,
            () => `a 'pause' wake-up after pause(id) ${heard()}`,
          );
          expect(events[0]!.type, 'the wake-up after pause(id)').toBe('pause');
          expectMs((events[0] as { until: number }).until, until);

          await s.store.resume(id);
          await waitFor(
            () => events.length >= 2,
            () => `a 'resume' wake-up after resume(id) ${heard()}`,
          );
          expect(events[1], 'the wake-up after resume(id)').toEqual({ type: 'resume' });

          const r = await s.acquire({ id, rules: [], costs: [1], lease: { limit: 1, ttl: 60_000 } });
          await s.store.release(id, [leaseOf(r, 0).token]);
          await waitFor(
            () => events.length >= 3,
            () => `a 'release' wake-up after release(id) ${heard()}`,
          );
          expect(events[2], 'the wake-up after release(id)').toEqual({ type: 'release' });

          unsubscribe();
          unsubscribe(); // idempotent
          await s.store.pause(id, 1000);
          await sleep(30);
          expect(events, 'wake-ups heard, none after unsubscribing').toHaveLength(3);
          expect(foreign, 'wake-ups heard for a second id, subscribed on its own').toEqual([]);
        },
      );

      c.itWake(
        'two subscribers of one id both hear; unsubscribing one leaves the other; onStatus listening: true means delivered',
        async (s) => {
          const id = newId();
          const statusId = newId();
          // onStatus (where the store calls it): once it says listening, a wake-up sent then
          // arrives. Checked as soon as it says so, alongside the rest of the case.
          const statusHeard: WakeEvent[] = [];
          let statusCheck: Promise<unknown> | undefined;
          const onStatus = (status: WakeStatus) => {
            if (!status.listening || statusCheck !== undefined) return;
            statusCheck = (async () => {
              await sleep(0);
              await s.store.resume(statusId);
              await waitFor(
                () => statusHeard.some((e) => e.type === 'resume'),
                () =>
                  `a 'resume' wake-up after resume(id), sent once onStatus said { listening: true }: the store must say so only once it delivers the id's wake-ups (heard: ${JSON.stringify(statusHeard)})`,
                2000,
              );
            })().then(
              () => undefined,
              (err: unknown) => err ?? new Error('the onStatus check failed'),
            );
          };
          s.defer(s.store.subscribe!(statusId, (e) => statusHeard.push(e), onStatus));
          const first: WakeEvent[] = [];
          const second: WakeEvent[] = [];
          const subscribed = Date.now();
          const unsubscribeFirst = s.store.subscribe!(id, (e) => first.push(e));
          s.defer(unsubscribeFirst);
          s.defer(s.store.subscribe!(id, (e) => second.push(e)));
          const heard = () => `(first heard: ${JSON.stringify(first)}, second: ${JSON.stringify(second)})`;
          if (s.store.notifies === false) {
            await waitFor(
              () => s.store.notifies === true,
              "the store's `notifies` to turn true after subscribe() (it was false)",
              5000,
            );
          }
          while (!first.some((e) => e.type === 'resume') || !second.some((e) => e.type === 'resume')) {
            if (Date.now() > subscribed + 5000) {
              throw new Error(
                `a 'resume' wake-up did not reach both of two subscribers of one id within 5 s of subscribing, resume() called every 20 ms ${heard()}: every subscriber of an id must hear its wake-ups (a second subscribe() must not replace the first)`,
              );
            }
            await s.store.resume(id);
            await sleep(20);
          }
          await sleep(30); // late duplicates of the probe
          first.length = 0;
          second.length = 0;
          unsubscribeFirst();
          await s.store.pause(id, 1000);
          await waitFor(
            () => second.some((e) => e.type === 'pause'),
            () =>
              `a 'pause' wake-up for the second subscriber of an id after the first unsubscribed: unsubscribing one must leave the others subscribed ${heard()}`,
            2000,
          );
          await sleep(30);
          expect(first, 'wake-ups heard by the first subscriber after it unsubscribed').toEqual([]);
          const failed = await statusCheck;
          if (failed !== undefined) throw failed;
        },
      );

      c.itWake(
        'listening(id), where present, turns true once wake-ups for the id are delivered',
        async (s) => {
          if (typeof s.store.listening !== 'function') return;
          const id = newId();
          expect(s.store.listening(id), 'listening(id) before subscribe()').toBe(false);
          const events: WakeEvent[] = [];
          const unsubscribe = s.store.subscribe!(id, (e) => events.push(e));
          s.defer(unsubscribe);
          await waitFor(() => s.store.listening!(id), 'listening(id) to turn true after subscribe()', 5000);
          // Once it says so, the next wake-up arrives: no probing with resume() needed.
          await s.store.pause(id, 1000);
          await waitFor(
            () => events.some((e) => e.type === 'pause'),
            () =>
              `a 'pause' wake-up after pause(id), listening(id) being true (heard so far: ${JSON.stringify(events)})`,
            2000,
          );
          unsubscribe();
          expect(s.store.listening(id), 'listening(id) after unsubscribing').toBe(false);
        },
      );
    });
}
