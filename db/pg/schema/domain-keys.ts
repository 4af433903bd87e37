import { pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn, timestampColumn } from './columns.js';

/** What an account publishes for a domain name: ownership token, DKIM selector and key pair (db/schema/domain-keys.ts). */
export const domainKeys = pgTable(
  'domain_keys',
  {
    id: idColumn(),
    accountId: text('account_id')
      .notNull()
      .references(() => accounts.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    token: text('token').notNull(),
    selector: text('selector').notNull(),
    /** base64 of the DER SubjectPublicKeyInfo, as published in `p=`. */
    dkimPublicKey: text('dkim_public_key').notNull(),
    /** PKCS#8 PEM sealed with the server's secret key (server/shared/secrets.ts). */
    dkimPrivateKeySealed: text('dkim_private_key_sealed').notNull(),
    createdAt: createdAtColumn(),
    /** When its domain was deleted; null while a domain uses it. Orders the pruning of kept keys. */
    releasedAt: timestampColumn('released_at'),
  },
  (t) => [uniqueIndex('domain_keys_account_name_idx').on(t.accountId, t.name)],
);

export type DomainKeyRow = typeof domainKeys.$inferSelect;
