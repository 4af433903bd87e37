import { expect, it } from 'vitest';
import { parseInlineInbound } from '../server/customer-db/inbound/parse-message.js';
import { createMemoryLogger } from '../server/shared/logger.js';

/**
 * `service.inbound.headers` keeps header values as sent. mailparser hands header lines over a byte a character, so
 * RFC 6532 UTF-8 values (the server offers SMTPUTF8) were stored as mojibake; a legacy 8-bit value stays as it was.
 */

const absent = async () => ({ status: 'missing' as const, nxdomain: true });
const deps = {
  config: { mailHostname: 'mx.mailstead.test' },
  resolver: { txt: absent, mx: absent, a: absent, aaaa: absent } as never,
  logger: createMemoryLogger(),
};

it('raw UTF-8 header values are kept as sent in service.inbound.headers', async () => {
  const raw = Buffer.from('From: Jürgen <j@sender.example>\r\nSubject: Grüße aus Köln\r\n\r\nbody\r\n', 'utf8');
  const row = await parseInlineInbound(deps, {
    kind: 'inbound',
    id: '0190c3a0-0000-7000-8000-000000000001',
    spoolId: null,
    raw,
    accountId: 'acct',
    toAddresses: ['x@shop.example'],
    mailFrom: 'j@sender.example',
    remoteAddress: '192.0.2.1',
    helo: 'mail.sender.example',
    receivedAt: 0,
    size: raw.length,
  });
  expect(row.subject).toBe('Grüße aus Köln'); // the decoded column is right
  expect((row.headers as Record<string, string[]>).subject).toEqual(['Grüße aus Köln']); // was ['GrÃ¼Ãe aus KÃ¶ln']
  expect((row.headers as Record<string, string[]>).from).toEqual(['Jürgen <j@sender.example>']);
});

it('a raw 8-bit header value that is not UTF-8 (a legacy charset) keeps a character a byte', async () => {
  const raw = Buffer.concat([Buffer.from('From: a@sender.example\r\nSubject: Caf'), Buffer.from([0xe9]), Buffer.from('\r\n\r\nbody\r\n')]);
  const row = await parseInlineInbound(deps, {
    kind: 'inbound',
    id: '0190c3a0-0000-7000-8000-000000000002',
    spoolId: null,
    raw,
    accountId: 'acct',
    toAddresses: ['x@shop.example'],
    mailFrom: 'a@sender.example',
    remoteAddress: '192.0.2.1',
    helo: 'mail.sender.example',
    receivedAt: 0,
    size: raw.length,
  });
  expect((row.headers as Record<string, string[]>).subject).toEqual(['Caf\u00e9']);
});
