import type { HttpBindings } from '@hono/node-server';
import type { RequestContext } from '../../core/context.js';

/** Hono variables set by the middleware of server/http; on the node server, the raw request and response too. */
export type AppEnv = {
  Bindings: Partial<HttpBindings>;
  Variables: {
    auth: RequestContext;
    /** The raw request body, read (and bounded) by `guard` once the headers have passed; empty when none was sent. */
    rawBody: Buffer;
    /** Set by the access log before anything else runs: its line and an internal error's answer name the same id. */
    requestId: string;
  };
};
