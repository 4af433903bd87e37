import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import {
  breakQueue,
  connectDomain,
  emailRows,
  exhaustCredits,
  expectError,
  expectOk,
  fillSandboxLog,
  getAccount,
  idempotencyRow,
  insertRunningClaim,
  newSender,
  newSubSender,
  outboundMessagesOf,
  queued,
  queuedRecipientsOf,
  rawRequest,
  receipt,
  recipients,
  sendEmail as postEmail,
  setDomainState,
  suspendByOperator,
  uniqueDomain,
  useQuota,
} from './helpers/sending.js';
import { expectDocumented } from './helpers/openapi.js';
import { startService, type ApiResponse, type TestService } from './helpers/service.js';

/**
 * POST /emails (docs/api/contract.md, Emails): a send from a verified domain is queued durably before
 * the 200; the from-domain check; the seven checks in the spec's order, each adjacent pair refused by the earlier one;
 * a sandbox send running every check; and a queue that cannot take the message answering 502.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService({ DEFAULT_DAILY_QUOTA: '10', GRACE_EMAILS: '3', TRIAL_DAYS: '14', GRACE_DAYS: '3' });
});
afterAll(async () => {
  await service.close();
});

/** POST /emails, every answer of this file checked against the API document: its status and body for POST /emails. */
async function sendEmail(...args: Parameters<typeof postEmail>): Promise<ApiResponse> {
  const res = await postEmail(...args);
  expectDocumented(res);
  return res;
}

describe('POST /emails: the standard failures', () => {
  runCommonAuthTests(() => service, { method: 'POST', path: '/emails', scope: 'emails:send', body: receipt('billing@example.com') });
});

describe('a send from a verified domain', () => {
  it('answers 200 with the send result and logs the email as sent', async () => {
    const s = await newSender(service, { credits: 10 });
    const res = await sendEmail(service, s.key, receipt(s.from));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id: expect.any(String), sandbox: false });
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    const rows = await emailRows(service, s.account.id);
    expect(rows.map((r) => ({ id: r.id, status: r.status, sandbox: r.sandbox }))).toEqual([{ id: res.body.id, status: 'sent', sandbox: false }]);
    const got = await service.api('GET', `/emails/${res.body.id}`, { key: s.key });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ id: res.body.id, status: 'sent', from: s.from, to: ['customer@example.net'], template: 'receipt', sandbox: false });
  });

  it('has put one rendered message and one queued row per unique recipient in the durable queue by the time it answers', async () => {
    const s = await newSender(service, { credits: 10 });
    const res = await sendEmail(
      service,
      s.key,
      receipt(`"Acme Billing" <${s.from}>`, ['ann@example.net', 'Bob@example.org', 'bob@EXAMPLE.org', 'carl@example.com', 'ann@example.net']),
    );
    expectOk(res);
    const { message, recipients: rows } = await queued(service, res.body.id);
    expect(message).toMatchObject({
      id: res.body.id,
      accountId: s.account.id,
      fromAddress: s.from,
      fromHeader: `"Acme Billing" <${s.from}>`,
      replyToHeader: null,
      subject: 'Your receipt R-1001',
    });
    expect(message!.html).toContain('$42.00');
    expect(message!.html).toContain('R-1001');
    expect(message!.text).toContain('Total: $42.00');
    expect(message!.messageId).toMatch(/^<[^<>@\s]+@[^<>@\s]+>$/);
    expect(rows).toHaveLength(3);
    expect(rows.map((r) => r.recipient.toLowerCase()).sort()).toEqual(['ann@example.net', 'bob@example.org', 'carl@example.com']);
    expect(rows.map((r) => r.recipientDomain).sort()).toEqual(['example.com', 'example.net', 'example.org']);
    for (const r of rows) expect(r).toMatchObject({ status: 'queued', attempts: 0, nextAttemptAt: service.clock.now(), lockedBy: null });
    expect((await emailRows(service, s.account.id)).map((r) => r.status)).toEqual(['sent']);
    expect(await outboundMessagesOf(service, s.account.id)).toHaveLength(1);
  });

  it('sends from an address written in upper case', async () => {
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(`Billing@${s.domain.toUpperCase()}`)));
  });

  it('sends from a sub-account’s own verified domain', async () => {
    const parent = await newSender(service, { credits: 10 });
    const sub = await newSubSender(service, parent.key);
    const res = await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id });
    expectOk(res);
    expect((await queued(service, res.body.id)).message).toMatchObject({ accountId: sub.id, fromAddress: sub.from });
    expect(await emailRows(service, parent.account.id)).toHaveLength(0);
  });
});

describe('the from-domain (check 6)', () => {
  it('a domain this account has not connected is 403 domain_not_yours', async () => {
    const s = await newSender(service);
    expectError(await sendEmail(service, s.key, receipt(`billing@${uniqueDomain('unconnected')}`)), 403, 'domain_not_yours');
  });

  it('a domain verified on another account is 403 domain_not_yours', async () => {
    const s = await newSender(service);
    const other = await newSender(service);
    expectError(await sendEmail(service, s.key, receipt(other.from)), 403, 'domain_not_yours');
  });

  it('a subdomain of a connected domain is 403 domain_not_yours', async () => {
    const s = await newSender(service);
    expectError(await sendEmail(service, s.key, receipt(`billing@news.${s.domain}`)), 403, 'domain_not_yours');
  });

  it('a parent’s domain is not the sub-account’s, nor the sub-account’s the parent’s', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    expectError(await sendEmail(service, parent.key, receipt(parent.from), { account: sub.id }), 403, 'domain_not_yours');
    expectError(await sendEmail(service, parent.key, receipt(sub.from)), 403, 'domain_not_yours');
  });

  it('a connected domain whose ownership is not proven is 403 domain_not_ready', async () => {
    const { key } = await service.newAccount();
    const domain = uniqueDomain();
    await connectDomain(service, key, domain, { state: 'pending' });
    expectError(await sendEmail(service, key, receipt(`billing@${domain}`)), 403, 'domain_not_ready');
  });

  it('a domain with ownership proven but sending not on (no Signing and SPF) is 403 domain_not_ready', async () => {
    const { key } = await service.newAccount();
    const domain = uniqueDomain();
    await connectDomain(service, key, domain, { state: 'ownership' });
    expectError(await sendEmail(service, key, receipt(`billing@${domain}`)), 403, 'domain_not_ready');
  });

  it('a domain that lost its records stops sending', async () => {
    const s = await newSender(service);
    expectOk(await sendEmail(service, s.key, receipt(s.from)));
    await setDomainState(service, s.domainId, 'ownership');
    expectError(await sendEmail(service, s.key, receipt(s.from)), 403, 'domain_not_ready');
    await setDomainState(service, s.domainId, 'pending');
    expectError(await sendEmail(service, s.key, receipt(s.from)), 403, 'domain_not_ready');
  });

  it('a refused domain queues nothing', async () => {
    const { account, key } = await service.newAccount();
    const domain = uniqueDomain();
    await connectDomain(service, key, domain, { state: 'ownership' });
    expectError(await sendEmail(service, key, receipt(`billing@${domain}`)), 403, 'domain_not_ready');
    expectError(await sendEmail(service, key, receipt(`billing@${uniqueDomain()}`)), 403, 'domain_not_yours');
    expect(await outboundMessagesOf(service, account.id)).toEqual([]);
    expect((await emailRows(service, account.id)).filter((r) => r.status === 'sent')).toEqual([]);
  });
});

describe('request size and rate', () => {
  it('a body of 1 MB is 413 body_too_large; one byte less is read', async () => {
    const s = await newSender(service);
    const json = JSON.stringify(receipt(s.from));
    const pad = (size: number) => json + ' '.repeat(size - Buffer.byteLength(json));
    const headers = { 'content-type': 'application/json' };
    expectError(await service.api('POST', '/emails', { key: s.key, rawBody: pad(1024 * 1024), headers }), 413, 'body_too_large');
    expectOk(await service.api('POST', '/emails', { key: s.key, rawBody: pad(1024 * 1024 - 1), headers }));
  });

  it('over the per-key rate is 429 rate_limited', async () => {
    const limited = await startService({ RATE_LIMIT_PER_KEY: '2' });
    try {
      const s = await newSender(limited); // one request of the key's two
      expectOk(await sendEmail(limited, s.key, receipt(s.from)));
      expectError(await sendEmail(limited, s.key, receipt(s.from)), 429, 'rate_limited');
    } finally {
      await limited.close();
    }
  });
});

describe('502 send_failed: the queue cannot take the message', () => {
  it('logs the send as failed, queues, counts and charges nothing, frees the Idempotency-Key; the same request then succeeds', async () => {
    const s = await newSender(service, { credits: 5 });
    const body = receipt(s.from, ['ann@example.net', 'bob@example.net']);
    const headers = { 'Idempotency-Key': 'order-502' };
    const restore = await breakQueue(service);
    let failed;
    try {
      failed = await sendEmail(service, s.key, body, { headers });
    } finally {
      await restore();
    }
    expectError(failed, 502, 'send_failed');

    const log = await service.api('GET', '/emails?status=failed', { key: s.key });
    expect(log.status).toBe(200);
    expect(log.body.data).toHaveLength(1);
    expect(log.body.data[0]).toMatchObject({
      status: 'failed',
      from: s.from,
      to: ['ann@example.net', 'bob@example.net'],
      sandbox: false,
      error: expect.any(String),
    });
    expect(await outboundMessagesOf(service, s.account.id)).toEqual([]);
    expect(await queuedRecipientsOf(service, s.account.id)).toEqual([]);
    const account = await getAccount(service, s.key);
    expect(account.sending).toMatchObject({ sentToday: 0, totalSent: 0 });
    expect(account.credits).toMatchObject({ balance: 5, totalUsed: 0 });
    expect(await idempotencyRow(service, s.account.id, 'order-502')).toBeUndefined();

    const retry = await sendEmail(service, s.key, body, { headers });
    expectOk(retry);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(retry.body.id).not.toBe(log.body.data[0].id);
    expect((await queued(service, retry.body.id)).recipients).toHaveLength(2);
    expect((await getAccount(service, s.key)).credits).toMatchObject({ balance: 4, totalUsed: 1 });
  });
});

/**
 * docs/api/contract.md: "(1) the key, its scope and the account header; (2) the Idempotency-Key; (3) whether the account may send at
 * all (suspended, or over its daily quota), and for a sub-account whether its parent may; (4) whether the paying
 * account has credit; (5) the body; (6) the from-domain; (7) the suppression list". docs/api/decisions.md section 2: after step
 * 5, more recipients than the quota has left is also quota_exceeded. Then the sandbox limit. Each request below fails
 * two adjacent checks; the earlier one answers.
 */
describe('the check order: a request failing two adjacent checks gets the earlier one’s answer', () => {
  const REASON = 'Paused while we review a spike in complaints.';
  const LONG_KEY = 'k'.repeat(256);

  it('(1) before (2): an unknown key with an empty Idempotency-Key is 401 invalid_key', async () => {
    const s = await newSender(service);
    const res = await rawRequest(service, 'POST', '/emails', {
      headers: { authorization: `Bearer ms_${'Z'.repeat(40)}`, 'content-type': 'application/json', 'idempotency-key': '' },
      body: JSON.stringify(receipt(s.from)),
    });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('invalid_key');
  });

  it('(1) before (2): a key without emails:send and a 256-character Idempotency-Key is 403 insufficient_scope', async () => {
    const s = await newSender(service);
    const readOnly = await service.newKey(s.account.id, ['emails:read']);
    expectError(await sendEmail(service, readOnly, receipt(s.from), { headers: { 'Idempotency-Key': LONG_KEY } }), 403, 'insufficient_scope');
  });

  it('(1) before (2): a foreign X-Service-Account and a 256-character Idempotency-Key is 404 account_not_found', async () => {
    const s = await newSender(service);
    const other = await newSender(service);
    const theirs = await newSubSender(service, other.key);
    expectError(await sendEmail(service, s.key, receipt(s.from), { account: theirs.id, headers: { 'Idempotency-Key': LONG_KEY } }), 404, 'account_not_found');
  });

  it('(2) before (3): a 256-character Idempotency-Key on a suspended account is 400 invalid_idempotency_key', async () => {
    const s = await newSender(service);
    await suspendByOperator(service, s.account.id, REASON);
    expectError(await sendEmail(service, s.key, receipt(s.from), { headers: { 'Idempotency-Key': LONG_KEY } }), 400, 'invalid_idempotency_key');
  });

  it('(2) before (3): a 256-character Idempotency-Key with the quota used up is 400 invalid_idempotency_key', async () => {
    const s = await newSender(service);
    await useQuota(service, s.account.id, 0);
    expectError(await sendEmail(service, s.key, receipt(s.from), { headers: { 'Idempotency-Key': LONG_KEY } }), 400, 'invalid_idempotency_key');
  });

  it('(2) before (3): a running claim on a suspended account is 409 idempotency_in_progress', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    await insertRunningClaim(service, s.account.id, 'order-1', body);
    await suspendByOperator(service, s.account.id, REASON);
    expectError(await sendEmail(service, s.key, body, { headers: { 'Idempotency-Key': 'order-1' } }), 409, 'idempotency_in_progress');
  });

  it('(2) before (3): a key used with another body, on a since suspended account, is 422 idempotency_mismatch; the same body replays', async () => {
    const s = await newSender(service);
    const body = receipt(s.from);
    const first = await sendEmail(service, s.key, body, { headers: { 'Idempotency-Key': 'order-2' } });
    expectOk(first);
    await suspendByOperator(service, s.account.id, REASON);
    expectError(
      await sendEmail(service, s.key, receipt(s.from, 'other@example.net'), { headers: { 'Idempotency-Key': 'order-2' } }),
      422,
      'idempotency_mismatch',
    );
    const replay = await sendEmail(service, s.key, body, { headers: { 'Idempotency-Key': 'order-2' } });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(first.body);
  });

  it('(3) before (4): a suspended account without credits is 403 suspended', async () => {
    const s = await newSender(service);
    await suspendByOperator(service, s.account.id, REASON);
    await exhaustCredits(service, s.account.id);
    expectError(await sendEmail(service, s.key, receipt(s.from)), 403, 'suspended', REASON);
  });

  it('(3) before (4): an account over its daily quota without credits is 429 quota_exceeded', async () => {
    const s = await newSender(service);
    await useQuota(service, s.account.id, 0);
    await exhaustCredits(service, s.account.id);
    expectError(await sendEmail(service, s.key, receipt(s.from)), 429, 'quota_exceeded');
  });

  it('(3) before (4): a sub-account whose parent is suspended and without credits is 403 suspended', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await suspendByOperator(service, parent.account.id, REASON);
    await exhaustCredits(service, parent.account.id);
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 403, 'suspended', `The parent account cannot send. ${REASON}`);
  });

  it('(3) before (4): a sub-account whose parent is over its quota and without credits is 429 quota_exceeded', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await useQuota(service, parent.account.id, 0);
    await exhaustCredits(service, parent.account.id);
    expectError(await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id }), 429, 'quota_exceeded');
  });

  it('(4) before (5): no credits and a body that is not JSON is 402 no_credits', async () => {
    const s = await newSender(service);
    await exhaustCredits(service, s.account.id);
    expectError(await service.api('POST', '/emails', { key: s.key, rawBody: '{"from": ', headers: { 'content-type': 'application/json' } }), 402, 'no_credits');
  });

  it('(4) before (5): no credits and an invalid body is 402 no_credits', async () => {
    const s = await newSender(service);
    await exhaustCredits(service, s.account.id);
    expectError(await sendEmail(service, s.key, { ...receipt(s.from), cc: 'x@example.net' }), 402, 'no_credits');
  });

  it('(5) before the recipients-left check: an invalid body with more recipients than the quota has left is 422 invalid_request', async () => {
    const s = await newSender(service);
    await useQuota(service, s.account.id, 2);
    expectError(await sendEmail(service, s.key, { ...receipt(s.from, recipients(3)), cc: 'x@example.net' }), 422, 'invalid_request', /cc/);
  });

  it('the recipients-left check before (6): more recipients than the quota has left on a domain not yours is 429 quota_exceeded', async () => {
    const s = await newSender(service);
    await useQuota(service, s.account.id, 2);
    expectError(await sendEmail(service, s.key, receipt(`billing@${uniqueDomain()}`, recipients(3))), 429, 'quota_exceeded');
  });

  it('(5) before (6): a body that is not JSON is 400 invalid_json whatever the domain', async () => {
    const s = await newSender(service);
    expectError(
      await service.api('POST', '/emails', { key: s.key, rawBody: `{"from":"billing@${uniqueDomain()}"`, headers: { 'content-type': 'application/json' } }),
      400,
      'invalid_json',
    );
  });

  it('(5) before (6): an invalid body from a domain not yours is 422 invalid_request', async () => {
    const s = await newSender(service);
    const body = receipt(`billing@${uniqueDomain()}`);
    expectError(await sendEmail(service, s.key, { ...body, template: { name: 'receipt' } }), 422, 'invalid_request', /template\.total/);
  });

  it('(5) before (6): an invalid body from a domain not ready is 422 invalid_request', async () => {
    const s = await newSender(service);
    await setDomainState(service, s.domainId, 'ownership');
    expectError(await sendEmail(service, s.key, receipt(s.from, recipients(51))), 422, 'invalid_request', /\bto\b/);
  });

  it('(6) before (7): a domain not yours and a suppressed recipient is 403 domain_not_yours', async () => {
    const s = await newSender(service);
    expect((await service.api('POST', '/suppressions', { key: s.key, body: { address: 'gone@example.net' } })).status).toBe(201);
    expectError(await sendEmail(service, s.key, receipt(`billing@${uniqueDomain()}`, 'gone@example.net')), 403, 'domain_not_yours');
  });

  it('(6) before (7): a domain not ready and a recipient suppressed on the parent’s list is 403 domain_not_ready', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await setDomainState(service, sub.domainId, 'ownership');
    expect((await service.api('POST', '/suppressions', { key: parent.key, body: { address: 'gone@example.net' } })).status).toBe(201);
    expectError(await sendEmail(service, parent.key, receipt(sub.from, 'gone@example.net'), { account: sub.id }), 403, 'domain_not_ready');
  });

  it('(7) before the sandbox limit: a suppressed recipient with 1000 sandbox sends in the last 24 h is 422 recipient_suppressed', async () => {
    const s = await newSender(service);
    await fillSandboxLog(service, s.account.id, 1000);
    expectError(await sendEmail(service, s.key, receipt(s.from, 'ok@example.net', { sandbox: true })), 429, 'sandbox_limit');
    expect((await service.api('POST', '/suppressions', { key: s.key, body: { address: 'gone@example.net' } })).status).toBe(201);
    expectError(await sendEmail(service, s.key, receipt(s.from, 'gone@example.net', { sandbox: true })), 422, 'recipient_suppressed');
  });
});

/** docs/api/contract.md: "When true every check runs"; docs/api/decisions.md section 2: "A sandbox send runs every check." */
describe('a sandbox send runs every check', () => {
  const REASON = 'Paused while we review a spike in complaints.';
  const cases: [string, (s: Awaited<ReturnType<typeof newSender>>) => Promise<Record<string, unknown>> | Record<string, unknown>, number, string][] = [
    ['a suspended account', async (s) => (await suspendByOperator(service, s.account.id, REASON), receipt(s.from)), 403, 'suspended'],
    ['the daily quota used up', async (s) => (await useQuota(service, s.account.id, 0), receipt(s.from)), 429, 'quota_exceeded'],
    ['more recipients than the quota has left', async (s) => (await useQuota(service, s.account.id, 2), receipt(s.from, recipients(3))), 429, 'quota_exceeded'],
    ['no credits', async (s) => (await exhaustCredits(service, s.account.id), receipt(s.from)), 402, 'no_credits'],
    ['an invalid body', (s) => ({ ...receipt(s.from), bcc: 'x@example.net' }), 422, 'invalid_request'],
    ['a domain not yours', () => receipt(`billing@${uniqueDomain()}`), 403, 'domain_not_yours'],
    ['a domain not ready', async (s) => (await setDomainState(service, s.domainId, 'ownership'), receipt(s.from)), 403, 'domain_not_ready'],
    [
      'a suppressed recipient',
      async (s) => {
        expect((await service.api('POST', '/suppressions', { key: s.key, body: { address: 'gone@example.net' } })).status).toBe(201);
        return receipt(s.from, ['ok@example.net', 'gone@example.net']);
      },
      422,
      'recipient_suppressed',
    ],
  ];
  it.each(cases)('%s', async (_, arrange, status, code) => {
    const s = await newSender(service);
    const body = await arrange(s);
    expectError(await sendEmail(service, s.key, { ...body, sandbox: true }), status, code);
    expect((await emailRows(service, s.account.id)).filter((r) => r.status === 'sandboxed')).toEqual([]);
  });
});

describe('a sandbox send that passes every check', () => {
  it('is logged sandboxed and nothing is queued', async () => {
    const s = await newSender(service, { credits: 3 });
    const res = await sendEmail(service, s.key, receipt(s.from, recipients(2), { sandbox: true }));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id: expect.any(String), sandbox: true });
    expect((await emailRows(service, s.account.id)).map((r) => ({ id: r.id, status: r.status, sandbox: r.sandbox }))).toEqual([
      { id: res.body.id, status: 'sandboxed', sandbox: true },
    ]);
    expect(await queued(service, res.body.id)).toEqual({ message: undefined, recipients: [] });
  });

  it('sandbox false is an ordinary send', async () => {
    const s = await newSender(service);
    const res = await sendEmail(service, s.key, receipt(s.from, 'ann@example.net', { sandbox: false }));
    expectOk(res);
    expect(res.body.sandbox).toBe(false);
    expect((await queued(service, res.body.id)).recipients).toHaveLength(1);
  });
});
