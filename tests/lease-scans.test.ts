import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../db/client.js';
import { SqliteConnection } from '../db/sqlite-connection.js';
import { execute, queryRow, queryRows } from '../db/sql.js';
import { recipientQueue } from '../mta/delivery-queue.js';
import type { QueueStore } from '../server/queues/lease-table.js';
import { webhookQueue } from '../server/webhooks/webhook-queue.js';
import { releaseDeadClaims } from '../server/core/idempotency.js';
import { webhookEndpoints } from '../db/schema/index.js';
import { newId } from '../server/shared/ids.js';
import { bulkRows, newSender, receipt, recipients } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * A queue's holder-wide lease scans (a stop's release of all its leases, a start's releaseDead and capForeign, and
 * releaseNode when a node's liveness lock is gone) read only the rows that can hold a lease, through an index, never
 * the queue's whole history: a dead node's leases come back in milliseconds however much was ever delivered. So do
 * the running idempotency claims a gone node held, among a day of settled keys. Checked
 * on each engine's own terms: on Postgres the transaction's own count of the table's scans
 * (pg_stat_xact_user_tables), on SQLite the plan of every statement on the table, taken as it runs.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService();
});

afterAll(async () => {
  await service?.close();
});

const LEASE = 60_000;
const HISTORY = 20_000;
const HELD = 10;

interface Scans {
  done: number;
  /** Reads of the whole table (or of an index over all its rows). */
  full: number;
  /** Reads through an index that finds the rows (a search, or a scan of an index over only the leased rows). */
  indexed: number;
}

/** The scans of `table` that `op` makes on the service's state, with what op returned. */
async function scansOf(table: string, op: (db: Db) => Promise<number>): Promise<Scans> {
  const db = service.deps.db;
  if (service.deps.store.engine === 'postgres')
    return await db.transaction(async (tx) => {
      const done = await op(tx);
      const row = await queryRow<{ seq: string; idx: string }>(
        tx,
        sql`select seq_scan as seq, idx_scan as idx from pg_stat_xact_user_tables where relname = ${table}`,
      );
      return { done, full: Number(row?.seq ?? 0), indexed: Number(row?.idx ?? 0) };
    });
  const partial = (await queryRows<{ name: string; partial: number }>(db, sql`select name, partial from pragma_index_list(${table})`))
    .filter((i) => i.partial === 1)
    .map((i) => i.name);
  const details: string[] = [];
  const run = SqliteConnection.prototype.runNow;
  SqliteConnection.prototype.runNow = function (this: SqliteConnection, text, params, method) {
    if (new RegExp(`\\b${table}\\b`).test(text) && !/^\s*explain\b/i.test(text))
      for (const step of this.sqlite.prepare(`explain query plan ${text}`).all(...params) as { detail: string }[]) details.push(step.detail);
    return run.call(this, text, params, method);
  };
  let done: number;
  try {
    done = await op(db);
  } finally {
    SqliteConnection.prototype.runNow = run;
  }
  const onTable = details.filter((d) => new RegExp(`^(SCAN|SEARCH) ${table}\\b`).test(d));
  const throughPartial = (d: string) => partial.some((name) => d.includes(`INDEX ${name}`));
  return {
    done,
    full: onTable.filter((d) => d.startsWith('SCAN') && !throughPartial(d)).length,
    indexed: onTable.filter((d) => d.startsWith('SEARCH') || throughPartial(d)).length,
  };
}

/** `op` gives back (or cuts) HELD rows through an index, with no full read of `table`. */
async function expectIndexed(table: string, op: (db: Db) => Promise<number>): Promise<void> {
  const seen = await scansOf(table, op);
  expect({ done: seen.done, full: seen.full }).toEqual({ done: HELD, full: 0 });
  expect(seen.indexed).toBeGreaterThan(0);
}

/** The four holder-wide operations each give back (or cut) the HELD leases, through an index, with no full read. */
async function expectLeaseScansIndexed(table: string, queue: (db: Db) => QueueStore<unknown, unknown>, lease: (holder: string) => Promise<unknown>) {
  const throughIndex = async (op: (q: QueueStore<unknown, unknown>) => Promise<number>) => await expectIndexed(table, async (db) => await op(queue(db)));
  await lease('faraway:1:x');
  await throughIndex(async (q) => await q.releaseNode('faraway'));
  await lease('faraway:1:x');
  await throughIndex(async (q) => await q.capForeign('me:1:x', service.clock.now(), LEASE));
  await throughIndex(async (q) => await q.releaseDead('me:1:x', (holder) => holder === 'faraway:1:x'));
  await lease('me:1:x');
  await throughIndex(async (q) => await q.release('me:1:x'));
}

describe("a holder's leases are found through an index, never by reading the queue's history", () => {
  it('the recipient queue: among the queued recipients (the status index), whatever was delivered', async () => {
    const s = await newSender(service);
    const res = await service.api('POST', '/emails', { key: s.key, body: receipt(s.from, recipients(1, 'history.example')) });
    expect(res.status).toBe(200);
    const db = service.deps.db;
    const far = service.clock.now() + 10 * LEASE;
    // A long history of delivered recipients, and HELD queued ones leased far ahead (never claimed by the running service).
    await execute(
      db,
      sql`insert into outbound_recipients (id, message_id, account_id, recipient, recipient_domain, status, attempts, next_attempt_at, created_at)
          select 'hist_' || g, ${res.body.id}, ${s.account.id}, 'h' || g || '@history.example', 'history.example', 'delivered', 1, 0, 0
          from (${sql.raw(bulkRows(service, HISTORY))}) as bulk`,
    );
    const lease = async (holder: string) =>
      await execute(
        db,
        sql`insert into outbound_recipients (id, message_id, account_id, recipient, recipient_domain, status, attempts, next_attempt_at, locked_by, locked_until, created_at)
            select 'held_' || g, ${res.body.id}, ${s.account.id}, 'q' || g || '@history.example', 'history.example', 'queued', 0, 0, ${holder}, ${far}, 0
            from (${sql.raw(bulkRows(service, HELD))}) as bulk where true
            on conflict (id) do update set locked_by = excluded.locked_by, locked_until = excluded.locked_until`,
      );
    await lease('faraway:1:x');
    // As autovacuum (Postgres) or the operator's ANALYZE (SQLite) would have it.
    await execute(db, sql`analyze outbound_recipients`);
    await expectLeaseScansIndexed('outbound_recipients', recipientQueue as never, lease);
  });

  it('the webhook queue: among the deliveries in flight (the leased index), whatever was posted', async () => {
    const s = await newSender(service);
    const db = service.deps.db;
    // The endpoint as POST /webhooks stores it (its host is never resolved: nothing here is posted).
    const [endpoint] = await db
      .insert(webhookEndpoints)
      .values({
        id: newId(service.clock.now()),
        createdAt: service.clock.now(),
        accountId: s.account.id,
        url: 'https://hooks.example.com/lease-scans',
        events: ['email.delivered'],
        secretSealed: 'sealed',
      })
      .returning({ id: webhookEndpoints.id });
    const far = service.clock.now() + 10 * LEASE;
    // A long history of posted deliveries, and HELD due ones leased far ahead (the endpoint is busy: never claimed).
    await execute(
      db,
      sql`insert into webhook_deliveries (id, endpoint_id, account_id, event_type, data, attempts, last_status, delivered_at, next_attempt_at, created_at)
          select 'whist_' || g, ${endpoint!.id}, ${s.account.id}, 'email.delivered', '{}', 1, 200, 0, null, 0
          from (${sql.raw(bulkRows(service, HISTORY))}) as bulk`,
    );
    const lease = async (holder: string) =>
      await execute(
        db,
        sql`insert into webhook_deliveries (id, endpoint_id, account_id, event_type, data, attempts, next_attempt_at, locked_by, locked_until, created_at)
            select 'wheld_' || g, ${endpoint!.id}, ${s.account.id}, 'email.delivered', '{}', 0, 0, ${holder}, ${far}, 0
            from (${sql.raw(bulkRows(service, HELD))}) as bulk where true
            on conflict (id) do update set locked_by = excluded.locked_by, locked_until = excluded.locked_until`,
      );
    await lease('faraway:1:x');
    await execute(db, sql`analyze webhook_deliveries`);
    await expectLeaseScansIndexed('webhook_deliveries', webhookQueue as never, lease);
  });

  it("the running idempotency claims: a gone node's, and at a lone start every one, through the index on completed_at, whatever was settled", async () => {
    const s = await newSender(service);
    const db = service.deps.db;
    const at = service.clock.now();
    // A day of settled keys, and HELD running claims of a node that is gone.
    await execute(
      db,
      sql`insert into idempotency_keys (account_id, key, fingerprint, claim_token, held_by, state, response, claimed_at, completed_at)
          select ${s.account.id}, 'settled-' || g, 'f', 't', 'alive', 'done', null, ${at}, ${at} from (${sql.raw(bulkRows(service, HISTORY))}) as bulk`,
    );
    const claims = async (holder: string) =>
      await execute(
        db,
        sql`insert into idempotency_keys (account_id, key, fingerprint, claim_token, held_by, state, response, claimed_at, completed_at)
            select ${s.account.id}, 'running-' || g, 'f', 't', ${holder}, 'running', null, ${at}, null from (${sql.raw(bulkRows(service, HELD))}) as bulk where true
            on conflict (account_id, key) do nothing`,
      );
    await claims('gone');
    await execute(db, sql`analyze idempotency_keys`);
    await expectIndexed('idempotency_keys', async (tx) => await releaseDeadClaims(tx, (node) => node === 'gone'));
    await claims('gone');
    await expectIndexed('idempotency_keys', async (tx) => await releaseDeadClaims(tx));
    await execute(db, sql`delete from idempotency_keys where account_id = ${s.account.id}`);
  });
});
