/**
 * What an SMTP reply or a failure to get one means for a recipient (docs/api/decisions.md section 3), as data: the reply's
 * enhanced status code when it carries one of the same class, else one derived from the basic code.
 */

export type Outcome = 'delivered' | 'bounced' | 'deferred';

export interface Classified {
  status: Outcome;
  dsn: string;
  detail: string;
}

/** Basic reply code class → outcome and the DSN used when the reply has no enhanced code. */
export const BASIC_CODE_CLASSES: readonly { pattern: RegExp; status: Outcome; dsn: string }[] = [
  { pattern: /^2\d\d$/, status: 'delivered', dsn: '2.0.0' },
  { pattern: /^4\d\d$/, status: 'deferred', dsn: '4.0.0' },
  { pattern: /^5\d\d$/, status: 'bounced', dsn: '5.0.0' },
];

/** Failures without a reply: each is temporary, with the DSN of RFC 3463 that names it. */
export const FAILURES: readonly { match: RegExp; dsn: string; detail: string }[] = [
  { match: /^(ECONNREFUSED)$/, dsn: '4.4.1', detail: 'connection refused' },
  { match: /^(EHOSTUNREACH|ENETUNREACH|EHOSTDOWN|ENETDOWN)$/, dsn: '4.4.1', detail: 'host or network unreachable' },
  { match: /^(ETIMEDOUT|ETIMEOUT|ECONNECTION_TIMEOUT|EGREETING)$/, dsn: '4.4.1', detail: 'no answer from host' },
  { match: /^(ECONNRESET|EPIPE|ECLOSED|EPROTOCOL|ESOCKET|ECONNECTION)$/, dsn: '4.4.2', detail: 'connection dropped' },
  { match: /^(EDNS|ENOTFOUND|ESERVFAIL|EDNS_TIMEOUT)$/, dsn: '4.4.3', detail: 'DNS lookup failed' },
  {
    match:
      /^(ETLS|ERR_TLS.*|ERR_SSL.*|EPROTO|UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT.*|DEPTH_ZERO_SELF_SIGNED_CERT|CERT_.*|ERR_TLS_CERT_ALTNAME_INVALID)$/,
    dsn: '4.7.5',
    detail: 'TLS negotiation failed',
  },
];

/** The DSN of a failed TLS negotiation. */
export const TLS_FAILED_DSN = '4.7.5';

const ENHANCED = /^(?:\d{3}[ -])?([245])\.(\d{1,3})\.(\d{1,3})(?=\s|$)/;

/** Classifies an SMTP reply: `code` the basic reply code, `text` the reply as the server sent it. */
export function classifyReply(code: number, text: string): Classified {
  const basic = String(code);
  const row = BASIC_CODE_CLASSES.find((r) => r.pattern.test(basic));
  const detail = text.trim() || basic;
  if (!row) return { status: 'deferred', dsn: '4.5.0', detail: `unexpected reply: ${detail}` };
  const stripped = detail.replace(/^\d{3}[ -]/, '');
  const enhanced = ENHANCED.exec(stripped);
  const dsn = enhanced && enhanced[1] === basic[0] ? `${enhanced[1]}.${enhanced[2]}.${enhanced[3]}` : row.dsn;
  return { status: row.status, dsn, detail };
}

/** Classifies a failure that produced no reply (connection, TLS, DNS); always temporary. */
export function classifyFailure(code: string | undefined, message: string): Classified {
  const row = FAILURES.find((r) => r.match.test(code ?? ''));
  return { status: 'deferred', dsn: row?.dsn ?? '4.4.0', detail: row ? `${row.detail}: ${message}` : message };
}
