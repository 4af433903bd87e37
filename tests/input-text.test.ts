import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonbText } from '../db/customer/writes.js';
import { expectError, expectOk, newSender, receipt, type Sender, sendEmail } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * Text the API takes is text: a body that is not UTF-8 is `400 invalid_json` (never decoded with U+FFFD in place of
 * what the client sent), and a string holding a NUL or an unpaired UTF-16 surrogate (a JSON `\ud800` escape) is
 * `422 invalid_request` naming the field, on every endpoint (the one validation every body and query goes through).
 * Such a send was once answered 200 and its row then refused by the customer's Postgres (jsonb holds neither) and set
 * aside: accepted, then lost. The writer's JSON for jsonb turns any that still reach it into U+FFFD.
 */

let service: TestService;
let s: Sender;

beforeAll(async () => {
  service = await startService({ DEFAULT_DAILY_QUOTA: '100000' });
  s = await newSender(service, { credits: 1000 });
});
afterAll(async () => {
  await service.close();
});

const json = (text: string) => Buffer.from(text, 'utf8');

describe('a body that is not UTF-8', () => {
  const cases: [string, Buffer][] = [
    ['bytes FF FE inside a string', Buffer.concat([json('{"name":"ab'), Buffer.from([0xff, 0xfe]), json('cd"}')])],
    ['a truncated sequence', Buffer.concat([json('{"name":"caf'), Buffer.from([0xc3]), json('"}')])],
    ['an overlong NUL (C0 80)', Buffer.concat([json('{"name":"a'), Buffer.from([0xc0, 0x80]), json('"}')])],
    ['latin-1 é', Buffer.concat([json('{"name":"caf'), Buffer.from([0xe9]), json('"}')])],
    ['an encoded surrogate (ED A0 80)', Buffer.concat([json('{"name":"a'), Buffer.from([0xed, 0xa0, 0x80]), json('"}')])],
  ];
  it.each(cases)('%s is 400 invalid_json, and nothing is created', async (_name, body) => {
    const before = (await service.api('GET', '/keys', { key: s.key })).body.data.length;
    const res = await service.api('POST', '/keys', { key: s.key, rawBody: body, headers: { 'content-type': 'application/json' } });
    expectError(res, 400, 'invalid_json', /UTF-8/);
    expect((await service.api('GET', '/keys', { key: s.key })).body.data).toHaveLength(before);
  });

  it('whatever charset the Content-Type names', async () => {
    const res = await service.api('POST', '/keys', {
      key: s.key,
      rawBody: Buffer.concat([json('{"name":"caf'), Buffer.from([0xe9]), json('"}')]),
      headers: { 'content-type': 'application/json; charset=latin1' },
    });
    expectError(res, 400, 'invalid_json', /UTF-8/);
  });

  it('UTF-8 itself passes as sent: multi-byte characters, a character outside the BMP', async () => {
    const res = await service.api('POST', '/keys', { key: s.key, rawBody: json('{"name":"café 🔑"}'), headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(201);
    expect(res.body.name).toBe('café 🔑');
  });
});

describe('a NUL or an unpaired surrogate in a string', () => {
  const bad = ['a\u0000b', 'a\ud800b', 'a\udfffb', '\udc00\ud800'];
  const named = /^(.+): must not contain a NUL character or an unpaired UTF-16 surrogate$/;

  it.each(bad.map((v) => [JSON.stringify(v), v]))(
    '%s in a template variable, a tag value, a tag name: 422 naming the field, nothing sent',
    async (_shown, value) => {
      const variable = await sendEmail(
        service,
        s.key,
        receipt(s.from, 'ann@example.net', { template: { name: 'receipt', receiptNumber: 'R-1', paidOn: '2026-03-10', paymentMethod: 'Visa', total: value } }),
      );
      expectError(variable, 422, 'invalid_request', named);
      expect(variable.body.error.message).toMatch(/^template\.total: /);
      const tag = await sendEmail(service, s.key, receipt(s.from, 'ann@example.net', { tags: { k: value } }));
      expectError(tag, 422, 'invalid_request', /^tags\.k: /);
      const tagName = await sendEmail(service, s.key, receipt(s.from, 'ann@example.net', { tags: { [value]: 'v' } }));
      expectError(tagName, 422, 'invalid_request', named);
      expect((await service.api('GET', '/emails', { key: s.key })).body.data).toHaveLength(0);
    },
  );

  it('the same on other endpoints: a key name, a sub-account name, a suspension reason', async () => {
    expectError(await service.api('POST', '/keys', { key: s.key, body: { name: 'ab\u0000cd' } }), 422, 'invalid_request', /^name: /);
    expectError(await service.api('POST', '/accounts', { key: s.key, body: { name: 'sub\ud800' } }), 422, 'invalid_request', /^name: /);
    const sub = await service.api('POST', '/accounts', { key: s.key, body: { name: 'A customer' } });
    expect(sub.status).toBe(201);
    const suspend = await service.api('POST', `/accounts/${sub.body.id}/suspend`, {
      key: s.key,
      body: { suspended: true, reason: `Unpaid ${'\u0000'.repeat(15)}` },
    });
    expectError(suspend, 422, 'invalid_request', /^reason: /);
  });

  it('a paired surrogate (a character outside the BMP) and U+FFFD itself are text', async () => {
    expectOk(await sendEmail(service, s.key, receipt(s.from, 'ann@example.net', { tags: { emoji: '🧾', replaced: '\ufffd' } })));
  });
});

/**
 * Names and reasons are shown to people (the operator's dashboard, a refused send's message): a bidi override or
 * isolate control in one reorders the text drawn after it (the dashboard's own words), and a control character or
 * line separator is not text there. Refused at the door, on every way in (API, CLI, dashboard forms share the schema).
 */
describe('controls in a name or a reason', () => {
  const hidden = ['\u202e', '\u202a', '\u2066', '\u2069', '\u0085', '\u009b', '\u0007', '\u2028', '\u000b'];

  it.each(hidden.map((c) => [JSON.stringify(c), c]))(
    '%s in a key name, a sub-account name or a suspension reason is 422 invalid_request naming the field',
    async (_shown, c) => {
      expectError(await service.api('POST', '/keys', { key: s.key, body: { name: `Acme${c} key` } }), 422, 'invalid_request', /^name: .*bidi/);
      expectError(await service.api('POST', '/accounts', { key: s.key, body: { name: `Acme${c} Shop` } }), 422, 'invalid_request', /^name: .*bidi/);
      const sub = await service.api('POST', '/accounts', { key: s.key, body: { name: 'A customer' } });
      expect(sub.status).toBe(201);
      const suspend = await service.api('POST', `/accounts/${sub.body.id}/suspend`, {
        key: s.key,
        body: { suspended: true, reason: `Unpaid invoices${c} for March` },
      });
      expectError(suspend, 422, 'invalid_request', /^reason: .*bidi/);
    },
  );

  it('right-to-left text itself is a name, and a reason may run over lines', async () => {
    const rtl = await service.api('POST', '/accounts', { key: s.key, body: { name: 'متجر أكمي' } });
    expect(rtl.status, JSON.stringify(rtl.body)).toBe(201);
    expect(rtl.body.name).toBe('متجر أكمي');
    expect((await service.api('POST', '/keys', { key: s.key, body: { name: 'מפתח ראשי' } })).status).toBe(201);
    const suspend = await service.api('POST', `/accounts/${rtl.body.id}/suspend`, {
      key: s.key,
      body: { suspended: true, reason: 'Unpaid invoices:\n\tMarch\r\n\tApril' },
    });
    expect(suspend.status, JSON.stringify(suspend.body)).toBe(200);
  });
});

describe("the writer's JSON for jsonb", () => {
  it('turns a NUL and an unpaired surrogate into U+FFFD, and leaves everything else as JSON.stringify writes it', () => {
    const rows = [{ subject: 'a\u0000b', html: 'x\ud800y', text: '🧾 \\u0000 literally', tags: { k: 'v\udfff' } }];
    expect(JSON.parse(jsonbText(rows))).toEqual([{ subject: 'a\ufffdb', html: 'x\ufffdy', text: '🧾 \\u0000 literally', tags: { k: 'v\ufffd' } }]);
    // Object keys too: a received message's header name can hold a NUL.
    expect(JSON.parse(jsonbText([{ headers: { 'x-fo\u0000o': ['bar'], 'x-\ud800': ['baz\u0000'] }, n: null, list: [1, 'a\u0000'] }]))).toEqual([
      { headers: { 'x-fo\ufffdo': ['bar'], 'x-\ufffd': ['baz\ufffd'] }, n: null, list: [1, 'a\ufffd'] },
    ]);
    const plain = [{ subject: 'Your receipt', text: 'a backslash \\ and 🧾', n: 1 }];
    expect(jsonbText(plain)).toBe(JSON.stringify(plain));
  });
});
