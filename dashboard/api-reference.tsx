import { Hono } from 'hono';
import { buildOpenApiDocument } from '../server/api/openapi/document.js';
import type { DashEnv } from './env.js';
import { securityHeaders } from './security.js';
import { ApiReference } from './views/api-reference.js';

/**
 * The API reference, mounted at /docs: one server-rendered page built from the API document (the same one
 * GET /api/v1/openapi.json serves), with the dashboard's stylesheet and its headers (the same Content-Security-Policy).
 * Public, like the document: it shows no account's data, only the API and its examples.
 */
export function apiReferenceApp(base: string) {
  // Rendered on first use and kept: the document is the same for the life of the process.
  let page: string | undefined;
  const app = new Hono<DashEnv>();
  app.use(securityHeaders());
  app.get('/', async (c) => {
    page ??= String(await (<ApiReference document={buildOpenApiDocument(base)} />));
    return c.html(page);
  });
  return app;
}
