import type { RequestContext } from '../core/context.js';

/** Hono variables set by the middleware of server/http. */
export type AppEnv = {
  Variables: {
    auth: RequestContext;
    /** The raw request body, read (and bounded) before anything else; empty when none was sent. */
    rawBody: Buffer;
  };
};
