import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { count } from 'drizzle-orm';
import { outboundMessages } from '../db/schema/index.js';
import { one } from '../db/sql.js';
import { connectDomain, expectError, newSender, queued, type Sender, sendEmail } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * The `from` rules (docs/api/contract.md, Send request; docs/api/decisions.md section 2) as a table: exactly one mailbox, a bare address or a
 * display name of up to 80 characters and an address in angle brackets. A comma anywhere (even quoted), a second
 * address, CR or LF, or a longer name is `422 invalid_request` naming `from`. The header that goes out is rebuilt
 * from the parsed parts (RFC 2047 for a non-ASCII name), never copied from the request. A display name given as RFC
 * 2047 encoded words is judged as a mail client shows it: decoded first.
 */

let service: TestService;
let s: Sender;
let addr: string;

beforeAll(async () => {
  service = await startService({ DEFAULT_DAILY_QUOTA: '100000' });
  s = await newSender(service, { credits: 100_000 });
  addr = s.from;
});
afterAll(async () => {
  await service.close();
});

const send = (from: unknown) => sendEmail(service, s.key, { from, to: 'customer@example.net', template: { name: 'receipt', total: '$5' } });

/** The display name inside RFC 2047 encoded words (adjacent words joined, the whitespace between them dropped). */
function decodeWords(phrase: string): string {
  const words = phrase.split(/\s+/);
  return Buffer.concat(
    words.map((w) => {
      const m = /^=\?UTF-8\?B\?([A-Za-z0-9+/=]*)\?=$/i.exec(w);
      if (!m) throw new Error(`not an encoded word: ${w}`);
      return Buffer.from(m[1]!, 'base64');
    }),
  ).toString('utf8');
}

describe('accepted from values and the header rebuilt from them', () => {
  const NAME_80 = 'N'.repeat(80);
  const cases: [string, () => string, () => string][] = [
    ['a bare address', () => addr, () => addr],
    ['a name and an address', () => `Acme <${addr}>`, () => `"Acme" <${addr}>`],
    ['a quoted name', () => `"Acme Billing" <${addr}>`, () => `"Acme Billing" <${addr}>`],
    ['an unquoted name of two words', () => `Acme Billing <${addr}>`, () => `"Acme Billing" <${addr}>`],
    ['a name without a space before the bracket', () => `Acme<${addr}>`, () => `"Acme" <${addr}>`],
    ['surrounding whitespace', () => `  Acme Billing   <${addr}>  `, () => `"Acme Billing" <${addr}>`],
    ['an apostrophe and an ampersand', () => `O'Brien & Sons <${addr}>`, () => `"O'Brien & Sons" <${addr}>`],
    ['a display name of 80 characters', () => `${NAME_80} <${addr}>`, () => `"${NAME_80}" <${addr}>`],
    ['the domain in upper case', () => `Acme <billing@${s.domain.toUpperCase()}>`, () => `"Acme" <${addr}>`],
  ];
  it.each(cases)('%s', async (_, input, header) => {
    const res = await send(input());
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((await queued(service, res.body.id)).message).toMatchObject({ fromHeader: header(), fromAddress: addr });
    const email = await service.api('GET', `/emails/${res.body.id}`, { key: s.key });
    expect(email.body.from).toBe(addr);
  });

  it.each([
    ['a name with accents', 'Zoë’s Café'],
    ['a name in another script', '株式会社アクメ 請求'],
    ['an emoji', 'Acme 🚀 Billing'],
    ['80 non-ASCII characters (characters, not bytes)', 'é'.repeat(80)],
  ])('%s goes out as RFC 2047 encoded words', async (_, name) => {
    const res = await send(`${name} <${addr}>`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const header = (await queued(service, res.body.id)).message!.fromHeader;
    expect(header).toMatch(/^[\x20-\x7e]+$/);
    const m = /^(.*) <([^<>]+)>$/.exec(header);
    expect(m?.[2]).toBe(addr);
    const phrase = m![1]!;
    expect(phrase).toMatch(/^=\?UTF-8\?B\?/i);
    for (const word of phrase.split(/\s+/)) expect(word.length).toBeLessThanOrEqual(75);
    expect(decodeWords(phrase)).toBe(name);
  });
});

const b = (charset: string, text: string, encoding: BufferEncoding = 'utf8') => `=?${charset}?B?${Buffer.from(text, encoding).toString('base64')}?=`;
const q = (charset: string, bytes: Buffer) =>
  `=?${charset}?Q?${[...bytes].map((c) => (c === 0x20 ? '_' : /[A-Za-z0-9]/.test(String.fromCharCode(c)) ? String.fromCharCode(c) : `=${c.toString(16).toUpperCase().padStart(2, '0')}`)).join('')}?=`;

describe('a display name in RFC 2047 encoded words is decoded before the rules', () => {
  const hidden = 'support@paypal.com <security@paypal.com>';
  const refused: [string, () => string][] = [
    ['a B word hiding an address and a second mailbox', () => `${b('utf-8', hidden)} <${addr}>`],
    ['the same in lower-case b', () => `${b('utf-8', hidden).replace('?B?', '?b?')} <${addr}>`],
    ['the same inside quotes (some clients decode there too)', () => `"${b('utf-8', hidden)}" <${addr}>`],
    ['a Q word hiding an address', () => `${q('UTF-8', Buffer.from('ceo@bank.example'))} <${addr}>`],
    ['an address split over two words', () => `${b('utf-8', 'support@pay')} ${b('utf-8', 'pal.com')} <${addr}>`],
    ['an ISO-8859-1 word hiding an address', () => `${q('ISO-8859-1', Buffer.from('security@paypal.com', 'latin1'))} <${addr}>`],
    ['a charset with an RFC 2231 language', () => `${b('utf-8*en', hidden)} <${addr}>`],
    ['a hidden comma', () => `${b('utf-8', 'Acme, Inc')} <${addr}>`],
    ['a hidden angle bracket', () => `${b('utf-8', 'Acme <x')} <${addr}>`],
    ['a hidden CR LF and header', () => `${b('utf-8', 'Acme\r\nBcc: x@evil.com')} <${addr}>`],
    ['a hidden LF', () => `${q('utf-8', Buffer.from('Acme\nBcc'))} <${addr}>`],
    ['a hidden NUL', () => `${b('utf-8', 'Acme\0')} <${addr}>`],
    ['a name of 81 characters once decoded', () => `${b('utf-8', 'é'.repeat(41))} ${b('utf-8', 'é'.repeat(40))} <${addr}>`],
    ['an encoded word inside an encoded word', () => `${b('utf-8', b('utf-8', hidden))} <${addr}>`],
    ['a charset TextDecoder does not know', () => `=?x-no-such-charset?B?${Buffer.from('Acme').toString('base64')}?= <${addr}>`],
    ['bytes that are not UTF-8', () => `=?utf-8?B?${Buffer.from([0xff, 0xfe, 0x41]).toString('base64')}?= <${addr}>`],
    ['base64 that is not base64', () => `=?utf-8?B?QWNt!ZQ==?= <${addr}>`],
    ['a Q escape that is not hex', () => `=?utf-8?Q?Acme=ZZ?= <${addr}>`],
  ];
  it.each(refused)('%s is 422 invalid_request naming from', async (_, input) => {
    const res = await send(input());
    expectError(res, 422, 'invalid_request');
    expect(res.body.error.message).toMatch(/^from: /);
  });

  it('replyTo follows the same rule: an encoded word hiding an address is 422 naming replyTo', async () => {
    const res = await sendEmail(service, s.key, {
      from: addr,
      replyTo: `${b('utf-8', hidden)} <help@example.org>`,
      to: 'customer@example.net',
      template: { name: 'receipt', total: '$5' },
    });
    expectError(res, 422, 'invalid_request');
    expect(res.body.error.message).toMatch(/^replyTo: /);
  });

  const accepted: [string, () => string, string][] = [
    ['a B word', () => `${b('UTF-8', 'Zoë Café')} <${addr}>`, 'Zoë Café'],
    ['a Q word with underscores for spaces', () => `${q('utf-8', Buffer.from('Zoë Café'))} <${addr}>`, 'Zoë Café'],
    ['adjacent words (the space between them dropped)', () => `${b('utf-8', 'Acme ')} ${b('utf-8', 'Billing')} <${addr}>`, 'Acme Billing'],
    ['plain text around a word', () => `Acme ${b('utf-8', 'Café')} <${addr}>`, 'Acme Café'],
    ['ISO-8859-1', () => `${q('ISO-8859-1', Buffer.from('Zoë Café', 'latin1'))} <${addr}>`, 'Zoë Café'],
    ['80 characters once decoded', () => `${b('utf-8', 'é'.repeat(40))} ${b('utf-8', 'é'.repeat(40))} <${addr}>`, 'é'.repeat(80)],
  ];
  it.each(accepted)('%s is kept as its decoded text and sent as encoded words again', async (_, input, name) => {
    const res = await send(input());
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const header = (await queued(service, res.body.id)).message!.fromHeader;
    const m = /^(.*) <([^<>]+)>$/.exec(header)!;
    expect(m[2]).toBe(addr);
    if (/^[\x20-\x7e]*$/.test(name)) expect(m[1]).toBe(`"${name}"`);
    else expect(decodeWords(m[1]!)).toBe(name);
  });
});

describe('an internationalized domain', () => {
  it('a from address on the Unicode form of a connected domain sends from its punycode form', async () => {
    const id = await connectDomain(service, s.key, `bücher-${process.pid}.example`);
    const ascii = (await service.api('GET', `/domains/${id}`, { key: s.key })).body.name as string;
    expect(ascii).toMatch(/^xn--/);
    const res = await send(`Bücher <billing@bücher-${process.pid}.example>`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((await queued(service, res.body.id)).message).toMatchObject({
      fromAddress: `billing@${ascii}`,
      fromHeader: `=?UTF-8?B?${Buffer.from('Bücher').toString('base64')}?= <billing@${ascii}>`,
    });
  });
});

describe('refused from values: 422 invalid_request naming from', () => {
  const cases: [string, () => unknown][] = [
    ['a comma in an unquoted name', () => `Acme, Inc <${addr}>`],
    ['a comma even inside a quoted name', () => `"Acme, Inc" <${addr}>`],
    ['two addresses separated by a comma', () => `${addr}, other@example.org`],
    ['two mailboxes separated by a comma', () => `Acme <${addr}>, Other <other@example.org>`],
    ['a second address in brackets', () => `Acme <${addr}> <other@example.org>`],
    ['two bare addresses separated by a space', () => `${addr} other@example.org`],
    ['a display name that is itself an address', () => `ceo@bank.example <${addr}>`],
    ['a display name that is an address with a full-width at sign', () => `support\uFF20paypal.example <${addr}>`],
    ['a display name with a small at sign', () => `support\uFE6Bpaypal.example <${addr}>`],
    ['a full-width comma in a name', () => `Acme\uFF0C Inc <${addr}>`],
    ['full-width angle brackets in a name', () => `Acme \uFF1Cbilling\uFF1E <${addr}>`],
    ['CR LF and a Bcc header after a bare address', () => `${addr}\r\nBcc: x@evil.com`],
    ['LF and a Bcc header after a bare address', () => `${addr}\nBcc: x@evil.com`],
    ['a lone CR before a header', () => `${addr}\rBcc: x@evil.com`],
    ['CR LF and a header after a mailbox', () => `Acme <${addr}>\r\nBcc: x@evil.com`],
    ['a folded name (LF and a space)', () => `Acme\n <${addr}>`],
    ['a folded name (CR LF and a space)', () => `Acme\r\n <${addr}>`],
    ['CR LF inside a quoted name', () => `"Acme\r\nBcc: x@evil.com" <${addr}>`],
    ['CR LF inside the brackets', () => `Acme <${addr}\r\n>`],
    ['a NUL byte', () => `Acme\u0000 <${addr}>`],
    ['a display name of 81 characters', () => `${'N'.repeat(81)} <${addr}>`],
    ['a display name of 81 non-ASCII characters', () => `${'é'.repeat(81)} <${addr}>`],
    ['no @', () => addr.replace('@', '.')],
    ['no domain', () => 'billing@'],
    ['no local part', () => `@${s.domain}`],
    ['text after the brackets', () => `<${addr}> extra`],
    ['an unclosed bracket', () => `Acme <${addr}`],
    ['a name only', () => 'Acme Billing'],
    ['empty brackets', () => 'Acme <>'],
    ['nested brackets', () => `Acme <<${addr}>>`],
    ['an empty string', () => ''],
    ['only spaces', () => '   '],
    ['a number', () => 42],
    ['null', () => null],
    ['an array of one address', () => [addr]],
    ['an object', () => ({ name: 'Acme', address: addr })],
  ];
  it.each(cases)('%s', async (_, input) => {
    const res = await send(input());
    expectError(res, 422, 'invalid_request');
    expect(res.body.error.message).toContain('from');
  });

  it('nothing refused was queued', async () => {
    const before = (await one(service.deps.db.select({ n: count() }).from(outboundMessages)))!;
    expectError(await send(`${addr}\r\nBcc: x@evil.com`), 422, 'invalid_request');
    const after = (await one(service.deps.db.select({ n: count() }).from(outboundMessages)))!;
    expect(after.n).toBe(before.n);
  });
});
