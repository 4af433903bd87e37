import { createHmac, timingSafeEqual } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { newWebhookSecret, signedHeaders } from '../server/core/webhook-signing.js';
import { WEBHOOK_MAX_ATTEMPTS, WEBHOOK_RETRY_GAPS_MS, nextWebhookAttemptAt } from '../server/core/webhook-schedule.js';

/**
 * Webhook signatures as a receiver checks them: the spec's X-Service-Signature with independent code (createHmac and
 * timingSafeEqual over `<t>.<raw body>`), the Standard Webhooks headers with the `standardwebhooks` package unchanged.
 * And the retry schedule, as a table.
 */

/** What a receiver's own code does: parse `t=...,v1=...`, recompute over the raw body, compare in constant time. */
function verifyServiceSignature(secret: string, header: string, rawBody: string): boolean {
  const parts = new Map(header.split(',').map((p) => p.split('=', 2) as [string, string]));
  const t = parts.get('t');
  const v1 = parts.get('v1');
  if (!t || !v1 || !/^\d+$/.test(t)) return false;
  const expected = createHmac('sha256', secret).update(`${t}.${rawBody}`).digest();
  const given = Buffer.from(v1, 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const nowSec = () => Math.floor(Date.now() / 1000);
const body = JSON.stringify({
  id: '01938a2b-0000-7000-8000-000000000001',
  type: 'email.delivered',
  createdAt: '2026-03-10T12:00:00.000Z',
  data: { messageId: 'm1', recipient: 'ana@example.com', status: 'delivered', note: 'ünïcödé ✓' },
});
const delivery = { id: '01938a2b-0000-7000-8000-000000000001', type: 'email.delivered' };

describe('webhook secret', () => {
  it('is whsec_ and the standard base64 (with padding) of 32 random bytes', () => {
    const secrets = new Set<string>();
    for (let i = 0; i < 50; i++) {
      const secret = newWebhookSecret();
      expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
      const encoded = secret.slice('whsec_'.length);
      expect(encoded).toHaveLength(44);
      expect(Buffer.from(encoded, 'base64')).toHaveLength(32);
      expect(Buffer.from(encoded, 'base64').toString('base64')).toBe(encoded);
      secrets.add(secret);
    }
    expect(secrets.size).toBe(50);
  });
});

describe('signed headers', () => {
  const secret = newWebhookSecret();
  const t = nowSec();
  const headers = signedHeaders(secret, delivery, t, body);

  it('carries the spec headers and the Standard Webhooks headers', () => {
    // Spelled as they go on the wire: X-Service-* as docs/api/contract.md writes them (docs/api/decisions.md section 7), webhook-* as Standard Webhooks.
    expect(Object.keys(headers)).toEqual([
      'Content-Type',
      'X-Service-Delivery',
      'X-Service-Event',
      'X-Service-Signature',
      'webhook-id',
      'webhook-timestamp',
      'webhook-signature',
    ]);
    expect(headers['Content-Type']).toBe('application/json');
    expect(headers['X-Service-Delivery']).toBe(delivery.id);
    expect(headers['X-Service-Event']).toBe('email.delivered');
    expect(headers['X-Service-Signature']).toMatch(new RegExp(`^t=${t},v1=[0-9a-f]{64}$`));
    expect(headers['webhook-id']).toBe(delivery.id);
    expect(headers['webhook-timestamp']).toBe(String(t));
    expect(headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
  });

  it('X-Service-Signature verifies with independent HMAC code, keyed with the whole secret string', () => {
    expect(verifyServiceSignature(secret, headers['X-Service-Signature']!, body)).toBe(true);
    // Keyed with the decoded bytes instead, it would not verify.
    const wrongKey = createHmac('sha256', Buffer.from(secret.slice(6), 'base64'))
      .update(`${t}.${body}`)
      .digest('hex');
    expect(headers['X-Service-Signature']).not.toBe(`t=${t},v1=${wrongKey}`);
  });

  it('the Standard Webhooks headers verify with the standardwebhooks package unchanged', () => {
    const payload = new Webhook(secret).verify(body, headers);
    expect(payload).toEqual(JSON.parse(body));
  });

  it('a tampered body fails both', () => {
    const tampered = body.replace('delivered"', 'bounced"');
    expect(tampered).not.toBe(body);
    expect(verifyServiceSignature(secret, headers['X-Service-Signature']!, tampered)).toBe(false);
    expect(() => new Webhook(secret).verify(tampered, headers)).toThrow(/No matching signature/);
  });

  it('a tampered timestamp fails both', () => {
    const later = String(t + 1);
    const serviceHeader = headers['X-Service-Signature']!.replace(`t=${t}`, `t=${later}`);
    expect(verifyServiceSignature(secret, serviceHeader, body)).toBe(false);
    expect(() => new Webhook(secret).verify(body, { ...headers, 'webhook-timestamp': later })).toThrow(/No matching signature/);
  });

  it('another secret fails both', () => {
    const other = newWebhookSecret();
    expect(verifyServiceSignature(other, headers['X-Service-Signature']!, body)).toBe(false);
    expect(() => new Webhook(other).verify(body, headers)).toThrow(/No matching signature/);
  });

  it('a tampered delivery id fails the Standard Webhooks signature', () => {
    expect(() => new Webhook(secret).verify(body, { ...headers, 'webhook-id': `${delivery.id.slice(0, -1)}2` })).toThrow(/No matching signature/);
  });
});

describe('webhook retry schedule', () => {
  const MIN = 60_000;
  const start = Date.parse('2026-03-10T12:00:00.000Z');
  it.each([
    // [attempt that failed, gap to the next one (null: final)]
    [1, 1 * MIN],
    [2, 5 * MIN],
    [3, 30 * MIN],
    [4, 120 * MIN],
    [5, 720 * MIN],
    [6, null],
    [7, null],
  ] as const)('after failed attempt %i the next comes %s ms later', (attempts, gap) => {
    expect(nextWebhookAttemptAt(attempts, start)).toBe(gap === null ? null : start + gap);
  });

  it('is six attempts, each gap counted from the previous attempt', () => {
    expect(WEBHOOK_MAX_ATTEMPTS).toBe(6);
    expect(WEBHOOK_RETRY_GAPS_MS).toEqual([60_000, 300_000, 1_800_000, 7_200_000, 43_200_000]);
    // An attempt made late (the dispatcher was down) counts the next gap from when it happened.
    expect(nextWebhookAttemptAt(2, start + 17)).toBe(start + 17 + 5 * MIN);
  });
});
