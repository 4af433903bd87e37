import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeDomainName } from '../server/core/domain-name.js';
import { startService, type TestService } from './helpers/service.js';

/**
 * Name rules (docs/api/decisions.md section 5): trimmed, lower-cased, trailing dot removed, IDN to punycode;
 * a scheme, path, port, user info, IP address, single label or malformed label is `422 invalid_request`. Each row is
 * checked through POST /domains and against normalizeDomainName itself.
 */

const label = (char: string, length: number) => char.repeat(length);
/** A name of exactly 253 characters, the most DNS allows in text form (without the trailing dot). */
const NAME_253 = `${label('a', 63)}.${label('b', 63)}.${label('c', 63)}.${label('d', 61)}`;
const NAME_254 = `${label('a', 63)}.${label('b', 63)}.${label('c', 63)}.${label('d', 62)}`;
const LABEL_63 = `${label('x', 63)}.example.com`;

const accepted: [string, string][] = [
  [' Example.COM. ', 'example.com'],
  ['example.com', 'example.com'],
  ['MAIL.Example.Org', 'mail.example.org'],
  ['bücher.example', 'xn--bcher-kva.example'],
  ['BÜCHER.example.', 'xn--bcher-kva.example'],
  ['xn--bcher-kva.example', 'xn--bcher-kva.example'],
  ['sub.example.co.uk', 'sub.example.co.uk'],
  ['a-b.c-d.example', 'a-b.c-d.example'],
  ['123.example.com', '123.example.com'],
  ['\tnews.example.net\n', 'news.example.net'],
  [LABEL_63, LABEL_63],
  [NAME_253, NAME_253],
  [`${NAME_253}.`, NAME_253],
];

const refused: [string, unknown][] = [
  ['a scheme', 'https://example.com'],
  ['another scheme', 'smtp://example.com'],
  ['a path', 'example.com/path'],
  ['a trailing slash', 'example.com/'],
  ['a query', 'example.com?x=1'],
  ['a fragment', 'example.com#top'],
  ['a port', 'example.com:25'],
  ['user info', 'user@example.com'],
  ['user info and a scheme', 'https://user:pass@example.com'],
  ['an IPv4 address', '192.0.2.1'],
  ['an IPv4 address with a trailing dot', '192.0.2.1.'],
  ['a bracketed IPv6 address', '[2001:db8::1]'],
  ['a bare IPv6 address', '2001:db8::1'],
  ['a single label', 'localhost'],
  ['a single label with a trailing dot', 'com.'],
  ['a 64-character label', `${label('x', 64)}.example.com`],
  ['a name over 253 characters', NAME_254],
  ['a space inside', 'exa mple.com'],
  ['percent-encoding', 'ex%61mple.com'],
  ['a label starting with a hyphen', '-bad.example.com'],
  ['a label ending with a hyphen', 'bad-.example.com'],
  ['an empty label', 'example..com'],
  ['a leading dot', '.example.com'],
  ['an underscore', 'ex_ample.com'],
  ['a wildcard', '*.example.com'],
  ['a numeric top-level label', 'example.123'],
  ['an empty string', ''],
  ['only whitespace', '   '],
  ['a lone dot', '.'],
  ['a number', 42],
  ['null', null],
  ['a boolean', true],
  ['an array', ['example.com']],
  ['an object', { name: 'example.com' }],
];

describe('normalizeDomainName', () => {
  it.each(accepted)('accepts %j as %s', (input, expected) => {
    expect(normalizeDomainName(input)).toEqual({ ok: true, name: expected });
  });

  it.each(refused)('refuses %s with a reason', (_, input) => {
    // Non-strings reach this function only if a caller skips validation; it must refuse them, not throw.
    let result: ReturnType<typeof normalizeDomainName> | undefined;
    expect(() => {
      result = normalizeDomainName(input as string);
    }).not.toThrow();
    expect(result).toEqual({ ok: false, reason: expect.any(String) });
  });
});

describe('POST /domains applies the name rules', () => {
  let service: TestService;
  let key: string;
  beforeAll(async () => {
    service = await startService();
    ({ key } = await service.newAccount({ name: 'Names' }));
  });
  afterAll(() => service?.close());

  it.each(accepted)('stores %j as %s, in the name and in every record', async (input, expected) => {
    const res = await service.api('POST', '/domains', { key, body: { name: input } });
    expect(res.status).toBe(201);
    expect(res.body.name).toBe(expected);
    const names = new Map<string, string>(res.body.records.map((r: { record: string; name: string }) => [r.record, r.name]));
    expect(names.get('Ownership')).toBe(`_service-verify.${expected}`);
    expect(names.get('SPF')).toBe(expected);
    expect(names.get('Receiving')).toBe(expected);
    expect(names.get('Signing')).toMatch(new RegExp(`^[a-z0-9-]+\\._domainkey\\.${expected.replace(/\./g, '\\.')}$`));
    expect((await service.api('GET', `/domains/${res.body.id}`, { key })).body.name).toBe(expected);
    // Several rows normalise to one name: free it for the next row.
    expect((await service.api('DELETE', `/domains/${res.body.id}`, { key })).status).toBe(204);
  });

  it.each(refused)('refuses %s: 422 invalid_request naming the field', async (_, input) => {
    const res = await service.api('POST', '/domains', { key, body: { name: input } });
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ error: { code: 'invalid_request', message: expect.stringMatching(/\bname\b/) } });
  });

  it('stored none of the refused names', async () => {
    const list = await service.api('GET', '/domains?limit=100', { key });
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ data: [], nextCursor: null });
  });
});
