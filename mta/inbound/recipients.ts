import { domainToASCII } from 'node:url';
import { and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { definePrepared } from '../../db/prepared.js';
import { type RecordKind, type RecordStatus, emails } from '../../db/schema/index.js';
import { deriveFlags } from '../../server/core/domain-checks.js';
import type { Config } from '../../server/shared/config.js';
import { OWNER_SQL } from '../../server/core/customer-db-outbox.js';
import { parseVerp, verpTrusted } from '../verp.js';
import { one, queryRow, queryRows } from '../../db/sql.js';

/**
 * Who an inbound RCPT TO is for. There are no mailboxes: every local part of a receiving domain
 * is accepted, for the account that owns the domain, when it (or its parent) has a customer database to hold the
 * mail. The VERP addresses of sent mail take asynchronous bounces and complaints, `fbl@MAIL_HOSTNAME` takes feedback
 * loop reports, `postmaster@` and `abuse@` MAIL_HOSTNAME (and a bare `postmaster`) take mail for the operator
 * (docs/api/decisions.md section 13; only with a secret key to seal it). Anything else is refused, the same way whether the
 * domain is unknown, known but not receiving, or an account without a database: the server is never a relay and
 * tells nothing about what it hosts.
 */

export type Recipient =
  | { kind: 'mailbox'; address: string; accountId: string }
  | { kind: 'bounce'; address: string; emailId: string; recipientIndex: number }
  | { kind: 'feedback'; address: string }
  | { kind: 'operator'; address: string }
  | { kind: 'refused' };

/** The local part feedback loops are pointed at, on MAIL_HOSTNAME. */
export const FEEDBACK_LOCAL_PART = 'fbl';

/** The local parts, on MAIL_HOSTNAME, whose mail is the operator's (RFC 5321 4.5.1, RFC 2142); any case. */
export const OPERATOR_LOCAL_PARTS: readonly string[] = ['postmaster', 'abuse'];

const p = sql.placeholder;

const statements = definePrepared((db) => ({
  // Only a send that went out has bounce addresses (a sandboxed or failed one has no events: docs/api/contract.md, Email).
  email: db
    .select({ id: emails.id, to: emails.to })
    .from(emails)
    .where(and(eq(emails.id, p('id')), eq(emails.status, 'sent')))
    .prepare(),
}));

/** Where a customer's domain's mail goes: the account owning it and the account whose database holds it. */
type Receiving = { accountId: string; owner: string } | null;

/** Domains judged at most this many; a cache grown past it (a client trying made-up names) starts again. */
export const RECEIVING_CACHE_DOMAINS = 10_000;

/**
 * What domainsNamed decided per domain name, kept while the `recipients` change counter stands still: triggers raise
 * it whenever a domain, an account's parent or a customer database changes, whoever writes (db/schema/change-counters.ts).
 * Every RCPT then costs one counter read instead of the query and the parse of the domain's record status.
 */
const receivingCaches = new WeakMap<Db, { stamp: number; domains: Map<string, Receiving> }>();

/** How many domains the RCPT check holds decisions for (for tests). */
export function receivingCacheSize(db: Db): number {
  return receivingCaches.get(db)?.domains.size ?? 0;
}

async function receivingDomain(db: Db, name: string, relay: boolean): Promise<Receiving> {
  let cache = receivingCaches.get(db);
  if (!cache) receivingCaches.set(db, (cache = { stamp: -1, domains: new Map() }));
  const stamp = (await queryRow<{ n: number }>(db, sql`select n from change_counters where name = 'recipients'`))!.n;
  if (stamp !== cache.stamp || cache.domains.size >= RECEIVING_CACHE_DOMAINS) {
    cache.domains.clear();
    cache.stamp = stamp;
  }
  const known = cache.domains.get(name);
  if (known !== undefined) return known;
  let receiving: Receiving = null;
  // With the account whose database would hold the mail, in one query; run once per domain while the change counter
  // stands still.
  const named = await queryRows<{ account_id: string; record_status: string; owner: string | null }>(
    db,
    sql`select d.account_id, d.record_status, ${sql.raw(OWNER_SQL)} as owner
       from domains d where d.name = ${name} order by d.id`,
  );
  for (const { account_id: accountId, record_status: recordStatus, owner } of named) {
    if (!deriveFlags(JSON.parse(recordStatus) as Record<RecordKind, RecordStatus>, relay).receiving) continue;
    receiving = owner === null ? null : { accountId, owner };
    break;
  }
  // Kept only while the counter it was read under stands (another RCPT may have seen it move meanwhile).
  if (cache.stamp === stamp) cache.domains.set(name, receiving);
  return receiving;
}

/**
 * The local part, and the domain as domains are stored (lower-case, an IDN as punycode): smtp-server hands RCPT
 * domains over in Unicode (it decodes `xn--` labels itself), so `bücher.example` and `xn--bcher-kva.example` must meet
 * the same stored name. A domain that is no valid name is refused.
 */
function splitAddress(address: string): { local: string; domain: string } | null {
  const at = address.lastIndexOf('@');
  if (at <= 0 || at === address.length - 1) return null;
  const domain = domainToASCII(address.slice(at + 1).replace(/\.$/, '')).toLowerCase();
  if (domain === '') return null;
  return { local: address.slice(0, at), domain };
}

export async function judgeRecipient(deps: { db: Db; config: Config; secretKey: Buffer | null }, raw: string): Promise<Recipient> {
  const address = raw.trim();
  const host = deps.config.mailHostname.toLowerCase();
  // RFC 5321 4.1.1.3: `RCPT TO:<postmaster>`, with no domain, is the server's own postmaster (smtp-server lets it by).
  const parts = address.toLowerCase() === 'postmaster' ? { local: address, domain: host } : splitAddress(address);
  if (!parts) return { kind: 'refused' };
  if (parts.domain === host) {
    const local = parts.local.toLowerCase();
    if (local === FEEDBACK_LOCAL_PART) return { kind: 'feedback', address: address.toLowerCase() };
    // Kept sealed or not at all: without the secret key the server stores no message (as for customers' domains).
    if (OPERATOR_LOCAL_PARTS.includes(local)) return deps.secretKey ? { kind: 'operator', address: `${local}@${host}` } : { kind: 'refused' };
    const verp = parseVerp(address, host, deps.secretKey);
    if (!verp) return { kind: 'refused' };
    const email = await one(statements(deps.db).email.execute({ id: verp.emailId }));
    if (!email || verp.recipientIndex >= email.to.length || !verpTrusted(verp, email.to.length, deps.secretKey)) return { kind: 'refused' };
    return { kind: 'bounce', address: address.toLowerCase(), emailId: verp.emailId, recipientIndex: verp.recipientIndex };
  }
  // Mail for a customer's domain needs somewhere to go: without the secret key no database can be read.
  if (!deps.secretKey) return { kind: 'refused' };
  const receiving = await receivingDomain(deps.db, parts.domain, deps.config.smtpRelayUrl !== null);
  if (!receiving) return { kind: 'refused' };
  return { kind: 'mailbox', address: `${parts.local}@${parts.domain}`, accountId: receiving.accountId };
}
