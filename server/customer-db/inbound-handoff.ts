import type pg from 'pg';
import type { InboundWrite } from '../../db/customer/writes.js';
import type { Deps } from '../core/deps.js';
import { type OpenedWrite, type SpooledInboundWrite, isSpooled } from '../core/customer-db-outbox.js';
import { type InboundParser, ParserStoppedError, createInboundParser } from './inbound/parser.js';
import { applySpooledInbound } from './inbound/store.js';

/**
 * The writer's hand-off of received messages to the parse threads: the small ones of a batch parsed together into
 * rows the batch writes, a large one parsed from its spool file and written on its own. The parse threads are the
 * writer's own unless given (main shares them with the inbound server and closes them).
 */
export function createInboundHandoff(
  deps: Pick<Deps, 'config' | 'inboundSpool' | 'logger' | 'secretKey'>,
  options: { parser?: InboundParser; parserWorkerUrl?: URL },
) {
  const parser = options.parser ?? createInboundParser(deps, options.parserWorkerUrl ? { workerUrl: options.parserWorkerUrl } : {});

  /** The small received messages of a batch parsed (in the parse thread, server/customer-db/inbound/parser.ts); an Error for one that cannot be. */
  async function parseInlineAll(opened: OpenedWrite[]): Promise<Map<string, InboundWrite | Error>> {
    const todo = opened.filter((o) => o.write !== null && isSpooled(o.write) && o.write.raw !== undefined);
    let results: (InboundWrite | Error)[];
    try {
      results = await parser.parseAll(todo.map((o) => o.write as SpooledInboundWrite));
    } catch (err) {
      // The thread died with the batch: each message is tried again after the data-refusal gaps, and set aside if it
      // keeps killing it.
      const error = err instanceof ParserStoppedError ? err : new ParserStoppedError(String(err));
      results = todo.map(() => error);
    }
    return new Map(todo.map((o, i) => [o.row.id, results[i]!]));
  }

  /** Writes a large received message into the customer's database from the events its parse streams back. */
  function applySpooled(client: pg.PoolClient, write: SpooledInboundWrite, opts: { stillTarget: () => Promise<boolean> }): Promise<void> {
    return applySpooledInbound(client, deps, (w) => parser.parseSpooled(w), write, opts);
  }

  /** Closes the parse threads if they are the writer's own. */
  async function close(): Promise<void> {
    if (!options.parser) await parser.close();
  }

  return { parseInlineAll, applySpooled, close };
}

export type InboundHandoff = ReturnType<typeof createInboundHandoff>;
