import type { Deps } from '../../server/core/deps.js';
import { createInboundParser } from '../../server/customer-db/inbound/parser.js';
import { type InboundOptions, type InboundServer, createInboundServer } from '../../mta/inbound/server.js';

/**
 * The inbound SMTP server as the composition root builds it, with a parser of its own for the report checks
 * (server/app/main.ts shares one with the customer-database writer), closed after the server.
 */
export function inboundServerFor(deps: Deps, tls: { key: string; cert: string }, options: Partial<InboundOptions> = {}): InboundServer {
  const parser = createInboundParser(deps);
  const server = createInboundServer(deps, tls, { ...options, checks: parser });
  return {
    ...server,
    async close(): Promise<void> {
      await server.close();
      await parser.close();
    },
  };
}
