import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { breakQueue, expectError, expectOk, newSender, newSubSender, receipt, type Sender, sendEmail } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * The send log (docs/api/contract.md, Email and Emails endpoints): GET /emails newest first with `status`,
 * `since` (zone offset or Z; at or after), keyset paging and its errors; GET /emails/{id} with every Email field and
 * `events`; `404 email_not_found` for an id not on this account.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service.close();
});

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const list = (s: { key: string }, query = '', account?: string) => service.api('GET', `/emails${query}`, { key: s.key, account });

async function sendOk(s: Sender, body: Record<string, unknown> = receipt(s.from)): Promise<string> {
  const res = await sendEmail(service, s.key, body);
  expectOk(res);
  // The send result as the API document describes it (with the trial warning of a new account).
  expectDocumented(res);
  return res.body.id as string;
}

async function sendFailed(s: Sender): Promise<void> {
  const restore = await breakQueue(service);
  try {
    const res = await sendEmail(service, s.key, receipt(s.from, 'fail@example.net'));
    expectError(res, 502, 'send_failed');
    expectDocumented(res);
  } finally {
    await restore();
  }
}

describe('GET /emails and GET /emails/{id}: the standard failures', () => {
  runCommonAuthTests(() => service, { method: 'GET', path: '/emails', scope: 'emails:read' });
  // Any id: the key, scope and account header are checked before the email is looked up.
  runCommonAuthTests(() => service, { method: 'GET', path: '/emails/01a00000-0000-7000-8000-000000000000', scope: 'emails:read' });
});

describe('GET /emails/{id}', () => {
  it('answers every Email field with its type, and events', async () => {
    const s = await newSender(service);
    const id = await sendOk(s, receipt(`"Acme Billing" <${s.from}>`, ['ann@example.net', 'bob@example.net'], { tags: { order: 'A-1' } }));
    const res = await service.api('GET', `/emails/${id}`, { key: s.key });
    expect(res.status).toBe(200);
    expectDocumented(res);
    expect(res.body).toEqual({
      id,
      from: s.from,
      to: ['ann@example.net', 'bob@example.net'],
      subject: 'Your receipt R-1001',
      template: 'receipt',
      source: 'api',
      // A built-in has no version; nothing was attached.
      templateVersion: null,
      attachments: [],
      status: 'sent',
      error: null,
      createdAt: new Date(service.clock.now()).toISOString(),
      deliveredAt: null,
      bouncedAt: null,
      complainedAt: null,
      sandbox: false,
      tags: { order: 'A-1' },
      events: [],
    });
    expect(res.body.createdAt).toMatch(ISO_MS);
  });

  it('a sandbox send is logged with sandbox true, status sandboxed and no events', async () => {
    const s = await newSender(service);
    const id = await sendOk(s, receipt(s.from, 'ann@example.net', { sandbox: true }));
    const res = await service.api('GET', `/emails/${id}`, { key: s.key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id, sandbox: true, status: 'sandboxed', error: null, events: [] });
  });

  it('a failed send is logged with status failed, an error and no events', async () => {
    const s = await newSender(service);
    await sendFailed(s);
    const failed = (await list(s, '?status=failed')).body.data[0];
    const res = await service.api('GET', `/emails/${failed.id}`, { key: s.key });
    expect(res.status).toBe(200);
    expectDocumented(res);
    expect(res.body).toMatchObject({ status: 'failed', sandbox: false, to: ['fail@example.net'], events: [] });
    expect(typeof res.body.error).toBe('string');
    expect(res.body.error.length).toBeGreaterThan(0);
  });

  it('an unknown id is 404 email_not_found', async () => {
    const s = await newSender(service);
    const unknown = await service.api('GET', '/emails/01a00000-0000-7000-8000-000000000000', { key: s.key });
    expectError(unknown, 404, 'email_not_found');
    expectDocumented(unknown);
    expectError(await service.api('GET', '/emails/not-an-id', { key: s.key }), 404, 'email_not_found');
  });

  it('another account’s email is 404 email_not_found', async () => {
    const s = await newSender(service);
    const other = await newSender(service);
    const id = await sendOk(other);
    expectError(await service.api('GET', `/emails/${id}`, { key: s.key }), 404, 'email_not_found');
  });

  it('a sub-account’s email is read with its account header, not from the parent', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    const sent = await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id });
    expectOk(sent);
    expectError(await service.api('GET', `/emails/${sent.body.id}`, { key: parent.key }), 404, 'email_not_found');
    const viaHeader = await service.api('GET', `/emails/${sent.body.id}`, { key: parent.key, account: sub.id });
    expect(viaHeader.status).toBe(200);
    expect(viaHeader.body).toMatchObject({ id: sent.body.id, from: sub.from });
  });
});

describe('GET /emails', () => {
  it('lists the account’s sends newest first, as Email objects without events', async () => {
    const s = await newSender(service);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      ids.push(await sendOk(s, receipt(s.from, `n${i}@example.net`)));
      service.clock.advance(1000);
    }
    const res = await list(s);
    expect(res.status).toBe(200);
    expectDocumented(res);
    expect(res.body.nextCursor).toBeNull();
    expect(res.body.data.map((e: { id: string }) => e.id)).toEqual([...ids].reverse());
    expect(res.body.data[0]).toMatchObject({ id: ids[2], to: ['n2@example.net'], status: 'sent', sandbox: false });
    expect(res.body.data[0].events).toBeUndefined();
  });

  it('an account with no sends has an empty page', async () => {
    const { key } = await service.newAccount();
    const res = await service.api('GET', '/emails', { key });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [], nextCursor: null });
  });

  it('shows only the acting account’s sends', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    const own = await sendOk(parent);
    const subSend = await sendEmail(service, parent.key, receipt(sub.from), { account: sub.id });
    expectOk(subSend);
    expect((await list(parent)).body.data.map((e: { id: string }) => e.id)).toEqual([own]);
    expect((await list(parent, '', sub.id)).body.data.map((e: { id: string }) => e.id)).toEqual([subSend.body.id]);
  });

  it('status filters to sent, sandboxed or failed', async () => {
    const s = await newSender(service);
    const sent = await sendOk(s);
    const sandboxed = await sendOk(s, receipt(s.from, 'ann@example.net', { sandbox: true }));
    await sendFailed(s);
    const ids = async (status: string) =>
      (await list(s, `?status=${status}`)).body.data.map((e: { id: string; status: string }) => ({ id: e.id, status: e.status }));
    expect(await ids('sent')).toEqual([{ id: sent, status: 'sent' }]);
    expect(await ids('sandboxed')).toEqual([{ id: sandboxed, status: 'sandboxed' }]);
    const failed = await ids('failed');
    expect(failed).toHaveLength(1);
    expect(failed[0].status).toBe('failed');
    expect((await list(s)).body.data).toHaveLength(3);
  });

  it('since keeps sends created at or after it, with Z or a zone offset', async () => {
    const s = await newSender(service, { credits: 10 });
    service.clock.set('2030-06-01T10:00:00.000Z');
    const early = await sendOk(s, receipt(s.from, 'early@example.net'));
    service.clock.set('2030-06-01T11:00:00.000Z');
    const middle = await sendOk(s, receipt(s.from, 'middle@example.net'));
    service.clock.set('2030-06-01T12:00:00.000Z');
    const late = await sendOk(s, receipt(s.from, 'late@example.net'));
    const since = async (value: string) => {
      const res = await list(s, `?since=${encodeURIComponent(value)}`);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.data.map((e: { id: string }) => e.id);
    };
    expect(await since('2030-06-01T11:00:00Z')).toEqual([late, middle]);
    expect(await since('2030-06-01T11:00:00.000Z')).toEqual([late, middle]);
    expect(await since('2030-06-01T13:00:00+02:00')).toEqual([late, middle]);
    expect(await since('2030-06-01T06:30:00-04:30')).toEqual([late, middle]);
    expect(await since('2030-06-01T11:00:00.001Z')).toEqual([late]);
    expect(await since('2030-06-01T09:59:59.999Z')).toEqual([late, middle, early]);
    expect(await since('2030-06-01T12:00:00.001Z')).toEqual([]);
    expect((await list(s, `?since=${encodeURIComponent('2030-06-01T13:00:00+02:00')}&status=sent`)).body.data).toHaveLength(2);
  });

  it.each([
    ['since=yesterday', 'since'],
    ['since=2030-06-01', 'since'],
    ['since=2030-06-01T11:00:00', 'since'],
    ['since=', 'since'],
    ['status=delivered', 'status'],
    ['status=SENT', 'status'],
    ['limit=0', 'limit'],
    ['limit=101', 'limit'],
    ['limit=abc', 'limit'],
    ['limit=-1', 'limit'],
  ])('%s is 422 invalid_request naming %s', async (query, field) => {
    const s = await newSender(service);
    const res = await list(s, `?${query}`);
    expectError(res, 422, 'invalid_request');
    expect(res.body.error.message).toContain(field);
  });

  it('limit 1 and limit 100 are accepted', async () => {
    const s = await newSender(service);
    await sendOk(s);
    expect((await list(s, '?limit=1')).status).toBe(200);
    expect((await list(s, '?limit=100')).status).toBe(200);
  });

  it('pages with nextCursor, newest first, without repeats or gaps, and a send during the walk does not shift it', async () => {
    const s = await newSender(service);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push(await sendOk(s, receipt(s.from, `p${i}@example.net`)));
    const expected = [...ids].reverse();
    const first = await list(s, '?limit=3');
    expect(first.body.data.map((e: { id: string }) => e.id)).toEqual(expected.slice(0, 3));
    expect(typeof first.body.nextCursor).toBe('string');
    await sendOk(s, receipt(s.from, 'during@example.net'));
    const second = await list(s, `?limit=3&cursor=${encodeURIComponent(first.body.nextCursor)}`);
    expect(second.body.data.map((e: { id: string }) => e.id)).toEqual(expected.slice(3, 6));
    const third = await list(s, `?limit=3&cursor=${encodeURIComponent(second.body.nextCursor)}`);
    expect(third.body.data.map((e: { id: string }) => e.id)).toEqual(expected.slice(6));
    expect(third.body.nextCursor).toBeNull();
  });

  it('the default page is 25', async () => {
    const s = await newSender(service);
    await Promise.all(Array.from({ length: 26 }, (_, i) => sendOk(s, receipt(s.from, `d${i}@example.net`, { sandbox: true }))));
    const res = await list(s);
    expect(res.body.data).toHaveLength(25);
    expect(res.body.nextCursor).not.toBeNull();
  });

  it('a cursor from another list, another account or made up is 422 invalid_cursor', async () => {
    const s = await newSender(service);
    await sendOk(s);
    await sendOk(s);
    await service.newKey(s.account.id);
    const keys = await service.api('GET', '/keys?limit=1', { key: s.key });
    expect(keys.body.nextCursor).toEqual(expect.any(String));
    const other = await newSender(service);
    await sendOk(other);
    await sendOk(other);
    const theirs = await list(other, '?limit=1');
    expect(theirs.body.nextCursor).toEqual(expect.any(String));
    for (const cursor of [keys.body.nextCursor, theirs.body.nextCursor, 'garbage', Buffer.from('{"k":"x"}').toString('base64url'), '']) {
      const res = await list(s, `?cursor=${encodeURIComponent(cursor)}`);
      expectError(res, 422, 'invalid_cursor');
      expectDocumented(res);
    }
  });
});
