import { createHmac, randomBytes } from 'node:crypto';

/** The prefix of a webhook signing secret, as the Standard Webhooks specification writes it. */
export const WEBHOOK_SECRET_PREFIX = 'whsec_';

/** A new endpoint secret: `whsec_` and the standard base64 (with padding) of 32 random bytes (docs/api/decisions.md section 7). */
export function newWebhookSecret(): string {
  return `${WEBHOOK_SECRET_PREFIX}${randomBytes(32).toString('base64')}`;
}

/** The Standard Webhooks key: the bytes the base64 after `whsec_` stands for. */
function standardKey(secret: string): Buffer {
  const encoded = secret.startsWith(WEBHOOK_SECRET_PREFIX) ? secret.slice(WEBHOOK_SECRET_PREFIX.length) : secret;
  return Buffer.from(encoded, 'base64');
}

/**
 * The headers of one post of `body` (the exact bytes sent): the spec's `X-Service-*` headers, whose signature is keyed
 * with the whole secret string (as Stripe does), and the Standard Webhooks `webhook-*` headers, keyed with the decoded
 * secret, so receivers can verify with the `standardwebhooks` or `svix` libraries unchanged. The names are spelled as
 * they go on the wire (node:http sends a name as given): `X-Service-*` as docs/api/contract.md writes them, since receivers that look
 * headers up case-sensitively (PHP's getallheaders()) find them only so (docs/api/decisions.md section 7); `webhook-*` as the Standard
 * Webhooks specification writes them.
 */
export function signedHeaders(secret: string, delivery: { id: string; type: string }, timestampSec: number, body: string): Record<string, string> {
  const t = String(Math.floor(timestampSec));
  const serviceSignature = createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${t}.${body}`, 'utf8').digest('hex');
  const standardSignature = createHmac('sha256', standardKey(secret)).update(`${delivery.id}.${t}.${body}`, 'utf8').digest('base64');
  return {
    'Content-Type': 'application/json',
    'X-Service-Delivery': delivery.id,
    'X-Service-Event': delivery.type,
    'X-Service-Signature': `t=${t},v1=${serviceSignature}`,
    'webhook-id': delivery.id,
    'webhook-timestamp': t,
    'webhook-signature': `v1,${standardSignature}`,
  };
}
