// The Postgres schema: every table of db/schema/ (SQLite) in pg-core, the same names, columns, keys and indexes, the
// types mapped as columns.ts says; tests/schema-parity.test.ts holds the two equal.
export * from './accounts.js';
export * from './api-keys.js';
export * from './settings.js';
export * from './domain-keys.js';
export * from './domains.js';
export * from './emails.js';
export * from './email-events.js';
export * from './outbound-messages.js';
export * from './outbound-recipients.js';
export * from './idempotency-keys.js';
export * from './suppressions.js';
export * from './webhook-endpoints.js';
export * from './webhook-deliveries.js';
export * from './customer-databases.js';
export * from './customer-db-writes.js';
export * from './captured-messages.js';
export * from './dashboard-sessions.js';
export * from './webhook-attempts.js';
export * from './change-counters.js';
export * from './operator-messages.js';
export * from './templates.js';
export * from './template-versions.js';
export * from './submitted-messages.js';
export * from './rate-hits.js';
export * from './rate-counts.js';
export * from './inbound-spool-records.js';
