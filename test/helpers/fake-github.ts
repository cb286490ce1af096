/**
 * A fake GitHub API (node:http on loopback, port 0) for the Octokit integration's tests and bench:
 * primary and secondary limits per token answered with GitHub's documented headers and bodies.
 *
 * - Primary limit per token and resource (`core`, `search`, `graphql`): a window of `windowMs`
 *   opened by the first request, as GitHub's; `x-ratelimit-reset` is its end in epoch seconds,
 *   rounded up (GitHub sends whole seconds). Every answer carries `x-ratelimit-limit/-remaining/-reset/-used/-resource`; the
 *   request past the limit gets `primaryStatus` (403 by default) with remaining 0 and
 *   "API rate limit exceeded…" (REST), or a 200 with a GraphQL `RATE_LIMITED` error (GraphQL).
 * - Secondary limits per token: more than `concurrency` requests in flight, or more than
 *   `points` points in `pointsWindowMs` (GET 1, other methods 5), get `secondaryStatus` with
 *   `retry-after` (seconds) and "You have exceeded a secondary rate limit…"; so does every request
 *   inside a secondary pause already announced.
 * - `POST /app/installations/:id/access_tokens` returns an installation token `ghs_<id>`.
 * - `script(...)` queues answers given as they are, for the next requests (before any limit).
 *
 * `log` has every request: arrival time, method, path, token, status, and `kind` (`ok`,
 * `primary`, `secondary`, `scripted`, `token`). Control over HTTP for other processes:
 * `GET /__log`, `POST /__reset`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeGitHubOptions {
  /** Primary limit per token and resource. Default 5000 per hour. */
  limit?: number;
  windowMs?: number;
  /** Search's own primary limit per token. Default 30 per minute. */
  searchLimit?: number;
  /** Status of a primary-limit answer. Default 403. */
  primaryStatus?: 403 | 429;
  /** Requests in flight per token before a secondary-limit answer. Default 100. */
  concurrency?: number;
  /** Points per token in `pointsWindowMs` before a secondary-limit answer. Default 900 per minute. */
  points?: number;
  pointsWindowMs?: number;
  /** Status of a secondary-limit answer. Default 403. */
  secondaryStatus?: 403 | 429;
  /** Seconds in the `retry-after` of a secondary-limit answer. Default 1. */
  retryAfter?: number;
  /** Time each answer takes (ms). Default 0. */
  latencyMs?: number;
}

export interface ScriptedAnswer {
  status: number;
  headers?: Record<string, string>;
  body?: unknown;
}

export interface LogEntry {
  t: number;
  method: string;
  path: string;
  token: string;
  status: number;
  kind: 'ok' | 'primary' | 'secondary' | 'scripted' | 'token';
}

export interface FakeGitHub {
  readonly url: string;
  readonly log: LogEntry[];
  /** Answers for the next requests, in order. */
  script(...answers: ScriptedAnswer[]): void;
  /** Requests answered with a rate limit (403/429 or a GraphQL RATE_LIMITED). */
  limited(): number;
  /** The most requests of one token ever in flight at once. */
  maxInFlight(): number;
  reset(): void;
  stop(): Promise<void>;
}

interface Window {
  end: number;
  used: number;
}

const SECONDARY_MESSAGE =
  'You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID.';

function tokenOf(req: IncomingMessage): string {
  const auth = req.headers.authorization;
  if (!auth) return 'anonymous';
  return auth.replace(/^(token|bearer)\s+/i, '');
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => {
      body += c;
    });
    req.on('end', () => resolve(body));
  });
}

export async function startFakeGitHub(options: FakeGitHubOptions = {}): Promise<FakeGitHub> {
  const o = {
    limit: 5000,
    windowMs: 3_600_000,
    searchLimit: 30,
    primaryStatus: 403,
    concurrency: 100,
    points: 900,
    pointsWindowMs: 60_000,
    secondaryStatus: 403,
    retryAfter: 1,
    latencyMs: 0,
    ...options,
  };
  const log: LogEntry[] = [];
  const scripted: ScriptedAnswer[] = [];
  let windows = new Map<string, Window>();
  let points = new Map<string, { t: number; p: number }[]>();
  let inFlight = new Map<string, number>();
  let secondaryUntil = new Map<string, number>();
  let maxInFlight = 0;

  function primaryWindow(token: string, resource: string, now: number): Window {
    const key = `${token} ${resource}`;
    let w = windows.get(key);
    if (w === undefined || now >= w.end) {
      const windowMs = resource === 'search' ? 60_000 : o.windowMs;
      w = { end: now + windowMs, used: 0 };
      windows.set(key, w);
    }
    return w;
  }

  const server: Server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const method = req.method ?? 'GET';
    const path = (req.url ?? '/').split('?')[0]!;
    if (path === '/__log') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(log));
      return;
    }
    if (path === '/__reset') {
      reset();
      res.writeHead(204).end();
      return;
    }
    const t = Date.now();
    const token = tokenOf(req);
    const body = await readBody(req);
    const entry: LogEntry = { t, method, path, token, status: 0, kind: 'ok' };
    log.push(entry);
    const send = (status: number, headers: Record<string, string>, payload: unknown) => {
      entry.status = status;
      const finish = () => {
        inFlight.set(token, (inFlight.get(token) ?? 1) - 1);
        res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers });
        res.end(JSON.stringify(payload));
      };
      if (o.latencyMs > 0) setTimeout(finish, o.latencyMs);
      else finish();
    };
    inFlight.set(token, (inFlight.get(token) ?? 0) + 1);
    maxInFlight = Math.max(maxInFlight, inFlight.get(token)!);

    const next = scripted.shift();
    if (next !== undefined) {
      entry.kind = 'scripted';
      send(next.status, next.headers ?? {}, next.body ?? {});
      return;
    }
    const tokenMatch = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(path);
    if (method === 'POST' && tokenMatch) {
      entry.kind = 'token';
      send(
        201,
        {},
        {
          token: `ghs_${tokenMatch[1]}`,
          expires_at: new Date(t + 3_600_000).toISOString(),
          permissions: { issues: 'write' },
          repository_selection: 'all',
        },
      );
      return;
    }

    // Secondary limits: inside an announced pause, concurrency, points.
    const secondary = (retryAfter: number) => {
      entry.kind = 'secondary';
      secondaryUntil.set(token, Math.max(secondaryUntil.get(token) ?? 0, t + retryAfter * 1000));
      send(
        o.secondaryStatus,
        { 'retry-after': String(retryAfter) },
        {
          message: SECONDARY_MESSAGE,
          documentation_url:
            'https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits',
        },
      );
    };
    const pausedUntil = secondaryUntil.get(token) ?? 0;
    if (t < pausedUntil) return secondary(Math.ceil((pausedUntil - t) / 1000));
    if ((inFlight.get(token) ?? 0) > o.concurrency) return secondary(o.retryAfter);
    const cost = method === 'GET' || method === 'HEAD' || method === 'OPTIONS' ? 1 : 5;
    const spent = (points.get(token) ?? []).filter((e) => e.t > t - o.pointsWindowMs);
    points.set(token, spent);
    if (spent.reduce((s, e) => s + e.p, 0) + cost > o.points) return secondary(o.retryAfter);
    spent.push({ t, p: cost });

    // The primary limit of the request's resource.
    const graphql = path === '/graphql';
    const resource = graphql ? 'graphql' : path.startsWith('/search/') ? 'search' : 'core';
    const limit = resource === 'search' ? o.searchLimit : o.limit;
    const w = primaryWindow(token, resource, t);
    const over = w.used >= limit;
    if (!over) w.used++;
    const headers = {
      'x-ratelimit-limit': String(limit),
      'x-ratelimit-remaining': String(limit - w.used),
      'x-ratelimit-reset': String(Math.ceil(w.end / 1000)),
      'x-ratelimit-used': String(w.used),
      'x-ratelimit-resource': resource,
    };
    if (over) {
      entry.kind = 'primary';
      if (graphql) {
        send(200, headers, {
          data: null,
          errors: [{ type: 'RATE_LIMITED', message: 'API rate limit exceeded for installation.' }],
        });
        return;
      }
      send(o.primaryStatus, headers, {
        message: `API rate limit exceeded for ${token}.`,
        documentation_url:
          'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-the-primary-rate-limit',
      });
      return;
    }
    if (graphql) {
      const query = body ? (JSON.parse(body) as { query?: string }).query : undefined;
      send(200, headers, { data: { viewer: { login: token }, query } });
      return;
    }
    send(method === 'POST' ? 201 : 200, headers, { ok: true, method, path });
  });

  function reset(): void {
    log.length = 0;
    scripted.length = 0;
    windows = new Map();
    points = new Map();
    inFlight = new Map();
    secondaryUntil = new Map();
    maxInFlight = 0;
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  server.keepAliveTimeout = 500;
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    log,
    script: (...answers) => {
      scripted.push(...answers);
    },
    limited: () => log.filter((e) => e.kind === 'primary' || e.kind === 'secondary').length,
    maxInFlight: () => maxInFlight,
    reset,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
