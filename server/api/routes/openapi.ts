import { Hono } from 'hono';
import type { AppEnv } from '../http/env.js';
import { buildOpenApiDocument } from '../openapi/document.js';

/** The API index: its version and a link to the API document. */
const apiIndex = (base: string) => ({ name: 'Mailstead API', version: 'v1', links: { openapi: `${base}/openapi.json` } });

/** `GET /api/v1` (the index) and `GET /api/v1/openapi.json`, both served without a key. */
export function apiDocumentRoutes(base: string) {
  // Built on first use and kept: the document is the same for the life of the process.
  let document: string | undefined;
  return new Hono<AppEnv>()
    .get('/', (c) => c.json(apiIndex(base)))
    .get('/openapi.json', (c) => {
      document ??= JSON.stringify(buildOpenApiDocument(base));
      return c.body(document, 200, { 'content-type': 'application/json; charset=utf-8' });
    });
}

/**
 * The index at `/api/v1/` as well: the document's path `/` appended to its server URL `/api/v1` (OpenAPI appends,
 * it does not resolve), and Hono tells the two apart.
 */
export function apiIndexRoute(base: string) {
  return new Hono<AppEnv>().get('/', (c) => c.json(apiIndex(base)));
}
