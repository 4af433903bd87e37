import { markQueued } from '../../db/queue-wake.js';
import { type CustomerDatabaseRow, customerDatabases } from '../../db/schema/index.js';
import { assertAccountExists } from '../core/accounts.js';
import type { RequestContext } from '../core/context.js';
import { type connectDatabaseInput, effectiveRow, rowOf, statusOf, type DatabaseStatus } from '../core/customer-db.js';
import { requeueSetAside } from '../core/customer-db-outbox.js';
import { isCurrentConnection, markTested, markUnreachable } from '../core/customer-db-status.js';
import type { Deps } from '../core/deps.js';
import { ApiError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';
import { encryptSecret } from '../shared/secrets.js';
import type { z } from 'zod';
import { connectAndMigrate, targetOf } from './connection.js';
import { describeTarget, parseGivenCustomerDbUrl } from './url.js';

/** The Database endpoints that connect to the customer's database (POST /database, POST /database/test). */

/**
 * POST /database: a server that can keep a secret (503 not_configured); the URL parsed as untrusted input (422
 * invalid_url); its host resolved and refused when private, loopback or reserved (422 blocked_host); a connection and
 * the `service` schema created (422 database_unreachable, saying which step failed). Only then is the URL stored,
 * sealed, replacing the account's earlier one (whose database is left as it is); writes still waiting go to the new one.
 */
export async function connectDatabase({
  deps,
  ctx,
  input,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>;
  ctx: RequestContext;
  input: z.output<typeof connectDatabaseInput>;
}): Promise<DatabaseStatus> {
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
  const requeued = await deps.db.transaction(async (tx) => {
    await assertAccountExists(tx, accountId);
    await tx.insert(customerDatabases).values(row).onConflictDoUpdate({ target: customerDatabases.accountId, set: replace });
    // Writes set aside for what the old database refused get their chance in the new one; the writer looks at once.
    markQueued(deps.db, 'customer-db');
    return await requeueSetAside(tx, accountId, now);
  });
  if (requeued > 0) deps.logger.info('customer_db.set_aside_requeued', { accountId, count: requeued });
  deps.logger.info('customer_db.connected', {
    accountId,
    host: target.host,
    port: target.port,
    database: target.database,
    sslMode: target.sslMode,
    schemaVersion: result.schemaVersion,
  });
  return await statusOf(deps, (await rowOf(deps, accountId)) ?? row);
}

/**
 * POST /database/test: connects to the stored URL now (the account's, else its parent's when the parent's key asks)
 * and answers the fresh status;
 * a failure is recorded in the status (state, lastError) and answered as 422 blocked_host or database_unreachable.
 */
export async function testDatabase({
  deps,
  ctx,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>;
  ctx: RequestContext;
}): Promise<DatabaseStatus> {
  const found = await effectiveRow(deps, ctx);
  // A sub-account's own key cannot make the service connect to its parent's database, nor record the result there.
  if (!found) throw new ApiError('database_not_connected', 'No database is set on this account.');
  if (!found.held)
    throw new ApiError(
      'database_not_connected',
      "No database is set on this account: its mail goes to its parent account's, which only the parent's key can test.",
    );
  const { row } = found;
  let result;
  try {
    // With SECRET_KEY=off (a restart without the key) the sealed URL cannot be opened: a failure like any other.
    if (!deps.secretKey) throw new Error('no secret key');
    result = await connectAndMigrate(deps, targetOf(deps.secretKey, row));
  } catch {
    result = { ok: false as const, blocked: false, message: "the stored URL could not be read with the server's secret key; connect the database again" };
  }
  const now = deps.clock.now();
  // Deleted while the test connected: gone, as for a test asked after the delete. Replaced meanwhile: the result is
  // about a database that is no longer the account's, so it is recorded nowhere and the new one's status answers.
  if (!(await isCurrentConnection(deps.db, row.accountId, row.connectionId))) {
    const current = await rowOf(deps, row.accountId);
    if (!current) throw new ApiError('database_not_connected', 'No database is set on this account: it was deleted while the test connected.');
    return await statusOf(deps, current);
  }
  if (!result.ok) {
    await markUnreachable(deps.db, row.accountId, row.connectionId, result.message, now);
    if (result.blocked) throw new ApiError('blocked_host', result.message);
    throw new ApiError('database_unreachable', `The database could not be used: ${result.message}.`);
  }
  await markTested(deps.db, row.accountId, row.connectionId, now, result.schemaVersion);
  // The database works now: writes it refused and that were set aside are tried again (set aside again if still refused).
  const requeued = await requeueSetAside(deps.db, row.accountId, now);
  // Waiting writes go now rather than after the writer's next gap (the wake follows these statements, durable when they return).
  markQueued(deps.db, 'customer-db');
  if (requeued > 0) deps.logger.info('customer_db.set_aside_requeued', { accountId: row.accountId, count: requeued });
  return await statusOf(deps, (await rowOf(deps, row.accountId)) ?? row);
}
