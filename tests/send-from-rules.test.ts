import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectDomain, expectError, newSender, queued, type Sender, sendEmail } from './helpers/sending.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * The `from` rules (api.md, Send request; decisions.md section 2) as a table: exactly one mailbox, a bare address or a
 * display name of up to 80 characters and an address in angle brackets. A comma anywhere (even quoted), a second
 * address, CR or LF, or a longer name is `422 invalid_request` naming `from`. The header that goes out is rebuilt
 * from the parsed parts (RFC 2047 for a non-ASCII name), never copied from the request.
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
    expect(queued(service, res.body.id).message).toMatchObject({ fromHeader: header(), fromAddress: addr });
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
    const header = queued(service, res.body.id).message!.fromHeader;
    expect(header).toMatch(/^[\x20-\x7e]+$/);
    const m = /^(.*) <([^<>]+)>$/.exec(header);
    expect(m?.[2]).toBe(addr);
    const phrase = m![1]!;
    expect(phrase).toMatch(/^=\?UTF-8\?B\?/i);
    for (const word of phrase.split(/\s+/)) expect(word.length).toBeLessThanOrEqual(75);
    expect(decodeWords(phrase)).toBe(name);
  });
});

describe('an internationalized domain', () => {
  it('a from address on the Unicode form of a connected domain sends from its punycode form', async () => {
    const id = await connectDomain(service, s.key, `bücher-${process.pid}.example`);
    const ascii = (await service.api('GET', `/domains/${id}`, { key: s.key })).body.name as string;
    expect(ascii).toMatch(/^xn--/);
    const res = await send(`Bücher <billing@bücher-${process.pid}.example>`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(queued(service, res.body.id).message).toMatchObject({ fromAddress: `billing@${ascii}`, fromHeader: `=?UTF-8?B?${Buffer.from('Bücher').toString('base64')}?= <billing@${ascii}>` });
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
    const before = service.deps.store.sqlite.prepare('select count(*) as n from outbound_messages').get() as { n: number };
    expectError(await send(`${addr}\r\nBcc: x@evil.com`), 422, 'invalid_request');
    const after = service.deps.store.sqlite.prepare('select count(*) as n from outbound_messages').get() as { n: number };
    expect(after.n).toBe(before.n);
  });
});
