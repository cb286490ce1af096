/**
 * The first case with `controlledClock: true`: `advance(ms)` moves the clock the store reads by
 * exactly `ms`, and nothing else moves it. Every exact-time case rests on this; when it fails,
 * this case names the cause (e.g. `advance` wired to another clock than the store's).
 */
import { expect } from './expect.js';
import type { CaseRegistry } from './suite.js';

export function clockCases(c: CaseRegistry): void {
  if (!c.controlledClock) return;
  const { newId } = c;
  c.describe('controlled clock', () => {
    c.itClock("advance(1000) moves the store's clock (AcquireResult.now) by exactly 1000 ms", async (s) => {
      const id = newId();
      const first = await s.acquire({ id, rules: [], costs: [1] });
      const still = await s.acquire({ id, rules: [], costs: [1] });
      const us = (ms: number) => Math.round(ms * 1000);
      expect(
        us(still.now - first.now),
        `the store's clock moved by ${still.now - first.now} ms between two calls without advance(): with \`controlledClock: true\` the store must read time only from the clock advance() moves; in µs`,
      ).toBe(0);
      await s.advance(1000);
      const later = await s.acquire({ id, rules: [], costs: [1] });
      expect(
        us(later.now - still.now),
        `the store's clock moved by ${later.now - still.now} ms over advance(1000): advance() must move the clock the store reads (is it wired to another clock?); in µs`,
      ).toBe(1_000_000);
    });
  });
}
