import { eq } from 'drizzle-orm';
import { z } from 'zod';
import { type CustomerDatabaseRow, customerDatabases } from '../../db/schema/index.js';
import { iso, isoOrNull } from '../shared/clock.js';
import { databaseOwnerOf, dropWritesOf, pendingWrites, pendingWritesOf } from './customer-db-outbox.js';
import type { Deps } from './deps.js';
import { ApiError } from '../shared/errors.js';
import type { RequestContext } from './context.js';
import { changes, one } from '../../db/sql.js';

/** The Database endpoints (docs/api/contract.md, Database; docs/api/decisions.md section 8): the rules, without HTTP. */

export const connectDatabaseInput = z.strictObject({
  // Its form is judged by parseGivenCustomerDbUrl: 422 invalid_url, naming the part at fault.
  url: z.string(),
});

/** docs/api/contract.md, Database status. With no database, `connected` is false and the rest empty (null; `pending` 0). */
export interface DatabaseStatus {
  connected: boolean;
  host: string | null;
  port: number | null;
  database: string | null;
  user: string | null;
  sslMode: string | null;
  state: string | null;
  schemaVersion: number | null;
  lastOkAt: string | null;
  lastError: string | null;
  updatedAt: string | null;
  pending: number;
}

export const NOT_CONNECTED: DatabaseStatus = {
  connected: false,
  host: null,
  port: null,
  database: null,
  user: null,
  sslMode: null,
  state: null,
  schemaVersion: null,
  lastOkAt: null,
  lastError: null,
  updatedAt: null,
  pending: 0,
};

export async function statusOf(deps: Pick<Deps, 'db'>, row: CustomerDatabaseRow, pendingGiven?: number): Promise<DatabaseStatus> {
  const pending = pendingGiven ?? (await pendingWrites(deps.db, row.accountId));
  return {
    connected: true,
    host: row.host,
    port: row.port,
    database: row.database,
    user: row.user,
    sslMode: row.sslMode,
    state: row.state,
    schemaVersion: row.schemaVersion,
    lastOkAt: isoOrNull(row.lastOkAt),
    lastError: row.lastError,
    updatedAt: iso(row.updatedAt),
    pending,
  };
}

export async function rowOf(deps: Pick<Deps, 'db'>, owner: string): Promise<CustomerDatabaseRow | undefined> {
  return await one(deps.db.select().from(customerDatabases).where(eq(customerDatabases.accountId, owner)));
}

/**
 * A parent's database as one of its sub-accounts' own keys sees it (the keys a parent hands its customers): that it is
 * connected and whether it works, and how many of the sub-account's own writes wait, never where the parent's database
 * is (host, port, name, user) or what went wrong with it (its last error names hosts and users), nor the writes of the
 * parent and its other sub-accounts.
 */
async function inheritedStatusOf(deps: Pick<Deps, 'db'>, row: CustomerDatabaseRow, accountId: string): Promise<DatabaseStatus> {
  return {
    ...(await statusOf(deps, row, await pendingWritesOf(deps.db, row.accountId, accountId))),
    host: null,
    port: null,
    database: null,
    user: null,
    lastError: null,
  };
}

/**
 * The database the acting account's mail goes to (its own, else its parent's), and whether the asker holds it: the
 * account's own database, or the parent's asked with the parent's own key (X-Service-Account). A sub-account's own key
 * does not hold its parent's database.
 */
export async function effectiveRow(deps: Pick<Deps, 'db'>, ctx: RequestContext): Promise<{ row: CustomerDatabaseRow; held: boolean } | undefined> {
  const owner = await databaseOwnerOf(deps.db, ctx.account.id);
  const row = owner === null ? undefined : await rowOf(deps, owner);
  return row && { row, held: owner === ctx.account.id || owner === ctx.keyAccount.id };
}

/** GET /database: the status of the database this account's mail is written to (its own, else its parent's). */
export async function getDatabaseStatus({ deps, ctx }: { deps: Pick<Deps, 'db'>; ctx: RequestContext }): Promise<DatabaseStatus> {
  const found = await effectiveRow(deps, ctx);
  if (!found) return NOT_CONNECTED;
  return found.held ? await statusOf(deps, found.row) : await inheritedStatusOf(deps, found.row, ctx.account.id);
}

/**
 * DELETE /database: the account's own database is forgotten with the writes still waiting for it (they stop); the
 * schema and rows in the customer's database stay. 404 database_not_connected when the account has none of its own.
 */
export async function deleteDatabase({ deps, ctx }: { deps: Pick<Deps, 'db' | 'logger'>; ctx: RequestContext }): Promise<void> {
  const accountId = ctx.account.id;
  const dropped = await deps.db.transaction(async () => {
    const deleted = changes(await deps.db.delete(customerDatabases).where(eq(customerDatabases.accountId, accountId)));
    if (deleted === 0) throw new ApiError('database_not_connected', 'No database is set on this account.');
    return await dropWritesOf(deps.db, accountId);
  });
  deps.logger.info('customer_db.deleted', { accountId, droppedWrites: dropped });
}

/** The CLI's `database status --account ID`: the status an API call for that account would answer. */
export async function databaseStatusOf(deps: Pick<Deps, 'db'>, accountId: string): Promise<DatabaseStatus> {
  const owner = await databaseOwnerOf(deps.db, accountId);
  const row = owner === null ? undefined : await rowOf(deps, owner);
  return row ? await statusOf(deps, row) : NOT_CONNECTED;
}
