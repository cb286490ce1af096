import type { Rule } from '../../rules/rule.js';

/*
 * GitHub's documented limits as valve rules, and which of them a request spends. Each limit that
 * GitHub counts in its own unit, or pauses on its own, is a lane: one valve per key and lane, whose
 * id is `<id>:<lane>` (the lane `all`, which carries the concurrency limit and the secondary-limit
 * pauses, is `<id>` itself). A request first takes a slot in `all` (once no lane of it is paused
 * and its turn at its first lane came), then the grant of each of its lanes in turn, and is sent
 * at once (see throttle.ts).
 *
 * Sources: "Rate limits for the REST API" and "Rate limits and node limits for the GraphQL API"
 * (docs.github.com): primary 5,000 requests per hour per user or installation token; search 30
 * per minute, code search 10 per minute; secondary: 100 concurrent requests (REST and GraphQL
 * together), 900 points per minute for REST (GET/HEAD/OPTIONS 1, other methods 5), 2,000 points per
 * minute for GraphQL (1 without a mutation, 5 with), 80 content-generating requests per minute
 * and 500 per hour.
 */

/** The lanes that carry rate rules (the `all` lane carries concurrency and secondary pauses). */
export type RateLane = 'core' | 'rest' | 'graphql' | 'search' | 'codeSearch' | 'content';

/** GitHub's limits for one key (token or installation), as rules per lane. */
export interface GitHubLimits {
  /** Primary limit of REST requests outside search (resource `core`). Default 5,000 per hour (fixed window). */
  core?: Rule | readonly Rule[];
  /** Secondary limit in points for REST (GET/HEAD/OPTIONS cost 1, other methods 5). Default 900 per minute. */
  rest?: Rule | readonly Rule[];
  /** Secondary limit in points for GraphQL (1, or 5 with a mutation). Default 2,000 per minute. */
  graphql?: Rule | readonly Rule[];
  /** Primary limit of search except code search (resource `search`). Default 30 per minute. */
  search?: Rule | readonly Rule[];
  /** Primary limit of code search (resource `code_search`). Default 10 per minute. */
  codeSearch?: Rule | readonly Rule[];
  /** Secondary limit of content-creating requests. Default 80 per minute and 500 per hour. */
  content?: Rule | readonly Rule[];
  /** Concurrent requests, shared by REST and GraphQL, in every process on the store. Default 100. */
  concurrency?: number;
}

/** GitHub's documented limits for one token, as valve rules (the default of `throttle.limits`). */
export const githubLimits: Readonly<Required<GitHubLimits>> = Object.freeze({
  core: Object.freeze([{ limit: 5000, interval: '1h', algorithm: 'fixed-window' } as const]),
  rest: Object.freeze([{ limit: 900, interval: '1m', algorithm: 'sliding-window' } as const]),
  graphql: Object.freeze([{ limit: 2000, interval: '1m', algorithm: 'sliding-window' } as const]),
  search: Object.freeze([{ limit: 30, interval: '1m', algorithm: 'sliding-window' } as const]),
  codeSearch: Object.freeze([{ limit: 10, interval: '1m', algorithm: 'sliding-window' } as const]),
  content: Object.freeze([
    { limit: 80, interval: '1m', algorithm: 'sliding-window' } as const,
    { limit: 500, interval: '1h', algorithm: 'sliding-window' } as const,
  ]),
  concurrency: 100,
});

export const RATE_LANES: readonly RateLane[] = ['core', 'rest', 'graphql', 'search', 'codeSearch', 'content'];

/**
 * The one order in which every request takes its lanes (grants and turns): the longest window
 * first. classify() lists a request's lanes in it.
 */
export const LANE_ORDER: readonly RateLane[] = ['core', 'content', 'search', 'codeSearch', 'graphql', 'rest'];

/** The suffix of a lane's valve id. */
export const LANE_SUFFIX: Readonly<Record<RateLane, string>> = {
  core: 'core',
  rest: 'rest',
  graphql: 'graphql',
  search: 'search',
  codeSearch: 'code_search',
  content: 'content',
};

/** What one request spends: the lanes that grant it, in order, and its cost in each. */
export interface RequestClass {
  /** Token endpoints: never queued (an installation token is fetched while other requests wait for it). */
  readonly auth: boolean;
  readonly graphql: boolean;
  /** The lane whose primary limit the request spends (paused by `x-ratelimit-remaining: 0`). */
  readonly primary: RateLane;
  /** Method and path (a template, as Octokit passes it): paused by a spent resource valve has no lane for (resources.ts). */
  readonly route: string;
  /**
   * Lanes in the order they grant, each with its cost: always in LANE_ORDER, the longest window
   * first (`core`'s hour before `content`'s minute), so that no grant of a short window is held
   * through a long wait; `all` comes before them. The order is also the order in which a request
   * takes its turn at each lane (index.ts), the same for every request: no two wait for each other.
   */
  readonly lanes: readonly (readonly [RateLane, number])[];
}

const READS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Token endpoints (installation and OAuth tokens): requests made by auth strategies while the
 * requests that need the token wait. They are not queued, as in @octokit/plugin-throttling.
 */
export function isAuthRequest(method: string, pathname: string): boolean {
  if (method === 'PATCH') return /\/applications\/[^/]+\/token\/scoped$/.test(pathname);
  if (method !== 'POST') return false;
  return (
    /\/app\/installations\/[^/]+\/access_tokens$/.test(pathname) ||
    /\/applications\/[^/]+\/token$/.test(pathname) ||
    pathname === '/login/oauth/access_token'
  );
}

/** GraphQL's block strings, strings and comments, each matched whole from where it starts. */
const NOT_CODE = /"""(?:\\"""|[\s\S])*?"""|"(?:\\.|[^"\\\n\r])*"|#[^\n\r]*/g;

/** Whether a GraphQL request body holds a mutation (costs 5 points, and may create content). */
function isMutation(options: Record<string, unknown>): boolean {
  const query = typeof options.query === 'string' ? options.query : undefined;
  if (query === undefined) return false;
  // Comments and strings ("is mutation", """…""") aside, an operation starts with its keyword.
  return /(^|[\s{}])mutation\b/.test(query.replace(NOT_CODE, ' '));
}

/** The path of a request URL (templated or absolute), without a GitHub Enterprise Server `/api/v3` prefix. */
export function pathOf(url: string): string {
  let pathname: string;
  try {
    pathname = new URL(url, 'http://github.invalid').pathname;
  } catch {
    pathname = url;
  }
  if (pathname.startsWith('/api/v3/')) return pathname.slice(7);
  if (pathname === '/api/graphql') return '/graphql';
  return pathname;
}

/**
 * Classifies one request by method and path. Content-creating: a REST POST (other than search,
 * markdown rendering, and token endpoints) or a GraphQL mutation, the requests GitHub documents as
 * "content-generating" (issues, comments, pull requests, reviews, releases…).
 */
export function classify(method: string, url: string, options: Record<string, unknown>): RequestClass {
  const pathname = pathOf(url);
  const route = `${method} ${pathname}`;
  if (isAuthRequest(method, pathname))
    return { auth: true, graphql: false, primary: 'core', route, lanes: [] };
  if (pathname === '/graphql') {
    const mutation = isMutation(options);
    return {
      auth: false,
      graphql: true,
      primary: 'graphql',
      route,
      lanes: mutation
        ? [
            ['content', 1],
            ['graphql', 5],
          ]
        : [['graphql', 1]],
    };
  }
  const points = READS.has(method) ? 1 : 5;
  if (pathname.startsWith('/search/')) {
    const lane: RateLane = pathname.startsWith('/search/code') ? 'codeSearch' : 'search';
    return {
      auth: false,
      graphql: false,
      primary: lane,
      route,
      lanes: [
        [lane, 1],
        ['rest', points],
      ],
    };
  }
  const content = method === 'POST' && !pathname.startsWith('/markdown');
  return {
    auth: false,
    graphql: false,
    primary: 'core',
    route,
    lanes: content
      ? [
          ['core', 1],
          ['content', 1],
          ['rest', points],
        ]
      : [
          ['core', 1],
          ['rest', points],
        ],
  };
}

/** The lane of an `x-ratelimit-resource` value, or undefined for one valve has no lane for. */
export function laneOfResource(resource: unknown): RateLane | undefined {
  switch (resource) {
    case 'core':
      return 'core';
    case 'search':
      return 'search';
    case 'code_search':
      return 'codeSearch';
    case 'graphql':
      return 'graphql';
    default:
      return undefined;
  }
}
