import { dkimVerify } from 'mailauth';
import { simpleParser } from 'mailparser';
import { and, eq } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { domainKeys } from '../../db/schema/index.js';
import { dkimRecordValue } from '../../server/core/domains.js';
import { capturedMessageQuery, getCapturedMessage } from '../../server/core/emails.js';
import type { Deps } from '../../server/core/deps.js';
import { mailauthResolver } from '../../server/shared/dns/resolver.js';
import { ApiError } from '../../server/shared/errors.js';
import { actForAccount } from '../on-behalf.js';
import { type CapturedEntry, findCaptured } from './captured.js';
import { one } from '../../db/sql.js';

/**
 * One captured message for the operator: found in the store, opened by the API's own getCapturedMessage (its rules:
 * capture mode only, the email's own account), parsed with mailparser, and its DKIM signature checked with mailauth
 * through the service's resolver, as a receiver would check it (or, where DNS has no key, against the key the
 * service holds, and saying so).
 */

/** A UUID as the service writes ids: anything else names no email (and never reaches a query). */
const EMAIL_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface OpenedCapture {
  entry: CapturedEntry;
  raw: Buffer;
}

/** The captured message of `recipient` for email `emailId`; a 404 page when there is none to show. */
export async function openCaptured(deps: Pick<Deps, 'config' | 'db' | 'secretKey'>, emailId: string, recipient: string | undefined): Promise<OpenedCapture> {
  const query = capturedMessageQuery.safeParse({ recipient });
  const entry = EMAIL_ID.test(emailId) && query.success ? await findCaptured(deps.db, emailId, query.data.recipient) : undefined;
  if (!entry) throw new ApiError('email_not_found', 'No captured message of that recipient for that email.');
  const ctx = await actForAccount(deps.db, entry.accountId);
  return { entry, raw: await getCapturedMessage({ deps, ctx, id: emailId, recipient: entry.recipient }) };
}

export interface MessageParts {
  /** Every header field in order, unfolded. */
  headers: { name: string; value: string }[];
  html: string | null;
  text: string | null;
  /** Each attachment; an inline one (a part of multipart/related or disposition inline) with its Content-ID when it has one. */
  attachments: { filename: string; contentType: string; size: number; inline: boolean; contentId: string | null }[];
}

/**
 * The parts of a message. simpleParser holds it whole in memory, which is fine here: a send is at most 1 MB of
 * rendered content (MAX_RENDERED_BYTES) and its attachments fit a request body under 1 MiB, so a captured message is
 * at most about 2 MB.
 */
export async function partsOf(raw: Buffer): Promise<MessageParts> {
  const mail = await simpleParser(raw, { skipTextToHtml: true, skipTextLinks: true });
  return {
    headers: mail.headerLines.map(({ line }) => {
      const colon = line.indexOf(':');
      return {
        name: line.slice(0, colon),
        value: line
          .slice(colon + 1)
          .replace(/\r?\n[ \t]+/g, ' ')
          .trim(),
      };
    }),
    html: mail.html === false ? null : mail.html,
    text: mail.text ?? null,
    attachments: mail.attachments.map((a) => ({
      filename: a.filename ?? '(no name)',
      contentType: a.contentType,
      size: a.size,
      inline: a.related === true || a.contentDisposition === 'inline',
      contentId: a.cid ?? null,
    })),
  };
}

/**
 * Where the key a signature was checked against came from: the signing domain's DNS, as any receiver reads it; or,
 * when DNS had none (or did not answer), the public key this server holds for that domain and selector (its
 * domain_keys row), which is what capture mode's dev names (shop.test) are signed with and what their Signing record
 * would publish. `none`: neither had a key. `unread`: no key was read (mailauth stops before it when the body does not
 * match the signature's body hash).
 */
export type DkimKeySource = { from: 'dns' } | { from: 'held'; dns: 'none' | 'no answer' } | { from: 'none' } | { from: 'unread' };

export interface DkimSignatureVerdict {
  domain: string;
  selector: string | null;
  result: string;
  /** mailauth's reason, when it gives one (a missing key, a body hash that does not match). */
  comment: string | null;
  /** The Authentication-Results fragment mailauth would write. */
  info: string;
  key: DkimKeySource;
}

export type DkimVerdict = { ok: true; signatures: DkimSignatureVerdict[] } | { ok: false; error: string };

/** A DKIM key's DNS name (`selector._domainkey.domain`), as the key sources are kept: lower case, no trailing dot. */
const keyName = (name: string) => name.trim().toLowerCase().replace(/\.$/, '');

/**
 * The TXT answer of the public key `accountId` holds for `selector._domainkey.domain`: the Signing record's value
 * the domain page shows (dkimRecordValue), or null when the account holds no key for that domain and selector.
 */
async function heldKeyAnswer(db: Db, accountId: string, name: string): Promise<string[][] | null> {
  const at = name.indexOf('._domainkey.');
  if (at <= 0) return null;
  const selector = name.slice(0, at);
  const domain = name.slice(at + '._domainkey.'.length);
  const row = await one(
    db
      .select({ selector: domainKeys.selector, publicKey: domainKeys.dkimPublicKey })
      .from(domainKeys)
      .where(and(eq(domainKeys.accountId, accountId), eq(domainKeys.name, domain))),
  );
  return row && row.selector.toLowerCase() === selector ? [[dkimRecordValue(row.publicKey)]] : null;
}

/**
 * The DKIM verdict of each signature of the message, from mailauth. The key is read through the service's DNS
 * resolver first (the signing domain's published key, as any receiver reads it); where DNS has none or does not
 * answer, the public key the sending account holds for that domain and selector is used instead, and each verdict
 * says which key it was checked against. A signature that does not verify against the held key still fails. No
 * signature is an empty list. A failure to check at all is a verdict too, never an error page.
 */
export async function dkimVerdictOf(deps: Pick<Deps, 'db' | 'resolver' | 'clock' | 'logger'>, accountId: string, raw: Buffer): Promise<DkimVerdict> {
  const dns = mailauthResolver(deps.resolver);
  const sources = new Map<string, DkimKeySource>();
  const resolver = async (name: string, type: string): Promise<unknown[]> => {
    const isKey = type.toUpperCase() === 'TXT' && /\._domainkey\./i.test(name);
    if (!isKey) return dns(name, type);
    const key = keyName(name);
    try {
      const answer = await dns(name, type);
      sources.set(key, { from: 'dns' });
      return answer;
    } catch (err) {
      const held = await heldKeyAnswer(deps.db, accountId, key);
      if (held === null) {
        sources.set(key, { from: 'none' });
        throw err;
      }
      const code = (err as NodeJS.ErrnoException).code;
      sources.set(key, { from: 'held', dns: code === 'ENOTFOUND' || code === 'ENODATA' ? 'none' : 'no answer' });
      return held;
    }
  };
  try {
    const verdict = await dkimVerify(raw, { resolver: resolver as never, curTime: new Date(deps.clock.now()) });
    return {
      ok: true,
      signatures: verdict.results.map((r) => ({
        domain: r.signingDomain,
        selector: r.selector ?? null,
        result: String(r.status.result),
        comment: r.status.comment ?? null,
        info: r.info,
        key: (r.selector && sources.get(keyName(`${r.selector}._domainkey.${r.signingDomain}`))) || { from: 'unread' },
      })),
    };
  } catch (err) {
    deps.logger.warn('dashboard.dkim_check_failed', { err });
    return { ok: false, error: err instanceof Error ? err.message : String(err) };
  }
}
