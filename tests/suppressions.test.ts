import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { suppress } from '../server/core/suppressions.js';
import { runCommonAuthTests } from './helpers/auth-cases.js';
import { expectDocumented } from './helpers/openapi.js';
import { emailRows, expectError, expectOk, newSender, newSubSender, outboundMessagesOf, receipt, sendEmail } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * Suppressions (docs/api/contract.md, Suppressions and the suppression rule; docs/api/decisions.md section 6):
 * POST /suppressions adds a manual entry (201, or 200 with the existing one), GET /suppressions lists newest first
 * with `address` and paging, DELETE /suppressions/{address} removes from this account's list only. A send to any
 * suppressed recipient, on the acting account's list or its parent's, is refused whole with
 * `422 recipient_suppressed` naming every suppressed recipient.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service.close();
});

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const add = (key: string, address: unknown, account?: string) => service.api('POST', '/suppressions', { key, account, body: { address } });
const listed = (key: string, query = '', account?: string) => service.api('GET', `/suppressions${query}`, { key, account });
const remove = (key: string, address: string, account?: string) => service.api('DELETE', `/suppressions/${encodeURIComponent(address)}`, { key, account });

describe('the standard failures', () => {
  runCommonAuthTests(() => service, { method: 'GET', path: '/suppressions', scope: 'suppressions:read' });
  runCommonAuthTests(() => service, { method: 'POST', path: '/suppressions', scope: 'suppressions:write', body: { address: 'someone@example.net' } });
  runCommonAuthTests(() => service, { method: 'DELETE', path: '/suppressions/someone%40example.net', scope: 'suppressions:write' });
});

describe('POST /suppressions', () => {
  it('adds a manual entry, lower-cased: 201', async () => {
    const { key } = await service.newAccount();
    const res = await add(key, 'Ann.Lee@Example.NET');
    expect(res.status).toBe(201);
    expectDocumented(res);
    expect(res.body).toEqual({
      id: expect.any(String),
      address: 'ann.lee@example.net',
      reason: 'manual',
      detail: expect.any(String),
      createdAt: new Date(service.clock.now()).toISOString(),
    });
    expect(res.body.createdAt).toMatch(ISO_MS);
  });

  it('an address already listed answers 200 with the existing entry', async () => {
    const { key } = await service.newAccount();
    const first = await add(key, 'bob@example.net');
    expect(first.status).toBe(201);
    service.clock.advance(5000);
    const again = await add(key, 'BOB@example.net');
    expect(again.status).toBe(200);
    expectDocumented(again);
    expect(again.body).toEqual(first.body);
    expect((await listed(key)).body.data).toHaveLength(1);
  });

  it.each([
    ['no @', 'bob.example.net'],
    ['no domain', 'bob@'],
    ['two addresses', 'bob@example.net, ann@example.net'],
    ['a display name', 'Bob <bob@example.net>'],
    ['an empty string', ''],
    ['a number', 7],
    ['null', null],
  ])('an invalid address (%s) is 422 invalid_request', async (_, address) => {
    const { key } = await service.newAccount();
    expectError(await add(key, address), 422, 'invalid_request', /address/);
  });

  it('a missing address, an unknown field and a body that is not JSON are refused', async () => {
    const { key } = await service.newAccount();
    expectError(await service.api('POST', '/suppressions', { key, body: {} }), 422, 'invalid_request', /address/);
    expectError(await service.api('POST', '/suppressions', { key, body: { address: 'bob@example.net', reason: 'bounce' } }), 422, 'invalid_request', /reason/);
    expectError(
      await service.api('POST', '/suppressions', { key, rawBody: '{"address":', headers: { 'content-type': 'application/json' } }),
      400,
      'invalid_json',
    );
  });
});

describe('POST /suppressions: the address as given is bounded', () => {
  it('320 characters (spaces around the address included) are accepted; 321 are 422 invalid_request naming address', async () => {
    const { key } = await service.newAccount();
    const at = await add(key, 'ann@example.net'.padStart(320, ' '));
    expect(at.status).toBe(201);
    expect(at.body.address).toBe('ann@example.net');
    expectError(await add(key, 'bob@example.net'.padStart(321, ' ')), 422, 'invalid_request', 'address: must be at most 320 characters');
    expectError(await add(key, `a@${'b'.repeat(100_000)}.example`), 422, 'invalid_request', 'address: must be at most 320 characters');
  });
});

describe('GET /suppressions', () => {
  it('lists newest first', async () => {
    const { key } = await service.newAccount();
    const addresses = ['one@example.net', 'two@example.net', 'three@example.net'];
    for (const a of addresses) {
      expect((await add(key, a)).status).toBe(201);
      service.clock.advance(1000);
    }
    const res = await listed(key);
    expect(res.status).toBe(200);
    expectDocumented(res);
    expect(res.body.data.map((e: { address: string }) => e.address)).toEqual([...addresses].reverse());
    expect(res.body.nextCursor).toBeNull();
    for (const e of res.body.data)
      expect(e).toEqual({
        id: expect.any(String),
        address: expect.any(String),
        reason: 'manual',
        detail: expect.any(String),
        createdAt: expect.stringMatching(ISO_MS),
      });
  });

  it('address returns only that address, compared lower-cased', async () => {
    const { key } = await service.newAccount();
    await add(key, 'ann@example.net');
    await add(key, 'bob@example.net');
    const found = await listed(key, `?address=${encodeURIComponent('ANN@Example.net')}`);
    expect(found.status).toBe(200);
    expect(found.body.data.map((e: { address: string }) => e.address)).toEqual(['ann@example.net']);
    const absent = await listed(key, `?address=${encodeURIComponent('carl@example.net')}`);
    expect(absent.body).toEqual({ data: [], nextCursor: null });
  });

  it('address of 320 characters is accepted; 321 or empty is 422 invalid_request', async () => {
    const { key } = await service.newAccount();
    const at = (n: number) => `${'a'.repeat(64)}@${'b'.repeat(n - 65 - 4)}.com`;
    expect(at(320)).toHaveLength(320);
    expect((await listed(key, `?address=${at(320)}`)).status).toBe(200);
    expectError(await listed(key, `?address=${at(321)}`), 422, 'invalid_request', /address/);
    expectError(await listed(key, '?address='), 422, 'invalid_request', /address/);
  });

  it('pages with nextCursor without repeats or gaps', async () => {
    const { key } = await service.newAccount();
    const addresses = Array.from({ length: 5 }, (_, i) => `p${i}@example.net`);
    for (const a of addresses) await add(key, a);
    const expected = [...addresses].reverse();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = `?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const res = await listed(key, query);
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((e: { address: string }) => e.address));
      cursor = res.body.nextCursor;
      pages++;
    } while (cursor);
    expect(seen).toEqual(expected);
    expect(pages).toBe(3);
  });

  it('a cursor from another list, another account or made up is 422 invalid_cursor', async () => {
    const { account, key } = await service.newAccount();
    await add(key, 'a@example.net');
    await add(key, 'b@example.net');
    await service.newKey(account.id);
    const keysCursor = (await service.api('GET', '/keys?limit=1', { key })).body.nextCursor;
    expect(keysCursor).toEqual(expect.any(String));
    const other = await service.newAccount();
    await add(other.key, 'a@example.net');
    await add(other.key, 'b@example.net');
    const theirs = (await listed(other.key, '?limit=1')).body.nextCursor;
    expect(theirs).toEqual(expect.any(String));
    for (const cursor of [keysCursor, theirs, 'garbage', '']) {
      expectError(await listed(key, `?cursor=${encodeURIComponent(cursor)}`), 422, 'invalid_cursor');
    }
  });

  it('a bad limit is 422 invalid_request', async () => {
    const { key } = await service.newAccount();
    for (const limit of ['0', '101', 'x']) {
      const res = await listed(key, `?limit=${limit}`);
      expectError(res, 422, 'invalid_request', /limit/);
      expectDocumented(res);
    }
  });
});

describe('DELETE /suppressions/{address}', () => {
  it('removes a listed address (URL-encoded): 204; then 404 not_found', async () => {
    const { key } = await service.newAccount();
    await add(key, 'ann+billing@example.net');
    await add(key, 'bob@example.net');
    const res = await remove(key, 'ann+billing@example.net');
    expect(res.status).toBe(204);
    expectDocumented(res);
    expect((await listed(key)).body.data.map((e: { address: string }) => e.address)).toEqual(['bob@example.net']);
    const again = await remove(key, 'ann+billing@example.net');
    expectError(again, 404, 'not_found');
    expectDocumented(again);
  });

  it('an address never listed is 404 not_found', async () => {
    const { key } = await service.newAccount();
    expectError(await remove(key, 'nobody@example.net'), 404, 'not_found');
  });

  it('removes the entry whatever the case of the address given', async () => {
    const { key } = await service.newAccount();
    await add(key, 'carl@example.net');
    expect((await remove(key, 'Carl@Example.NET')).status).toBe(204);
    expect((await listed(key)).body.data).toEqual([]);
  });

  it('removes only from the acting account’s list', async () => {
    const a = await service.newAccount();
    const b = await service.newAccount();
    await add(a.key, 'dan@example.net');
    await add(b.key, 'dan@example.net');
    expect((await remove(a.key, 'dan@example.net')).status).toBe(204);
    expect((await listed(b.key)).body.data.map((e: { address: string }) => e.address)).toEqual(['dan@example.net']);
  });
});

describe('sub-accounts have their own list', () => {
  it('entries added with the account header are on the sub-account’s list only', async () => {
    const parent = await service.newAccount();
    const sub = await service.api('POST', '/accounts', { key: parent.key, body: { name: 'Shop' } });
    expect((await add(parent.key, 'sub-only@example.net', sub.body.id)).status).toBe(201);
    expect((await listed(parent.key, '', sub.body.id)).body.data.map((e: { address: string }) => e.address)).toEqual(['sub-only@example.net']);
    expect((await listed(parent.key)).body.data).toEqual([]);
  });

  it('removing from a sub-account’s list leaves the parent’s list as it is', async () => {
    const parent = await service.newAccount();
    const sub = await service.api('POST', '/accounts', { key: parent.key, body: { name: 'Shop' } });
    await add(parent.key, 'eve@example.net');
    await add(parent.key, 'eve@example.net', sub.body.id);
    expect((await remove(parent.key, 'eve@example.net', sub.body.id)).status).toBe(204);
    expect((await listed(parent.key, '', sub.body.id)).body.data).toEqual([]);
    expect((await listed(parent.key)).body.data.map((e: { address: string }) => e.address)).toEqual(['eve@example.net']);
    expectError(await remove(parent.key, 'eve@example.net', sub.body.id), 404, 'not_found');
  });
});

describe('a send to a suppressed recipient (check 7)', () => {
  it('is refused whole with 422 recipient_suppressed naming every suppressed recipient; nothing is sent', async () => {
    const s = await newSender(service);
    await add(s.key, 'ann@example.net');
    await add(s.key, 'bob@example.net');
    const res = await sendEmail(service, s.key, receipt(s.from, ['ann@example.net', 'carl@example.net', 'bob@example.net']));
    expectError(res, 422, 'recipient_suppressed');
    expect(res.body.error.message).toContain('ann@example.net');
    expect(res.body.error.message).toContain('bob@example.net');
    expect(res.body.error.message).not.toContain('carl@example.net');
    expect((await emailRows(service, s.account.id)).filter((r) => r.status === 'sent')).toEqual([]);
    expect(await outboundMessagesOf(service, s.account.id)).toEqual([]);
    expect((await service.api('GET', '/account', { key: s.key })).body.sending.sentToday).toBe(0);
  });

  it('matches the recipient whatever its case', async () => {
    const s = await newSender(service);
    await add(s.key, 'ann@example.net');
    const res = await sendEmail(service, s.key, receipt(s.from, 'ANN@Example.Net'));
    expectError(res, 422, 'recipient_suppressed');
    expect(res.body.error.message.toLowerCase()).toContain('ann@example.net');
  });

  it('a recipient on the parent’s list blocks the sub-account’s send', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await add(parent.key, 'frank@example.net');
    const res = await sendEmail(service, parent.key, receipt(sub.from, ['frank@example.net', 'gina@example.net']), { account: sub.id });
    expectError(res, 422, 'recipient_suppressed');
    expect(res.body.error.message).toContain('frank@example.net');
    expect(await outboundMessagesOf(service, sub.id)).toEqual([]);
  });

  it('names recipients from both lists at once', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await add(parent.key, 'on-parent@example.net');
    await add(parent.key, 'on-sub@example.net', sub.id);
    const res = await sendEmail(service, parent.key, receipt(sub.from, ['on-parent@example.net', 'fine@example.net', 'on-sub@example.net']), {
      account: sub.id,
    });
    expectError(res, 422, 'recipient_suppressed');
    expect(res.body.error.message).toContain('on-parent@example.net');
    expect(res.body.error.message).toContain('on-sub@example.net');
    expect(res.body.error.message).not.toContain('fine@example.net');
  });

  it('the parent’s entry still blocks after the sub-account removed its own', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await add(parent.key, 'hal@example.net');
    await add(parent.key, 'hal@example.net', sub.id);
    expect((await remove(parent.key, 'hal@example.net', sub.id)).status).toBe(204);
    expectError(await sendEmail(service, parent.key, receipt(sub.from, 'hal@example.net'), { account: sub.id }), 422, 'recipient_suppressed');
  });

  it('a sub-account’s list does not block its parent', async () => {
    const parent = await newSender(service);
    const sub = await newSubSender(service, parent.key);
    await add(parent.key, 'ivy@example.net', sub.id);
    expectOk(await sendEmail(service, parent.key, receipt(parent.from, 'ivy@example.net')));
    expectError(await sendEmail(service, parent.key, receipt(sub.from, 'ivy@example.net'), { account: sub.id }), 422, 'recipient_suppressed');
  });

  it('another account’s list does not matter', async () => {
    const s = await newSender(service);
    const other = await service.newAccount();
    await add(other.key, 'jo@example.net');
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'jo@example.net')));
  });

  it('once the address is removed the send goes through', async () => {
    const s = await newSender(service);
    await add(s.key, 'kim@example.net');
    expectError(await sendEmail(service, s.key, receipt(s.from, 'kim@example.net')), 422, 'recipient_suppressed');
    expect((await remove(s.key, 'kim@example.net')).status).toBe(204);
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'kim@example.net')));
  });

  it('a sandbox send is refused the same way', async () => {
    const s = await newSender(service);
    await add(s.key, 'lee@example.net');
    expectError(await sendEmail(service, s.key, receipt(s.from, 'lee@example.net', { sandbox: true })), 422, 'recipient_suppressed');
    expect((await emailRows(service, s.account.id)).filter((r) => r.status === 'sandboxed')).toEqual([]);
  });

  it('a suppression added while the send waits for its commit still refuses it: nothing is queued', async () => {
    const s = await newSender(service);
    const commits = service.deps.commits;
    const run = commits.run;
    // Between the checks and the commit: another request lists the recipient.
    commits.run = async (fn) => {
      commits.run = run;
      await suppress(service.deps.db, s.account.id, 'late@example.net', 'manual', '', service.clock.now());
      return run(fn);
    };
    try {
      const res = await sendEmail(service, s.key, receipt(s.from, 'late@example.net'));
      expectError(res, 422, 'recipient_suppressed');
      expect(res.body.error.message).toContain('late@example.net');
    } finally {
      commits.run = run;
    }
    expect((await emailRows(service, s.account.id)).filter((r) => r.status === 'sent')).toEqual([]);
    expect(await outboundMessagesOf(service, s.account.id)).toEqual([]);
  });
});

describe('internationalised addresses', () => {
  it('are keyed as a send’s recipient is: listed, looked up, refused and removed in either form', async () => {
    const s = await newSender(service);
    const added = await add(s.key, 'Joe@Bücher.de');
    expect(added.status).toBe(201);
    expect(added.body.address).toBe('joe@xn--bcher-kva.de');
    for (const form of ['joe@bücher.de', 'JOE@BÜCHER.DE', 'joe@xn--bcher-kva.de']) {
      const found = await listed(s.key, `?address=${encodeURIComponent(form)}`);
      expect(
        found.body.data.map((e: { address: string }) => e.address),
        form,
      ).toEqual(['joe@xn--bcher-kva.de']);
    }
    expect((await add(s.key, 'joe@xn--bcher-kva.de')).status).toBe(200);
    expectError(await sendEmail(service, s.key, receipt(s.from, 'joe@bücher.de')), 422, 'recipient_suppressed');
    expect((await remove(s.key, 'joe@bücher.de')).status).toBe(204);
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'joe@bücher.de')));
  });

  it('an address filter of only spaces is 422 invalid_request', async () => {
    const { key } = await service.newAccount();
    expectError(await listed(key, '?address=%20%20'), 422, 'invalid_request', /address/);
  });
});
