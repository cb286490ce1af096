/**
 * Conformance cases for the fleet window (`Store.windowSend` / `Store.windowReport`, see
 * docs/provider-feedback.md, "Several processes: the fleet window"): what wrapFetch relies on when
 * a store keeps the provider window the id's processes learnt from their answers. Registered
 * unless `window: false`; a store with neither method passes them with nothing to check.
 *
 * Without a controlled clock every reset is an hour and every wait is checked within a second of
 * it, so real time passing does not matter; with one, the waits are exact to the µs.
 */
import { expect } from './expect.js';
import { afterHint } from './realtime.js';
import { type CaseRegistry, expectMs, type WindowCaseContext } from './suite.js';

const HOUR = 3_600_000;

/** A wait (ms) the store gave for a reset `expected` ms away, a few ms (of real time) ago at most. */
function expectAbout(actual: number, expected: number, label: string): void {
  expect(actual, label).toBeLessThanOrEqual(expected);
  expect(actual, label).toBeGreaterThan(expected - 1000);
}

/**
 * A new id whose first ticket (a probe: the fleet knows nothing of the provider yet) was answered
 * without a window, so that every ticket goes until an answer describes one.
 */
async function openId(s: WindowCaseContext, newId: () => string): Promise<string> {
  const id = newId();
  const first = await s.send(id);
  expect(first, "a new id's first ticket").toMatchObject({ wait: 0, probe: true });
  expect(first.seq, "the first ticket's send number").toBeGreaterThan(0);
  expect(await s.report(id, first.seq, -1, 0), 'an answer with no window: no wait').toBe(0);
  return id;
}

/** `n` tickets in a row on `id`, each checked to go at once. */
async function sendAll(s: WindowCaseContext, id: string, n: number): Promise<number[]> {
  const seqs: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = await s.send(id);
    expect(t, `ticket ${i + 1}`).toMatchObject({ wait: 0, probe: false });
    expect(t.seq, `ticket ${i + 1}'s send number`).toBeGreaterThan(0);
    seqs.push(t.seq);
  }
  return seqs;
}

export function windowCases(c: CaseRegistry): void {
  const { newId } = c;

  // No empty describe block when the cases are not registered (`window: false`).
  if (!c.window) return;
  c.describe('fleet window (windowSend / windowReport)', () => {
    c.itWindow("a new id's first ticket is a probe: the others wait for its answer", async (s) => {
      const id = newId();
      const first = await s.send(id, HOUR);
      expect(first, 'the first ticket').toMatchObject({ wait: 0, probe: true });
      const held = await s.send(id, HOUR);
      expect(held, 'a ticket while it is out').toMatchObject({ seq: 0, probe: true });
      expectAbout(held.wait, HOUR, 'the wait: at most its time to live');
      // Its answer opens the window with its count: that many more go.
      expect(await s.report(id, first.seq, 2, HOUR), 'budget left: no wait').toBe(0);
      await sendAll(s, id, 2);
      expect((await s.send(id)).seq, 'the ticket past the count').toBe(0);
    });

    c.itWindow('without a known window tickets go at once, numbered one after another', async (s) => {
      const seqs = await sendAll(s, await openId(s, newId), 4);
      // The budget counts the sends after an answer by their numbers: no gaps, no repeats.
      expect(seqs.slice(1).map((n, i) => n - seqs[i]!)).toEqual([1, 1, 1]);
    });

    c.itWindow('an answer with no window (remaining −1) spends nothing', async (s) => {
      const id = await openId(s, newId);
      const [a] = await sendAll(s, id, 1);
      expect(await s.report(id, a!, -1, 0), 'the wait it returns').toBe(0);
      await sendAll(s, id, 3);
    });

    c.itWindow(
      'the budget left is the lowest remaining count less the tickets still unanswered',
      async (s) => {
        const id = await openId(s, newId);
        const [a] = await sendAll(s, id, 3);
        // remaining 3 when answered, 2 sent after it and unanswered: 1 left.
        expect(await s.report(id, a!, 3, HOUR), 'budget left: no wait').toBe(0);
        await sendAll(s, id, 1);
        const refused = await s.send(id);
        expect(refused, 'the ticket past the budget').toMatchObject({ seq: 0, probe: false });
        expectAbout(refused.wait, HOUR, "the refusal's wait: until the reset");
      },
    );

    c.itWindow(
      'a ticket sent later but counted earlier (another connection) is not counted twice',
      async (s) => {
        const id = await openId(s, newId);
        const [a, b, d] = await sendAll(s, id, 3);
        // The provider counted b, a, d: b's answer says 9 left, a's 8, d's 7.
        expect(await s.report(id, b!, 9, HOUR), 'budget left').toBe(0);
        expect(await s.report(id, a!, 8, HOUR), 'budget left').toBe(0);
        expect(await s.report(id, d!, 7, HOUR), 'budget left').toBe(0);
        // Nothing in flight: 7 left (counting b twice would leave 6).
        await sendAll(s, id, 7);
        expect((await s.send(id)).seq, 'the ticket past the 7').toBe(0);
      },
    );

    c.itWindow(
      'budget the count shows but requests in flight may take: tickets refused, no wait until the count is spent',
      async (s) => {
        const id = await openId(s, newId);
        const [a, b, d] = await sendAll(s, id, 3);
        // a: 2 left, b and d in flight may take them.
        expect(await s.report(id, a!, 2, HOUR), 'the count shows room: no wait').toBe(0);
        const refused = await s.send(id);
        expect(refused, 'a ticket while b and d are out').toMatchObject({ seq: 0, probe: false });
        expect(await s.report(id, d!, 1, HOUR), 'the count shows room: no wait').toBe(0);
        expectAbout(await s.report(id, b!, 0, HOUR), HOUR, 'the count is spent: the wait until the reset');
      },
    );

    c.itWindow('a spent window refuses every ticket until its reset; the report says how long', async (s) => {
      const id = await openId(s, newId);
      const [a] = await sendAll(s, id, 1);
      expectAbout(await s.report(id, a!, 0, HOUR), HOUR, 'the wait the report returns');
      for (let i = 0; i < 2; i++) {
        const t = await s.send(id);
        expect(t, 'a ticket in the spent window').toMatchObject({ seq: 0, probe: false });
        expectAbout(t.wait, HOUR, "the refusal's wait");
      }
    });

    c.itWindow("the window's tightest reset holds: a later, looser bound does not move it", async (s) => {
      const id = await openId(s, newId);
      const [a, b, d] = await sendAll(s, id, 3);
      expect(await s.report(id, a!, 10, HOUR), 'budget left').toBe(0);
      // The same window (a lower count), a tighter bound: it is the window's reset now.
      expect(await s.report(id, b!, 5, HOUR / 2), 'budget left').toBe(0);
      // Spent, with a looser bound (within a second and a half of the known one): the wait is
      // still the tightest one.
      expectAbout(await s.report(id, d!, 0, HOUR / 2 + 1500), HOUR / 2, 'the wait of the spent window');
      expectAbout((await s.send(id)).wait, HOUR / 2, "the refusal's wait");
    });

    c.itWindow(
      "a reset more than 2 s past the window's bound is another limit's window: the lower count decides",
      async (s) => {
        const id = await openId(s, newId);
        const [a, b, d] = await sendAll(s, id, 3);
        // A burst limit: 3 left, reset within half an hour.
        expect(await s.report(id, a!, 3, HOUR / 2), 'budget left').toBe(0);
        // A daily limit beside it, not lower: the burst still binds first.
        expect(await s.report(id, b!, 5, 24 * HOUR), 'budget left').toBe(0);
        // The daily limit spent: its reset, not the burst's.
        expectAbout(await s.report(id, d!, 0, 24 * HOUR), 24 * HOUR, 'the wait of the spent daily window');
        expectAbout((await s.send(id)).wait, 24 * HOUR, "the refusal's wait");
      },
    );

    c.itWindow('each id has its own window', async (s) => {
      const spent = await openId(s, newId);
      const other = await openId(s, newId);
      const [a] = await sendAll(s, spent, 1);
      await s.report(spent, a!, 0, HOUR);
      expect((await s.send(spent)).seq, 'the spent id').toBe(0);
      await sendAll(s, other, 2);
    });

    c.itWindow(
      'a spent window of a 100 ms reset reopens; a probe never answered stops holding after its 50 ms time to live (real time)',
      async (s) => {
        const id = await openId(s, newId);
        const [a] = await sendAll(s, id, 1);
        const wait = await s.report(id, a!, 0, 100);
        expect(wait, 'the wait the report returns for a reset 100 ms away').toBeGreaterThan(0);
        expect(wait, 'the wait the report returns for a reset 100 ms away').toBeLessThanOrEqual(100);
        const ticketLeft = (t: { seq: number; wait: number }) => (t.seq > 0 ? undefined : t.wait);
        const probe = await afterHint(s, wait, () => s.send(id, 50), ticketLeft);
        expect(
          probe.seq,
          `the first ticket after a spent window's reset (the report's wait, ${wait} ms, waited out): the window must reopen (got ${JSON.stringify(probe)})`,
        ).toBeGreaterThan(0);
        expect(probe.probe, 'the first ticket after the reset is a probe').toBe(true);
        const held = await s.send(id, 50);
        // On a busy machine the probe may have expired already: then there is nothing to wait for.
        if (held.seq !== 0) return;
        expect(held.probe, 'a ticket while the probe is out').toBe(true);
        expect(held.wait, "its wait: at most the probe's time to live").toBeLessThanOrEqual(50);
        const after = await afterHint(s, held.wait, () => s.send(id, 50), ticketLeft);
        expect(
          after.seq,
          `a ticket after an unanswered probe's time to live (50 ms) ran out: the probe must stop holding the others (got ${JSON.stringify(after)})`,
        ).toBeGreaterThan(0);
      },
    );

    c.itWindowClock('exact waits: the report and the refusals count down to the reset', async (s) => {
      const id = await openId(s, newId);
      const [a] = await sendAll(s, id, 1);
      expectMs(await s.report(id, a!, 0, 250), 250);
      await s.advance(100);
      expectMs((await s.send(id)).wait, 150);
      await s.advance(149.999);
      expectMs((await s.send(id)).wait, 0.001);
    });

    c.itWindowClock(
      "after a spent window's reset one probe goes alone; its answer lets the others go",
      async (s) => {
        const id = await openId(s, newId);
        const [a] = await sendAll(s, id, 1);
        await s.report(id, a!, 0, 100);
        await s.advance(100);
        const probe = await s.send(id, 1000);
        expect(probe, 'the first ticket after the reset').toMatchObject({ wait: 0, probe: true });
        expect(probe.seq).toBeGreaterThan(a!);
        await s.advance(10);
        const held = await s.send(id, 1000);
        expect(held, 'a ticket while the probe is out').toMatchObject({ seq: 0, probe: true });
        // It waits for the probe's answer at most until the probe's time to live runs out.
        expect(held.wait).toBeGreaterThan(0);
        expect(held.wait).toBeLessThanOrEqual(990);
        // The probe's answer opens the next window with its own count.
        expect(await s.report(id, probe.seq, 5, 1000), 'the next window has budget').toBe(0);
        await sendAll(s, id, 2);
      },
    );

    c.itWindowClock('a probe never answered stops holding the others after its time to live', async (s) => {
      const id = await openId(s, newId);
      const [a] = await sendAll(s, id, 1);
      await s.report(id, a!, 0, 100);
      await s.advance(100);
      expect((await s.send(id, 500)).probe).toBe(true);
      await s.advance(499);
      expect(await s.send(id, 500), 'a ticket 1 ms before the probe expires').toMatchObject({
        seq: 0,
        probe: true,
      });
      await s.advance(1);
      await sendAll(s, id, 2);
    });

    c.itWindowClock(
      "answers to requests sent before the next window's first ticket are not counted in it",
      async (s) => {
        const id = await openId(s, newId);
        const [a, b] = await sendAll(s, id, 2);
        await s.report(id, a!, 0, 100);
        await s.advance(100);
        const probe = await s.send(id);
        expect(probe.probe).toBe(true);
        // b was sent in the old window: its late answer (remaining 0) spends nothing of the next.
        expect(await s.report(id, b!, 0, 1000), "an old window's answer").toBe(0);
        expect(await s.report(id, probe.seq, 5, 1000)).toBe(0);
        await sendAll(s, id, 5);
        expect((await s.send(id)).seq, 'the ticket past the next window’s 5').toBe(0);
      },
    );

    c.itWindowClock('a window that was not spent is followed by no probe', async (s) => {
      const id = await openId(s, newId);
      const [a] = await sendAll(s, id, 1);
      expect(await s.report(id, a!, 5, 100)).toBe(0);
      await s.advance(100);
      // Its reset passed with budget left: the next window is simply unknown, every ticket goes.
      await sendAll(s, id, 3);
    });
  });
}
