import { dkimVerify } from 'mailauth';
import { simpleParser } from 'mailparser';
import { capturedMessageQuery, getCapturedMessage } from '../../server/core/emails.js';
import type { Deps } from '../../server/core/deps.js';
import { mailauthResolver } from '../../server/shared/dns/resolver.js';
import { ApiError } from '../../server/shared/errors.js';
import { actForAccount } from '../on-behalf.js';
import { type CapturedEntry, findCaptured } from './captured.js';

/**
 * One captured message for the operator: found in the store, opened by the API's own getCapturedMessage (its rules:
 * capture mode only, the email's own account), parsed with mailparser, and its DKIM signature checked with mailauth
 * through the service's resolver, as a receiver would check it.
 */

/** A UUID as the service writes ids: anything else names no email (and never reaches a query). */
const EMAIL_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface OpenedCapture {
  entry: CapturedEntry;
  raw: Buffer;
}

/** The captured message of `recipient` for email `emailId`; a 404 page when there is none to show. */
export function openCaptured(deps: Pick<Deps, 'config' | 'db' | 'secretKey'>, emailId: string, recipient: string | undefined): OpenedCapture {
  const query = capturedMessageQuery.safeParse({ recipient });
  const entry = EMAIL_ID.test(emailId) && query.success ? findCaptured(deps.db, emailId, query.data.recipient) : undefined;
  if (!entry) throw new ApiError('email_not_found', 'No captured message of that recipient for that email.');
  const ctx = actForAccount(deps.db, entry.accountId);
  return { entry, raw: getCapturedMessage({ deps, ctx, id: emailId, recipient: entry.recipient }) };
}

export interface MessageParts {
  /** Every header field in order, unfolded. */
  headers: { name: string; value: string }[];
  html: string | null;
  text: string | null;
  attachments: { filename: string; contentType: string; size: number }[];
}

/**
 * The parts of a message. simpleParser holds it whole in memory, which is fine here: a send is at most 1 MB of
 * rendered content (MAX_RENDERED_BYTES), so a captured message is about that size.
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
    attachments: mail.attachments.map((a) => ({ filename: a.filename ?? '(no name)', contentType: a.contentType, size: a.size })),
  };
}

export interface DkimSignatureVerdict {
  domain: string;
  selector: string | null;
  result: string;
  /** mailauth's reason, when it gives one (a missing key, a body hash that does not match). */
  comment: string | null;
  /** The Authentication-Results fragment mailauth would write. */
  info: string;
}

export type DkimVerdict = { ok: true; signatures: DkimSignatureVerdict[] } | { ok: false; error: string };

/**
 * The DKIM verdict of each signature of the message, from mailauth through the service's DNS resolver (the signing
 * domain's published key, as any receiver reads it). No signature is an empty list. A failure to check at all is a
 * verdict too, never an error page.
 */
export async function dkimVerdictOf(deps: Pick<Deps, 'resolver' | 'clock' | 'logger'>, raw: Buffer): Promise<DkimVerdict> {
  try {
    const verdict = await dkimVerify(raw, { resolver: mailauthResolver(deps.resolver) as never, curTime: new Date(deps.clock.now()) });
    return {
      ok: true,
      signatures: verdict.results.map((r) => ({
        domain: r.signingDomain,
        selector: r.selector ?? null,
        result: String(r.status.result),
        comment: r.status.comment ?? null,
        info: r.info,
      })),
    };
  } catch (err) {
    deps.logger.warn('dashboard.dkim_check_failed', { err });
    return { ok: false, error: err instanceof Error ? err.message : String(err) };
  }
}
