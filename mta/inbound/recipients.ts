import type { Statement } from 'better-sqlite3';
import { and, eq, sql } from 'drizzle-orm';
import { type Db, clientOf } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { type RecordKind, type RecordStatus, emails } from '../../db/schema/index.js';
import { deriveFlags } from '../../server/core/domain-checks.js';
import type { Config } from '../../server/config.js';
import { OWNER_SQL } from '../../server/customer-db/outbox.js';
import { parseVerp } from '../verp.js';

/**
 * Who an inbound RCPT TO is for (issue 12, point 2). There are no mailboxes: every local part of a receiving domain
 * is accepted, for the account that owns the domain, when it (or its parent) has a customer database to hold the
 * mail. The VERP addresses of sent mail take asynchronous bounces and complaints, `fbl@MAIL_HOSTNAME` takes feedback
 * loop reports. Anything else is refused, the same way whether the domain is unknown, known but not receiving, or an
 * account without a database: the server is never a relay and tells nothing about what it hosts.
 */

export type Recipient =
  | { kind: 'mailbox'; address: string; accountId: string }
  | { kind: 'bounce'; address: string; emailId: string; recipientIndex: number }
  | { kind: 'feedback'; address: string }
  | { kind: 'refused' };

/** The local part feedback loops are pointed at, on MAIL_HOSTNAME. */
export const FEEDBACK_LOCAL_PART = 'fbl';

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  // With the account whose database would hold the mail, in one query: every RCPT runs it (twice: at RCPT and at the
  // end of DATA), so it is plain SQL, compiled once, its rows read as arrays rather than mapped through drizzle.
  domainsNamed: clientOf(db)
    .prepare(
      `select d.account_id, d.record_status, ${OWNER_SQL} as owner
       from domains d where d.name = ? order by d.id`,
    )
    .raw() as Statement<[string], [string, string, string | null]>,
  email: db.select({ id: emails.id, to: emails.to }).from(emails).where(and(eq(emails.id, p('id')), eq(emails.sandbox, false))).prepare(),
}));

function splitAddress(address: string): { local: string; domain: string } | null {
  const at = address.lastIndexOf('@');
  if (at <= 0 || at === address.length - 1) return null;
  return { local: address.slice(0, at), domain: address.slice(at + 1).toLowerCase().replace(/\.$/, '') };
}

export function judgeRecipient(deps: { db: Db; config: Config; secretKey: Buffer | null }, raw: string): Recipient {
  const address = raw.trim();
  const parts = splitAddress(address);
  if (!parts) return { kind: 'refused' };
  const host = deps.config.mailHostname.toLowerCase();
  if (parts.domain === host) {
    if (parts.local.toLowerCase() === FEEDBACK_LOCAL_PART) return { kind: 'feedback', address: address.toLowerCase() };
    const verp = parseVerp(address, host);
    if (!verp) return { kind: 'refused' };
    const email = statements(deps.db).email.get({ id: verp.emailId });
    if (!email || verp.recipientIndex >= email.to.length) return { kind: 'refused' };
    return { kind: 'bounce', address: address.toLowerCase(), ...verp };
  }
  // Mail for a customer's domain needs somewhere to go: without the secret key no database can be read.
  if (!deps.secretKey) return { kind: 'refused' };
  const relay = deps.config.smtpRelayUrl !== null;
  let receiving: { accountId: string; owner: string | null } | undefined;
  for (const [accountId, recordStatus, owner] of statements(deps.db).domainsNamed.all(parts.domain)) {
    if (!deriveFlags(JSON.parse(recordStatus) as Record<RecordKind, RecordStatus>, relay).receiving) continue;
    receiving = { accountId, owner };
    break;
  }
  if (!receiving || receiving.owner === null) return { kind: 'refused' };
  return { kind: 'mailbox', address: `${parts.local}@${parts.domain}`, accountId: receiving.accountId };
}
