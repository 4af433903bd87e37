import pg from 'pg';
import { CUSTOMER_DB_LIMITS, boundedClientConfig, classifyConnectError } from '../../db/customer/connect.js';
import { cutErrorText, customerErrorText } from '../../db/customer/error-text.js';
import { migrateCustomerDb } from '../../db/customer/schema.js';
import { type CustomerDbTarget, type CustomerPgConfig, parseCustomerDbUrl, pgClientConfig, resolveCustomerDbHost } from './url.js';
import type { CustomerDatabaseRow } from '../../db/schema/index.js';
import type { Deps } from '../core/deps.js';
import { decryptSecret } from '../shared/secrets.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';

/**
 * From a customer's URL to a checked connection: the host resolved through the service's resolver and refused when
 * any address is private, loopback or reserved (ALLOW_PRIVATE_TARGETS lifts that), then pg configured field by field
 * for the checked address (server/customer-db/url.ts), with every step bounded.
 */

export const PG_BOUNDS = {
  connectTimeoutMs: CUSTOMER_DB_LIMITS.connectionTimeoutMillis,
  statementTimeoutMs: CUSTOMER_DB_LIMITS.statementTimeoutMillis,
  idleInTransactionTimeoutMs: CUSTOMER_DB_LIMITS.idleInTransactionTimeoutMillis,
};

export type Reached = { ok: true; configs: CustomerPgConfig[] } | { ok: false; blocked: boolean; message: string };

/**
 * Addresses of one host tried in turn, at most: each may take the whole connect timeout, and a name with dozens of
 * unroutable addresses would otherwise hold `POST /database`, or one of the writer's connections, for minutes.
 */
export const MAX_DB_ADDRESSES = 3;

/** The pg configs to try, one per checked address (IPv4 first, the first MAX_DB_ADDRESSES), or why there are none. */
export async function configsFor(deps: Pick<Deps, 'resolver' | 'config'>, target: CustomerDbTarget): Promise<Reached> {
  const check = await resolveCustomerDbHost(deps, target.host);
  if (check.kind === 'blocked') return { ok: false, blocked: true, message: 'The database host resolves to a private, loopback or reserved address.' };
  if (check.kind === 'dns_error') return { ok: false, blocked: false, message: `could not connect: the host name does not resolve (${check.reason})` };
  return { ok: true, configs: check.addresses.slice(0, MAX_DB_ADDRESSES).map((address) => pgClientConfig(target, address, PG_BOUNDS)) };
}

/** The URL sealed in a row, opened and parsed again (it was checked when stored). */

export function targetOf(secretKey: Buffer, row: Pick<CustomerDatabaseRow, 'accountId' | 'urlSealed'>): CustomerDbTarget {
  return parseCustomerDbUrl(decryptSecret(secretKey, row.urlSealed, SEAL_CONTEXTS.customerDbUrl(row.accountId)).toString('utf8'));
}

/**
 * Why a connection could not be opened, as the status says it; `atNetwork` when the next checked address may do
 * better. An error the server sends during the handshake that is none of the known ones (too many connections, the
 * server starting up or shutting down) is still a failure to connect.
 */
export function connectFailure(err: unknown): { atNetwork: boolean; message: string } {
  const { stage, message } = classifyConnectError(err);
  return { atNetwork: stage === 'connect', message: stage === 'other' ? customerErrorText(err, { prefix: 'could not connect: ' }) : message };
}

export type ConnectResult = { ok: true; schemaVersion: number } | { ok: false; blocked: boolean; message: string };

/**
 * Connects to the target (each checked address in turn while the failure is at the network), creates or upgrades the
 * `service` schema, and closes. The message of a failure says which step failed: connecting, TLS, logging in or
 * creating the schema.
 */
export async function connectAndMigrate(deps: Pick<Deps, 'resolver' | 'config' | 'logger'>, target: CustomerDbTarget): Promise<ConnectResult> {
  const reached = await configsFor(deps, target);
  if (!reached.ok) return reached;
  let failure = 'could not connect';
  for (const config of reached.configs) {
    const client = new pg.Client(boundedClientConfig(config));
    client.on('error', (err) => deps.logger.warn('customer_db.connect_error', { host: target.host, message: cutErrorText(err.message) }));
    try {
      try {
        await client.connect();
      } catch (err) {
        const { atNetwork, message } = connectFailure(err);
        failure = message;
        if (atNetwork) continue;
        return { ok: false, blocked: false, message: failure };
      }
      try {
        return { ok: true, schemaVersion: await migrateCustomerDb(client) };
      } catch (err) {
        return { ok: false, blocked: false, message: customerErrorText(err, { prefix: 'creating the schema failed: ' }) };
      }
    } finally {
      await client.end().catch(() => undefined);
    }
  }
  return { ok: false, blocked: false, message: failure };
}
