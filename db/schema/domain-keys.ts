import { sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { accounts } from './accounts.js';
import { createdAtColumn, idColumn } from './columns.js';

/**
 * What an account publishes for a domain name: the ownership token, the DKIM selector and key pair. Kept when the
 * domain is deleted, so reconnecting the same name returns the same records.
 */
export const domainKeys = sqliteTable(
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
    /** PKCS#8 PEM sealed with the server's secret key (server/secrets.ts). */
    dkimPrivateKeySealed: text('dkim_private_key_sealed').notNull(),
    createdAt: createdAtColumn(),
  },
  (t) => [uniqueIndex('domain_keys_account_name_idx').on(t.accountId, t.name)],
);

export type DomainKeyRow = typeof domainKeys.$inferSelect;
