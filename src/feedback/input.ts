import type { HeaderBag, HeaderMap } from './types.js';

/**
 * Reduces a fetch `Response` (global or undici), a `Headers`, `{ status, headers }`
 * (also `{ statusCode, headers }` as Node's IncomingMessage and got use), or a bare
 * header object (plain object with any-case keys, arrays for repeated headers,
 * Node's IncomingHttpHeaders, a Map) to a status and a header map. An object is a
 * response when it has a `headers` key or a numeric `status` / `statusCode`.
 * Throws TypeError only when `input` is not an object at all.
 */
export function toHeaderBag(input: unknown): HeaderBag {
  if (input === null || (typeof input !== 'object' && typeof input !== 'function')) {
    throw new TypeError(
      `Expected a Response, a Headers, or { status, headers }, got ${input === null ? 'null' : typeof input}`,
    );
  }
  const headers: HeaderMap = new Map();
  if (isHeadersLike(input)) {
    addAll(headers, input);
    return { status: undefined, headers };
  }
  const record = input as Record<string, unknown>;
  // A `status` or `statusCode` that is not a number is a header of a bare header object (a
  // CGI-style `Status: 429 Too Many Requests`), not a response's status.
  const responseLike = 'headers' in record || isCode(record.status) || isCode(record.statusCode);
  if (!responseLike) {
    addAll(headers, input);
    return { status: undefined, headers };
  }
  addAll(headers, record.headers);
  return { status: toStatus(record.status ?? record.statusCode), headers };
}

function isHeadersLike(value: unknown): value is { forEach(cb: (v: unknown, k: unknown) => void): void } {
  const v = value as { forEach?: unknown; get?: unknown };
  return typeof v.forEach === 'function' && typeof v.get === 'function';
}

function isCode(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value);
}

function toStatus(value: unknown): number | undefined {
  const n = typeof value === 'string' && /^\s*\d{3}\s*$/.test(value) ? Number(value) : value;
  return typeof n === 'number' && Number.isInteger(n) && n >= 100 && n <= 599 ? n : undefined;
}

function addAll(map: HeaderMap, headers: unknown): void {
  if (headers === null || headers === undefined || typeof headers !== 'object') return;
  if (isHeadersLike(headers)) {
    headers.forEach((value, key) => {
      add(map, key, value);
    });
    return;
  }
  for (const key of Object.keys(headers)) add(map, key, (headers as Record<string, unknown>)[key]);
}

function add(map: HeaderMap, key: unknown, value: unknown): void {
  if (value === undefined || value === null) return;
  const name = String(key).trim().toLowerCase();
  if (name === '') return;
  let list = map.get(name);
  if (!list) {
    list = [];
    map.set(name, list);
  }
  if (Array.isArray(value)) {
    for (const v of value) if (v !== undefined && v !== null) list.push(String(v));
  } else {
    list.push(String(value));
  }
}
