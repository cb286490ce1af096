/**
 * The 'pause' events and stats().pausedBy of a valve's own pauses on a store that answers like a
 * network store: its own pause's wake-up can come before the write's answer, answers can come
 * out of order, and a write inside a longer pause applies nothing.
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/stores/memory.js';
import { createValve } from '../../src/valve.js';
import { spyStore } from '../helpers/spy-store.js';
import { FakeClock, flushMicrotasks, track } from './harness.js';

/** A valve on a store that decides each pause 5 ms after the call and answers 5 ms later, with a job queued (so subscribed). */
async function subscribedValve(id: string) {
  const clock = new FakeClock();
  const inner = memoryStore({ clock });
  const store = spyStore(inner, clock);
  store.timing.pause = { delay: 10, decideAt: 5 };
  const valve = createValve({ id, clock, store, rules: { limit: 1, interval: '1h' } });
  const events: string[] = [];
  valve.on('pause', (e) => events.push(`pause ${e.source}`));
  valve.on('resume', (e) => events.push(`resume ${e.source}`));
  await valve.run(() => 1); // spends the budget
  const queued = track(valve.run(() => 2)); // waits an hour for the rule: subscribed
  await flushMicrotasks();
  return { clock, inner, store, valve, events, queued };
}

describe("a valve's own pause, its wake-up coming before the write's answer", () => {
  it("pause(): stats().pausedBy says 'manual', not 'remote'", async () => {
    // The wake-up was learnt as another process's pause and its cause kept: 'remote'.
    const { clock, valve, events, queued } = await subscribedValve('own');
    const t0 = clock.now();
    const pausing = valve.pause(60_000);
    await clock.tickAsync(20);
    await pausing;
    expect(events).toEqual(['pause manual']);
    expect(valve.stats().pausedBy).toEqual({ source: 'manual', header: undefined, model: undefined });
    expect(valve.stats().pausedUntil).toBe(t0 + 5 + 60_000);
    await valve.close();
    expect(queued.done).toBe(true);
  });

  it('observe(): stats().pausedBy keeps the header and model', async () => {
    const { clock, valve, events, queued } = await subscribedValve('own-observe');
    valve.observe({ status: 429, headers: { 'retry-after': '30' } });
    await clock.tickAsync(20);
    expect(events).toEqual(['pause retry-after']);
    expect(valve.stats().pausedBy).toEqual({ source: 'retry-after', header: 'retry-after', model: 'wait' });
    await valve.close();
    expect(queued.done).toBe(true);
  });

  it('two writes in flight: the later end names the cause, and neither is remote', async () => {
    const { clock, valve, events, queued } = await subscribedValve('own-two');
    const pausing = valve.pause(60_000);
    valve.observe({ status: 429, headers: { 'retry-after': '120' } });
    await clock.tickAsync(20);
    await pausing;
    expect(events).toEqual(['pause manual', 'pause retry-after']);
    expect(valve.stats().pausedBy).toMatchObject({ source: 'retry-after', header: 'retry-after' });
    await valve.close();
    expect(queued.done).toBe(true);
  });

  it("another process's longer pause announced while the write is in flight is not taken from the wake-up", async () => {
    const { clock, inner, valve, events, queued } = await subscribedValve('own-remote');
    const other = createValve({ id: 'own-remote', clock, store: inner });
    const t0 = clock.now();
    const pausing = valve.pause(60_000);
    await clock.tickAsync(7); // this valve's write decided at 5 ms, its answer comes at 10 ms
    await other.pause(120_000);
    await clock.tickAsync(13);
    await pausing;
    // A cue only: the known pause holds the queue anyway (which waits an hour on its rule), so
    // the store is not asked; its own pause is not taken for the other's, nor the other's end cached.
    expect(events).toEqual(['pause manual']);
    expect(valve.stats().pausedBy?.source).toBe('manual');
    expect(valve.stats().pausedUntil).toBe(t0 + 5 + 60_000);
    await valve.close();
    expect(queued.done).toBe(true);
  });
});

describe("a 'pause' event is no later than its 'resume'", () => {
  it("resume() answered before the pause write: no 'pause' after the 'resume'", async () => {
    // The events were 'resume' then 'pause': a listener thought the valve paused, it was not.
    const clock = new FakeClock();
    const store = spyStore(memoryStore({ clock }), clock);
    store.timing.pause = { delay: 30 };
    store.timing.resume = { delay: 10 };
    const valve = createValve({ id: 'order', clock, store });
    const events: string[] = [];
    valve.on('pause', (e) => events.push(`pause ${e.source}`));
    valve.on('resume', (e) => events.push(`resume ${e.source}`));
    const pausing = valve.pause(60_000);
    await clock.tickAsync(1);
    const resuming = valve.resume();
    await clock.tickAsync(50);
    await pausing;
    await resuming;
    expect(events).toEqual(['resume manual']);
    expect(valve.stats().pausedUntil).toBeNull();
    // The next pause is announced again.
    const next = valve.pause(1000);
    await clock.tickAsync(40);
    await next;
    expect(events).toEqual(['resume manual', 'pause manual']);
    await valve.close();
  });
});

describe("'pause' events only for pauses applied or extended", () => {
  it('a shorter write answered after resume() was called, before its answer: no second event', async () => {
    const clock = new FakeClock();
    const store = spyStore(memoryStore({ clock }), clock);
    store.timing.pause = { delay: 10 };
    store.timing.resume = { delay: 20 };
    const valve = createValve({ id: 'shorter-resumed', clock, store });
    const events: string[] = [];
    valve.on('pause', (e) => events.push(`pause ${e.source}`));
    valve.on('resume', (e) => events.push(`resume ${e.source}`));
    const first = valve.pause(60_000);
    await clock.tickAsync(10);
    await first;
    const shorter = valve.pause(1_000);
    await clock.tickAsync(1);
    const resuming = valve.resume();
    await clock.tickAsync(30);
    await shorter;
    await resuming;
    expect(events).toEqual(['pause manual', 'resume manual']);
    await valve.close();
  });

  it('a shorter pause() or a 429 inside a longer pause emits nothing; a longer one does', async () => {
    // Every write answered emitted 'pause', with the same `until`: valve.pauses counted 3.
    const clock = new FakeClock();
    const valve = createValve({ id: 'inside', clock });
    const untils: number[] = [];
    valve.on('pause', (e) => untils.push(e.until));
    const t0 = clock.now();
    await valve.pause(60_000);
    await valve.pause(1_000);
    valve.observe({ status: 429, headers: { 'retry-after': '5' } });
    await clock.tickAsync(10);
    expect(untils).toEqual([t0 + 60_000]);
    expect(valve.stats().pausedBy?.source).toBe('manual');
    await valve.pause(120_000);
    expect(untils).toEqual([t0 + 60_000, clock.now() + 120_000]);
    await valve.close();
  });

  it('the same on a store that answers later (the wake-ups of the writes that applied nothing)', async () => {
    const { clock, valve, events, queued } = await subscribedValve('inside-async');
    const first = valve.pause(60_000);
    await clock.tickAsync(20);
    await first;
    const second = valve.pause(1_000);
    valve.observe({ status: 429, headers: { 'retry-after': '5' } });
    await clock.tickAsync(20);
    await second;
    expect(events).toEqual(['pause manual']);
    expect(valve.stats().pausedBy?.source).toBe('manual');
    await valve.close();
    expect(queued.done).toBe(true);
  });
});

/** A valve whose store answers pause() and resume() only when the test says (each applied at once), another valve of its id, and a job queued (so subscribed). */
async function manualValve(id: string) {
  const clock = new FakeClock();
  const inner = memoryStore({ clock });
  const store = spyStore(inner, clock);
  store.timing.pause = 'manual';
  store.timing.resume = 'manual';
  const valve = createValve({ id, clock, store, rules: { limit: 1, interval: '1h' } });
  const other = createValve({ id, clock, store: inner, rules: { limit: 1, interval: '1h' } });
  const events: string[] = [];
  valve.on('pause', (e) => events.push(`pause ${e.until - clock.now()} ${e.source}`));
  valve.on('resume', (e) => events.push(`resume ${e.source}`));
  await valve.run(() => 1);
  const queued = track(valve.run(() => 2));
  await flushMicrotasks();
  const answerNext = () => store.pending.shift()!;
  const done = async () => {
    for (const p of store.pending.splice(0)) p.resolve();
    await flushMicrotasks();
    await valve.close();
    await other.close();
    expect(queued.done).toBe(true);
  };
  return { clock, valve, other, events, answerNext, done };
}

describe('a pause learnt while an own write is in flight, and own writes answered late', () => {
  it("after resume(), another process's pause heard before the write's answer: stats().pausedBy is 'remote'", async () => {
    // pausedUntil was set and pausedBy null until the write answered (valve/otel: not paused).
    const { valve, other, answerNext, done } = await manualValve('inflight-resumed');
    valve.observe({ status: 429, headers: { 'retry-after': '1' } }); // write in flight
    void valve.resume().catch(() => {});
    await flushMicrotasks();
    await other.pause(120_000);
    await flushMicrotasks();
    // The wake-up is a cue: the store is asked once the write and the resume answered.
    expect(valve.stats().pausedUntil).toBeNull();
    answerNext().resolve(); // the write
    answerNext().resolve(); // the resume
    await flushMicrotasks();
    expect(valve.stats().pausedUntil).not.toBeNull();
    expect(valve.stats().pausedBy).toEqual({ source: 'remote', header: undefined, model: undefined });
    await done();
  });

  it("another process's longer pause announced while an own shorter write is in flight: not taken from the wake-up", async () => {
    const { valve, other, events, answerNext, done } = await manualValve('inflight-longer');
    void valve.pause(1000);
    await flushMicrotasks();
    await other.pause(120_000);
    await flushMicrotasks();
    // A cue only: the known pause holds the queue anyway, so nothing is asked or cached from it.
    expect(valve.stats().pausedBy?.source).toBe('manual');
    answerNext().resolve();
    await flushMicrotasks();
    expect(valve.stats().pausedBy?.source).toBe('manual');
    expect(events).toEqual(['pause 1000 manual']);
    await done();
  });

  it("two own writes, resume() after the first answered, its wake-up before the second's answer: one 'pause'", async () => {
    const { valve, events, answerNext, done } = await manualValve('dup');
    const a = valve.pause(1000);
    const b = valve.pause(1000);
    answerNext().resolve();
    await a;
    const r = valve.resume();
    await flushMicrotasks();
    answerNext().resolve(); // the second pause write
    await b;
    answerNext().resolve(); // resume
    await r;
    expect(events).toEqual(['pause 1000 manual', 'resume manual']);
    await done();
  });

  it("an own write applied (its wake-up came) whose answer failed: no 'remote' pause is announced for it", async () => {
    const { valve, events, answerNext, done } = await manualValve('lost-answer');
    const p = valve.pause(1000).catch(() => 'rejected');
    await flushMicrotasks();
    answerNext().reject(new Error('timeout'));
    expect(await p).toBe('rejected');
    // The wake-up is only a cue, and the held pause keeps the store from being asked: pause()
    // rejected, and nothing is announced (as for any write whose answer failed).
    expect(events).toEqual([]);
    expect(valve.stats().pausedBy?.source).toBe('manual');
    await done();
  });
});
