import { describe, expect, it, vi } from 'vitest';
import { createValve } from '../../src/valve.js';

describe('vi fake timers', () => {
  it('runs on the default clock under vi.useFakeTimers() (valve created after install)', async () => {
    vi.useFakeTimers();
    try {
      const valve = createValve({ id: 'ft', rules: { limit: 1, interval: 1000 } });
      const starts: number[] = [];
      const t0 = Date.now();
      const all = [1, 2, 3].map(() => valve.run(() => starts.push(Date.now() - t0)));
      await vi.advanceTimersByTimeAsync(2000);
      await Promise.all(all);
      expect(starts).toEqual([0, 1000, 2000]);
    } finally {
      vi.useRealTimers();
    }
  });
});
