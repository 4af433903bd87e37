import { describe, expect, it } from 'vitest';
import { type Checkpointer, startCheckpointer } from '../db/checkpointer.js';
import { scansOffThread } from '../db/scans.js';
import { dashboardClient } from './helpers/dashboard.js';
import { newSender, receipt } from './helpers/sending.js';
import { startService } from './helpers/service.js';

/**
 * The overview's reads that walk many rows (the 30-day chart, the queue) on SQLite's checkpoint thread, as main puts
 * them (db/checkpointer.ts, db/scans.ts): SQLite's own machinery, which a server on Postgres does not have (its scans
 * run on the pool). The rest of the overview is tests/dashboard-overview.test.ts, on both engines.
 */

describe('the overview on SQLite', () => {
  it("reads the chart and the queue where deps.scans says: in the server, the checkpoint thread's connection, not the event loop's", async () => {
    let thread: Checkpointer | undefined;
    const seen: string[] = [];
    const quiet = await startService(
      { DELIVERY_MODE: 'capture' },
      {
        scans: (store, logger) => {
          if (store.engine !== 'sqlite') throw new Error('the checkpoint thread is SQLite’s');
          thread = startCheckpointer(store.sqlite, logger);
          // The event loop's connection, as the scans see it, refuses every statement.
          const refusing = Object.create(store.db) as typeof store.db;
          Object.defineProperty(refusing, '$client', {
            get: () => {
              throw new Error('a scan ran on the event loop');
            },
          });
          const offLoop = scansOffThread(thread, refusing);
          return {
            first: (query, params) => (seen.push(query), offLoop.first(query, params)),
            all: (query, params) => (seen.push(query), offLoop.all(query, params)),
          };
        },
      },
    );
    try {
      const s = await newSender(quiet, { name: 'Chart shop' });
      const res = await quiet.api('POST', '/emails', { key: s.key, body: receipt(s.from, ['ana@example.net', 'ben@example.net']) });
      expect(res.status).toBe(200);
      const html = await (await (await dashboardClient(quiet)).get('/dashboard')).text();
      const today = new Date(quiet.clock.now()).toISOString().slice(0, 10);
      expect(html).toMatch(
        new RegExp(`<tr data-day="${today}"><th scope="row">${today}</th><td class="num" data-series="emails">1</td><td class="num" data-series="sent">2</td>`),
      );
      expect(html).toMatch(/<div class="value" id="queue-depth">2<\/div>/);
      for (const table of ['emails', 'email_events', 'outbound_recipients']) expect(seen.some((q) => new RegExp(`from ${table}\\b`).test(q))).toBe(true);
    } finally {
      await thread?.stop();
      await quiet.close();
    }
  });
});
