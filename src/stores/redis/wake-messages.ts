/** The messages on a wake channel (see subscriber.ts): "pause:<until ms>", "resume", "release", "probe:<random>". */
import type { WakeEvent } from '../store.js';

/** A message as a string (clients may hand over a Buffer). */
export function text(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  return String(value);
}

/** Parses a wake message; undefined for anything else. */
export function parseWake(message: string): WakeEvent | undefined {
  if (message === 'resume') return { type: 'resume' };
  if (message === 'release') return { type: 'release' };
  if (message.startsWith('pause:')) {
    const until = Number(message.slice(6));
    if (Number.isFinite(until)) return { type: 'pause', until };
  }
  return undefined;
}
