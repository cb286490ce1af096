/**
 * A wake-up check shared by the subscriber tests: another valve pauses the id, a job is queued
 * behind that pause, and once the waiting valve listens for the id's wake-ups the other valve
 * resumes. Returns how long after the resume the job started (ms).
 */
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function resumeToStart(
  remote: { pause(ms: number): Promise<unknown>; resume(): Promise<unknown> },
  run: (job: () => void) => Promise<unknown>,
  listening: () => boolean,
  listenWithinMs = 20_000,
): Promise<number> {
  await remote.pause(60_000);
  let startedAt = 0;
  const waiting = run(() => {
    startedAt = Date.now();
  });
  for (const end = Date.now() + listenWithinMs; Date.now() < end && !listening(); ) await sleep(50);
  await sleep(50);
  const resumedAt = Date.now();
  await remote.resume();
  await waiting;
  return startedAt - resumedAt;
}
