/**
 * The smallest useful valve: 5 jobs per second, evenly spaced, shared by every caller in
 * this process. Run it with `npx tsx examples/basic.ts`.
 */
import { createValve, isValveError } from '../src/index.js';

const valve = createValve({
  id: 'example:token-1',
  rules: { limit: 5, interval: '1s' }, // one start every 200 ms
  maxWait: '3s', // a job that cannot start within 3 s rejects with MAX_WAIT
});

const t0 = performance.now();
const job = (name: string) => () => {
  console.log(`${((performance.now() - t0) / 1000).toFixed(2)} s  ${name}`);
  return name;
};

// Two callers queue 10 jobs each at once; the valve starts them 200 ms apart, in call
// order, except that the urgent one goes first.
const calls = [];
for (let i = 0; i < 10; i++) calls.push(valve.run(job(`a${i}`)), valve.run(job(`b${i}`)));
calls.push(valve.run(job('urgent'), { priority: 10 }));

const results = await Promise.allSettled(calls);
const late = results.filter((r) => r.status === 'rejected' && isValveError(r.reason, 'MAX_WAIT'));
console.log(`${results.length - late.length} started, ${late.length} gave up after maxWait (MAX_WAIT)`);
await valve.close();
