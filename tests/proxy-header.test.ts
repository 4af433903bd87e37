import { describe, expect, it } from 'vitest';
import { MAX_V1_BYTES, MAX_V2_BODY_BYTES, parseProxyHeader } from '../mta/proxy-header.js';
import { proxyV2 } from './helpers/proxy-protocol.js';

/**
 * The PROXY protocol header (SMTP_PROXY_PROTOCOL, docs/api/decisions.md section 12) as HAProxy's specification
 * writes it: version 1, one text line of at most 107 bytes; version 2, a 12-byte signature, version and command,
 * family, a length, the addresses and TLVs. Bytes after the header are the client's and are not taken.
 */

const ascii = (s: string) => Buffer.from(s, 'latin1');

describe('version 1', () => {
  it.each([
    ['TCP4', 'PROXY TCP4 203.0.113.7 192.0.2.1 56324 25\r\n', { address: '203.0.113.7', port: 56324 }, { address: '192.0.2.1', port: 25 }],
    ['TCP6', 'PROXY TCP6 2001:db8::7 2001:db8::1 65535 587\r\n', { address: '2001:db8::7', port: 65535 }, { address: '2001:db8::1', port: 587 }],
    ['port 0', 'PROXY TCP4 203.0.113.7 192.0.2.1 0 25\r\n', { address: '203.0.113.7', port: 0 }, { address: '192.0.2.1', port: 25 }],
  ])('%s: the client and the address it reached', (_name, line, source, destination) => {
    expect(parseProxyHeader(ascii(line))).toEqual({ kind: 'header', header: { kind: 'proxy', version: 1, source, destination }, length: line.length });
  });

  it.each(['PROXY UNKNOWN\r\n', 'PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n'])('%j: the balancer’s own connection (the socket’s peer stands)', (line) => {
    expect(parseProxyHeader(ascii(line))).toEqual({ kind: 'header', header: { kind: 'local', version: 1 }, length: line.length });
  });

  it('the longest line allowed (107 bytes, CRLF included) is taken; one byte more is refused', () => {
    const pad = (n: number) => `PROXY UNKNOWN ${'x'.repeat(n - 'PROXY UNKNOWN \r\n'.length)}\r\n`;
    expect(parseProxyHeader(ascii(pad(MAX_V1_BYTES)))).toMatchObject({ kind: 'header', length: 107 });
    expect(parseProxyHeader(ascii(pad(MAX_V1_BYTES + 1)))).toEqual({ kind: 'error', reason: 'PROXY v1 line longer than 107 bytes' });
    // No line end within 107 bytes: refused without waiting for more.
    expect(parseProxyHeader(ascii(`PROXY UNKNOWN ${'x'.repeat(100)}`))).toMatchObject({ kind: 'error' });
  });

  it.each([
    ['not PROXY at all', 'EHLO client.example\r\n'],
    ['lower case', 'proxy TCP4 203.0.113.7 192.0.2.1 1 25\r\n'],
    ['an unknown protocol', 'PROXY UDP4 203.0.113.7 192.0.2.1 1 25\r\n'],
    ['a field missing', 'PROXY TCP4 203.0.113.7 192.0.2.1 25\r\n'],
    ['a field too many', 'PROXY TCP4 203.0.113.7 192.0.2.1 1 25 x\r\n'],
    ['two spaces', 'PROXY TCP4  203.0.113.7 192.0.2.1 1 25\r\n'],
    ['an IPv6 address under TCP4', 'PROXY TCP4 2001:db8::7 192.0.2.1 1 25\r\n'],
    ['an IPv4 address under TCP6', 'PROXY TCP6 203.0.113.7 2001:db8::1 1 25\r\n'],
    ['a host name', 'PROXY TCP4 evil.example 192.0.2.1 1 25\r\n'],
    ['a port past 65535', 'PROXY TCP4 203.0.113.7 192.0.2.1 65536 25\r\n'],
    ['a port with a leading zero', 'PROXY TCP4 203.0.113.7 192.0.2.1 01 25\r\n'],
    ['a negative port', 'PROXY TCP4 203.0.113.7 192.0.2.1 -1 25\r\n'],
    ['a bare LF', 'PROXY TCP4 203.0.113.7 192.0.2.1 1 25\n'],
    ['a TLS hello (the header forgotten on 465)', '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03'],
  ])('%s: refused', (_name, line) => {
    expect(parseProxyHeader(ascii(line))).toMatchObject({ kind: 'error', reason: expect.any(String) });
  });

  it('split across chunks: more is needed until the line end, then the header', () => {
    const line = 'PROXY TCP4 203.0.113.7 192.0.2.1 56324 25\r\n';
    for (let cut = 0; cut < line.length; cut++) expect(parseProxyHeader(ascii(line.slice(0, cut))), `${cut} bytes`).toEqual({ kind: 'needMore' });
    expect(parseProxyHeader(ascii(line))).toMatchObject({ kind: 'header', length: line.length });
  });

  it('what follows the line is the client’s: not part of the header', () => {
    const line = 'PROXY TCP4 203.0.113.7 192.0.2.1 56324 25\r\n';
    const data = ascii(`${line}EHLO client.example\r\n`);
    const parsed = parseProxyHeader(data);
    expect(parsed).toMatchObject({ kind: 'header', length: line.length });
    expect(data.subarray(line.length).toString()).toBe('EHLO client.example\r\n');
  });
});

describe('version 2', () => {
  it('PROXY over IPv4: the client and the address it reached', () => {
    const data = proxyV2({ source: '203.0.113.7', sourcePort: 56324, destination: '192.0.2.1', destinationPort: 25 });
    expect(data.length).toBe(16 + 12);
    expect(parseProxyHeader(data)).toEqual({
      kind: 'header',
      header: { kind: 'proxy', version: 2, source: { address: '203.0.113.7', port: 56324 }, destination: { address: '192.0.2.1', port: 25 } },
      length: 28,
    });
  });

  it('PROXY over IPv6: the addresses in their short form', () => {
    const data = proxyV2({ source: '2001:db8:0:0:0:0:0:7', sourcePort: 1, destination: '2001:db8:1::1', destinationPort: 465 });
    expect(parseProxyHeader(data)).toEqual({
      kind: 'header',
      header: { kind: 'proxy', version: 2, source: { address: '2001:db8::7', port: 1 }, destination: { address: '2001:db8:1::1', port: 465 } },
      length: 16 + 36,
    });
    expect(parseProxyHeader(proxyV2({ source: '::ffff:203.0.113.7', destination: '::1' }))).toMatchObject({
      header: { source: { address: '::ffff:203.0.113.7' }, destination: { address: '::1' } },
    });
  });

  it('LOCAL (a health check of the balancer): the socket’s own peer stands, its address block discarded', () => {
    expect(parseProxyHeader(proxyV2({ command: 'local' }))).toEqual({ kind: 'header', header: { kind: 'local', version: 2 }, length: 16 });
    const withBlock = proxyV2({ command: 'local', source: '203.0.113.7', destination: '192.0.2.1' });
    expect(parseProxyHeader(withBlock)).toEqual({ kind: 'header', header: { kind: 'local', version: 2 }, length: 28 });
  });

  it('PROXY of an unspecified family: the socket’s own peer stands', () => {
    expect(parseProxyHeader(proxyV2({ family: 0x00 }))).toEqual({ kind: 'header', header: { kind: 'local', version: 2 }, length: 16 });
  });

  it('TLVs after the addresses are skipped, whatever they hold', () => {
    const tlvs = Buffer.concat([
      Buffer.from([0x05, 0x00, 0x04]), // PP2_TYPE_UNIQUE_ID
      ascii('abcd'),
      Buffer.from([0x20, 0x00, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00]), // PP2_TYPE_SSL, no sub-TLV
    ]);
    const data = proxyV2({ source: '203.0.113.7', destination: '192.0.2.1', tlvs });
    expect(parseProxyHeader(data)).toMatchObject({ kind: 'header', header: { source: { address: '203.0.113.7' } }, length: 16 + 12 + tlvs.length });
  });

  it('bytes after the header are the client’s (SMTP, or a TLS hello): not part of it', () => {
    const header = proxyV2({ source: '203.0.113.7', destination: '192.0.2.1' });
    const data = Buffer.concat([header, ascii('EHLO client.example\r\n')]);
    const parsed = parseProxyHeader(data);
    expect(parsed).toMatchObject({ kind: 'header', length: header.length });
    expect(data.subarray(header.length).toString()).toBe('EHLO client.example\r\n');
  });

  it('truncated anywhere: more is needed, never a header read past the bytes there are', () => {
    const data = proxyV2({ source: '2001:db8::7', destination: '2001:db8::1', tlvs: Buffer.from([0x04, 0x00, 0x00]) });
    for (let cut = 0; cut < data.length; cut++) expect(parseProxyHeader(data.subarray(0, cut)), `${cut} bytes`).toEqual({ kind: 'needMore' });
    expect(parseProxyHeader(data)).toMatchObject({ kind: 'header', length: data.length });
  });

  it.each([
    ['a wrong signature', () => Buffer.concat([ascii('\r\n\r\n\0\r\nQUIT\r'), proxyV2({}).subarray(12)])],
    ['a wrong signature, seen before it is whole', () => ascii('\r\n\r\nX')],
    ['version 1 in the version nibble', () => withByte(proxyV2({}), 12, 0x11)],
    ['command 2', () => withByte(proxyV2({}), 12, 0x22)],
    ['AF_UNIX', () => withByte(proxyV2({ source: '203.0.113.7', destination: '192.0.2.1' }), 13, 0x31)],
    ['UDP over IPv4', () => withByte(proxyV2({ source: '203.0.113.7', destination: '192.0.2.1' }), 13, 0x12)],
    ['an unknown family', () => withByte(proxyV2({ source: '203.0.113.7', destination: '192.0.2.1' }), 13, 0x41)],
    ['an IPv6 family with an IPv4 block', () => withByte(proxyV2({ source: '203.0.113.7', destination: '192.0.2.1' }), 13, 0x21)],
    ['a length over the bound', () => proxyV2({ source: '203.0.113.7', destination: '192.0.2.1', tlvs: Buffer.alloc(MAX_V2_BODY_BYTES) })],
  ])('%s: refused', (_name, make) => {
    expect(parseProxyHeader(make())).toMatchObject({ kind: 'error', reason: expect.any(String) });
  });

  it('a length over the bound is refused from the fixed part alone, before the bytes arrive', () => {
    const head = proxyV2({ source: '203.0.113.7', destination: '192.0.2.1', tlvs: Buffer.alloc(MAX_V2_BODY_BYTES) }).subarray(0, 16);
    expect(parseProxyHeader(head)).toMatchObject({ kind: 'error' });
    const within = proxyV2({ source: '203.0.113.7', destination: '192.0.2.1', tlvs: Buffer.alloc(MAX_V2_BODY_BYTES - 12) });
    expect(parseProxyHeader(within)).toMatchObject({ kind: 'header', length: 16 + MAX_V2_BODY_BYTES });
  });
});

function withByte(data: Buffer, at: number, value: number): Buffer {
  const copy = Buffer.from(data);
  copy[at] = value;
  return copy;
}
