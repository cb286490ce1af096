// The Store conformance suite under node:test. Run with
// `node --test examples/store-contract/node-test.mjs` after `npm run build` (it imports the
// package by its name, as your project will; the folder's other file is for vitest).
// #region node-test
import { describe, it } from 'node:test';
import { memoryStore } from 'valve';
import { storeContract } from 'valve/testing';

// node:test has no timeout by default: give each case 10 s (the suite's own deadlines, 5 s
// per store call and 9 s per case, fail a store that hangs first, and run its cleanup).
const test = (name, body) => it(name, { timeout: 10_000 }, body);

// Put your own store here. makeStore runs once per case; the cases use fresh random ids,
// so every store may share one server.
storeContract('memory store', () => ({ store: memoryStore() }), { describe, it: test });
// #endregion node-test

// #region controlled-clock
// With a clock you control, the suite also checks exact timing (retry hints to the µs,
// pause ends, lease expiry). The store must read time only from that clock.
function manualClock() {
  let now = Date.now();
  let timers = [];
  return {
    now: () => now,
    setTimeout: (fn, ms) => {
      const timer = { at: now + ms, fn };
      timers.push(timer);
      return timer;
    },
    clearTimeout: (timer) => {
      timers = timers.filter((t) => t !== timer);
    },
    advance(ms) {
      now += ms;
      const due = timers.filter((t) => t.at <= now);
      timers = timers.filter((t) => t.at > now);
      for (const t of due) t.fn();
    },
  };
}

storeContract(
  'memory store on a controlled clock',
  () => {
    const clock = manualClock();
    return { store: memoryStore({ clock }), advance: (ms) => clock.advance(ms) };
  },
  { describe, it: test, controlledClock: true },
);
// #endregion controlled-clock
