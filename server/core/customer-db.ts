import { eq } from 'drizzle-orm';
import { z } from 'zod';
import { describeTarget, parseGivenCustomerDbUrl } from '../customer-db/url.js';
import { type CustomerDatabaseRow, customerDatabases } from '../../db/schema/index.js';
import { iso, isoOrNull } from '../shared/clock.js';
import { connectAndMigrate, targetOf } from '../customer-db/connection.js';
import { databaseOwnerOf, dropWritesOf, pendingWrites, pendingWritesOf, requeueSetAside } from './customer-db-outbox.js';
import { isCurrentConnection, markTested, markUnreachable } from './customer-db-status.js';
import type { Deps } from './deps.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { encryptSecret } from '../shared/secrets.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';
import { assertAccountExists } from './accounts.js';
import type { RequestContext } from './context.js';

/** The Database endpoints (api.md, Database; decisions.md section 8): the rules, without HTTP. */

export const connectDatabaseInput = z.strictObject({
  // Its form is judged by parseGivenCustomerDbUrl: 422 invalid_url, naming the part at fault.
  url: z.string(),
});

/** api.md, Database status. With no database, `connected` is false and the rest empty (null; `pending` 0). */
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

const NOT_CONNECTED: DatabaseStatus = {
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

function statusOf(deps: Pick<Deps, 'db'>, row: CustomerDatabaseRow, pending = pendingWrites(deps.db, row.accountId)): DatabaseStatus {
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

function rowOf(deps: Pick<Deps, 'db'>, owner: string): CustomerDatabaseRow | undefined {
  return deps.db.select().from(customerDatabases).where(eq(customerDatabases.accountId, owner)).get();
}

/**
 * A parent's database as one of its sub-accounts' own keys sees it (the keys a parent hands its customers): that it is
 * connected and whether it works, and how many of the sub-account's own writes wait, never where the parent's database
 * is (host, port, name, user) or what went wrong with it (its last error names hosts and users), nor the writes of the
 * parent and its other sub-accounts.
 */
function inheritedStatusOf(deps: Pick<Deps, 'db'>, row: CustomerDatabaseRow, accountId: string): DatabaseStatus {
  return { ...statusOf(deps, row, pendingWritesOf(deps.db, row.accountId, accountId)), host: null, port: null, database: null, user: null, lastError: null };
}

/**
 * The database the acting account's mail goes to (its own, else its parent's), and whether the asker holds it: the
 * account's own database, or the parent's asked with the parent's own key (X-Service-Account). A sub-account's own key
 * does not hold its parent's database.
 */
function effectiveRow(deps: Pick<Deps, 'db'>, ctx: RequestContext): { row: CustomerDatabaseRow; held: boolean } | undefined {
  const owner = databaseOwnerOf(deps.db, ctx.account.id);
  const row = owner === null ? undefined : rowOf(deps, owner);
  return row && { row, held: owner === ctx.account.id || owner === ctx.keyAccount.id };
}

/** GET /database: the status of the database this account's mail is written to (its own, else its parent's). */
export function getDatabaseStatus({ deps, ctx }: { deps: Deps; ctx: RequestContext }): DatabaseStatus {
  const found = effectiveRow(deps, ctx);
  if (!found) return NOT_CONNECTED;
  return found.held ? statusOf(deps, found.row) : inheritedStatusOf(deps, found.row, ctx.account.id);
}

/**
 * POST /database: a server that can keep a secret (503 not_configured); the URL parsed as untrusted input (422
 * invalid_url); its host resolved and refused when private, loopback or reserved (422 blocked_host); a connection and
 * the `service` schema created (422 database_unreachable, saying which step failed). Only then is the URL stored,
 * sealed, replacing the account's earlier one (whose database is left as it is); writes still waiting go to the new one.
 */
export async function connectDatabase({ deps, ctx, input }: { deps: Deps; ctx: RequestContext; input: z.output<typeof connectDatabaseInput> }): Promise<DatabaseStatus> {
  if (!deps.secretKey) throw new ApiError('not_configured', 'This server cannot store secrets (SECRET_KEY=off), so no database URL can be kept.');
  const target = parseGivenCustomerDbUrl(input.url);
  const result = await connectAndMigrate(deps, target);
  if (!result.ok) {
    if (result.blocked) throw new ApiError('blocked_host', result.message);
    throw new ApiError('database_unreachable', `The database could not be used: ${result.message}.`);
  }
  const now = deps.clock.now();
  const accountId = ctx.account.id;
  const row: CustomerDatabaseRow = {
    accountId,
    connectionId: newId(now),
    urlSealed: encryptSecret(deps.secretKey, input.url, SEAL_CONTEXTS.customerDbUrl(accountId)),
    ...describeTarget(target),
    state: 'connected',
    schemaVersion: result.schemaVersion,
    lastOkAt: now,
    lastError: null,
    lastErrorKind: null,
    failures: 0,
    nextAttemptAt: now,
    updatedAt: now,
    createdAt: now,
  };
  const { accountId: _key, createdAt: _created, ...replace } = row;
  const requeued = deps.db.transaction((tx) => {
    assertAccountExists(tx, accountId);
    tx.insert(customerDatabases).values(row).onConflictDoUpdate({ target: customerDatabases.accountId, set: replace }).run();
    // Writes set aside for what the old database refused get their chance in the new one.
    return requeueSetAside(tx, accountId, now);
  });
  if (requeued > 0) deps.logger.info('customer_db.set_aside_requeued', { accountId, count: requeued });
  deps.logger.info('customer_db.connected', { accountId, host: target.host, port: target.port, database: target.database, sslMode: target.sslMode, schemaVersion: result.schemaVersion });
  deps.onCustomerDbQueued();
  return statusOf(deps, rowOf(deps, accountId) ?? row);
}

/**
 * POST /database/test: connects to the stored URL now (the account's, else its parent's when the parent's key asks)
 * and answers the fresh status;
 * a failure is recorded in the status (state, lastError) and answered as 422 blocked_host or database_unreachable.
 */
export async function testDatabase({ deps, ctx }: { deps: Deps; ctx: RequestContext }): Promise<DatabaseStatus> {
  const found = effectiveRow(deps, ctx);
  // A sub-account's own key cannot make the service connect to its parent's database, nor record the result there.
  if (!found) throw new ApiError('database_not_connected', 'No database is set on this account.');
  if (!found.held) throw new ApiError('database_not_connected', "No database is set on this account: its mail goes to its parent account's, which only the parent's key can test.");
  const { row } = found;
  let result;
  try {
    // With SECRET_KEY=off (a restart without the key) the sealed URL cannot be opened: a failure like any other.
    if (!deps.secretKey) throw new Error('no secret key');
    result = await connectAndMigrate(deps, targetOf(deps.secretKey, row));
  } catch {
    result = { ok: false as const, blocked: false, message: 'the stored URL could not be read with the server\'s secret key; connect the database again' };
  }
  const now = deps.clock.now();
  // Deleted while the test connected: gone, as for a test asked after the delete. Replaced meanwhile: the result is
  // about a database that is no longer the account's, so it is recorded nowhere and the new one's status answers.
  if (!isCurrentConnection(deps.db, row.accountId, row.connectionId)) {
    const current = rowOf(deps, row.accountId);
    if (!current) throw new ApiError('database_not_connected', 'No database is set on this account: it was deleted while the test connected.');
    return statusOf(deps, current);
  }
  if (!result.ok) {
    markUnreachable(deps.db, row.accountId, row.connectionId, result.message, now);
    if (result.blocked) throw new ApiError('blocked_host', result.message);
    throw new ApiError('database_unreachable', `The database could not be used: ${result.message}.`);
  }
  markTested(deps.db, row.accountId, row.connectionId, now, result.schemaVersion);
  // The database works now: writes it refused and that were set aside are tried again (set aside again if still refused).
  const requeued = requeueSetAside(deps.db, row.accountId, now);
  if (requeued > 0) deps.logger.info('customer_db.set_aside_requeued', { accountId: row.accountId, count: requeued });
  // Waiting writes go now rather than after the writer's next gap.
  deps.onCustomerDbQueued();
  return statusOf(deps, rowOf(deps, row.accountId) ?? row);
}

/**
 * DELETE /database: the account's own database is forgotten with the writes still waiting for it (they stop); the
 * schema and rows in the customer's database stay. 404 database_not_connected when the account has none of its own.
 */
export function deleteDatabase({ deps, ctx }: { deps: Deps; ctx: RequestContext }): void {
  const accountId = ctx.account.id;
  const dropped = deps.db.transaction(() => {
    const deleted = deps.db.delete(customerDatabases).where(eq(customerDatabases.accountId, accountId)).run().changes;
    if (deleted === 0) throw new ApiError('database_not_connected', 'No database is set on this account.');
    return dropWritesOf(deps.db, accountId);
  });
  deps.logger.info('customer_db.deleted', { accountId, droppedWrites: dropped });
}

/** The CLI's `database status --account ID`: the status an API call for that account would answer. */
export function databaseStatusOf(deps: Pick<Deps, 'db'>, accountId: string): DatabaseStatus {
  const owner = databaseOwnerOf(deps.db, accountId);
  const row = owner === null ? undefined : rowOf(deps, owner);
  return row ? statusOf(deps, row) : NOT_CONNECTED;
}
