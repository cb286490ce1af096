/**
 * Tracks a promise's settlement: `done` and `value` once it fulfils. A rejection (a job closed
 * by the test's cleanup) is ignored and leaves `done` false, so a test expecting the value fails.
 */
export function track<T>(p: Promise<T>): { done: boolean; value?: T } {
  const t: { done: boolean; value?: T } = { done: false };
  p.then(
    (value) => {
      t.done = true;
      t.value = value;
    },
    () => {},
  );
  return t;
}
