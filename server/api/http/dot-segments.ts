import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from './env.js';

/**
 * Whether a request target's path has a `.` or `..` segment, written plainly or percent-encoded (`%2e`), between
 * slashes or backslashes (which URL parsing reads as slashes for http).
 */
export function hasDotSegment(target: string): boolean {
  const query = target.search(/[?#]/);
  const path = query === -1 ? target : target.slice(0, query);
  for (const segment of path.split(/[/\\]/)) {
    const plain = segment.replace(/%2e/gi, '.');
    if (plain === '.' || plain === '..') return true;
  }
  return false;
}

/**
 * Whether a request target's path holds a NUL character (`%00`, or a raw one). No id, name or address the service
 * stores holds one, and Postgres refuses one in a text parameter (22021) where SQLite merely finds nothing: such a
 * path names nothing, on either engine.
 */
export function hasNulInPath(target: string): boolean {
  const query = target.search(/[?#]/);
  const path = query === -1 ? target : target.slice(0, query);
  return path.includes('\u0000') || /%00/i.test(path);
}

/**
 * The node adaptor builds the request's URL with WHATWG URL parsing, which resolves dot segments before any route
 * sees the path: `GET /api/v1/emails/%2E%2E` would reach `/api/v1/` and answer the API index, `DELETE /domains/..`
 * a 405 of another path. A path with one is no endpoint: 404 not_found, named as the client wrote it. So is a path
 * holding a NUL character (hasNulInPath).
 */
export function refuseDotSegments(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const target = c.env?.incoming?.url;
    if (target !== undefined && (hasDotSegment(target) || hasNulInPath(target))) {
      const path = target.split(/[?#]/)[0]!.slice(0, 200);
      return c.json({ error: { code: 'not_found', message: `No endpoint ${c.req.method} ${path}.` } }, 404);
    }
    await next();
  };
}
