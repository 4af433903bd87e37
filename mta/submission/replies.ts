import type { ApiError, ErrorCode } from '../../server/shared/errors.js';
import { AUTH_LOCKOUT } from '../../server/core/submission-auth.js';
import { SmtpReply } from '../inbound/receive.js';

/**
 * How each refusal of the rules (an ApiError, as POST /emails would answer it) is worded on the submission ports
 * (docs/api/decisions.md section 10): the reply code and enhanced status code, then the API's own message. A 4xx
 * asks the client to retry later (a rate limit, today's quota, our own failure), a 5xx not to retry as is.
 */
export const SUBMISSION_REPLIES: Partial<Record<ErrorCode, readonly [code: number, enhanced: string]>> = {
  invalid_key: [535, '5.7.8'],
  insufficient_scope: [535, '5.7.8'],
  account_not_found: [535, '5.7.8'],
  rate_limited: [450, '4.7.1'],
  suspended: [550, '5.7.1'],
  no_credits: [550, '5.7.1'],
  quota_exceeded: [451, '4.7.1'],
  domain_not_yours: [550, '5.7.1'],
  domain_not_ready: [550, '5.7.1'],
  recipient_suppressed: [550, '5.7.1'],
  invalid_request: [550, '5.7.1'],
  unavailable: [451, '4.3.0'],
  send_failed: [451, '4.3.0'],
  internal_error: [451, '4.3.0'],
};

/** The reply to AUTH, and to every connection, from an address locked out for failing too often. */
export const LOCKED_OUT = `4.7.0 Too many failed authentications from your address; try again in ${AUTH_LOCKOUT.lockMs / 60_000} minutes`;

export function replyFor(err: ApiError): SmtpReply {
  const [code, enhanced] = SUBMISSION_REPLIES[err.code] ?? [451, '4.3.0'];
  return new SmtpReply(code, `${enhanced} ${err.message}`);
}
