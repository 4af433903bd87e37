import { describeTarget, parseCustomerDbUrl } from '../../server/customer-db/url.js';
import { customerDatabases } from '../../db/schema/index.js';
import { SEAL_CONTEXTS } from '../../server/shared/seal-contexts.js';
import { newId } from '../../server/shared/ids.js';
import { encryptSecret } from '../../server/shared/secrets.js';
import type pg from 'pg';
import type { TestPostgres } from './postgres.js';
import type { TestService } from './service.js';

/** GET /database with no database set (docs/api/contract.md: `connected` false, the rest empty). */
export const NOT_CONNECTED = {
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

/**
 * A database stored as POST /database leaves it, without connecting: for URLs the API would now refuse or cannot
 * reach (a host that turned private, a URL sealed with another key).
 */
export async function storeDatabaseRow(service: TestService, accountId: string, url: string, sealWith: Buffer = service.deps.secretKey!): Promise<void> {
  const now = service.clock.now();
  await service.deps.db.insert(customerDatabases).values({
    accountId,
    connectionId: newId(now),
    urlSealed: encryptSecret(sealWith, url, SEAL_CONTEXTS.customerDbUrl(accountId)),
    ...describeTarget(parseCustomerDbUrl(url)),
    state: 'connected',
    schemaVersion: 1,
    lastOkAt: now,
    lastError: null,
    lastErrorKind: null,
    failures: 0,
    nextAttemptAt: now,
    updatedAt: now,
    createdAt: now,
  });
}

/** New empty databases on a test Postgres (named `prefix` and a count), and one-off queries in any database. */
export function scratchDatabases(pgServer: TestPostgres, prefix: string) {
  let made = 0;
  return {
    /** A new, empty database; its URL through `host`. */
    async fresh(host = 'localhost'): Promise<{ name: string; url: string }> {
      const name = `${prefix}${++made}`;
      await pgServer.admin(`create database ${name}`);
      return { name, url: pgServer.url(host).replace(new RegExp(`/${pgServer.database}$`), `/${name}`) };
    },
    async query(database: string, sql: string, params: unknown[] = []): Promise<pg.QueryResult> {
      const client = await pgServer.connect(database);
      try {
        return await client.query(sql, params);
      } finally {
        await client.end();
      }
    },
  };
}
