import { createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { parseVerp, verpAddress, verpTrusted } from '../mta/verp.js';

/**
 * The envelope sender of docs/api/decisions.md section 3 (a VERP address from which the email and the recipient can be
 * recovered): `bounce+<email id hex>.<index in to>.<tag>@<MAIL_HOSTNAME>`, the tag an HMAC under the secret key, so a
 * recipient cannot write another recipient's address (nor anyone a made-up one); without a secret key, no tag.
 */

const HOST = 'mx.mailstead.test';
const ID = '0195f3c2-7a10-7cde-8f00-1234567890ab';
const KEY = Buffer.alloc(32, 7);
const OTHER_KEY = Buffer.alloc(32, 8);
const tag = (key: Buffer, hexAndIndex: string) => createHmac('sha256', key).update(`verp:${hexAndIndex}`).digest('hex').slice(0, 10);

describe('VERP addresses', () => {
  it('names the email (its id as 32 hex digits), the recipient index and its tag on MAIL_HOSTNAME', () => {
    expect(verpAddress(ID, 0, HOST, KEY)).toBe(`bounce+0195f3c27a107cde8f001234567890ab.0.${tag(KEY, '0195f3c27a107cde8f001234567890ab.0')}@mx.mailstead.test`);
    expect(verpAddress(ID, 49, HOST, KEY)).toMatch(/^bounce\+0195f3c27a107cde8f001234567890ab\.49\.[0-9a-f]{10}@mx\.mailstead\.test$/);
    expect(verpAddress(ID, 0, HOST, KEY)).not.toBe(verpAddress(ID, 0, HOST, OTHER_KEY));
  });

  it('without a secret key, no tag', () => {
    expect(verpAddress(ID, 0, HOST, null)).toBe('bounce+0195f3c27a107cde8f001234567890ab.0@mx.mailstead.test');
    expect(parseVerp(verpAddress(ID, 3, HOST, null), HOST, null)).toEqual({ emailId: ID, recipientIndex: 3, signed: false });
  });

  it.each([0, 1, 7, 10, 25, 49])('round-trips recipient index %i', (index) => {
    expect(parseVerp(verpAddress(ID, index, HOST, KEY), HOST, KEY)).toEqual({ emailId: ID, recipientIndex: index, signed: true });
  });

  it('round-trips many generated ids', () => {
    for (let i = 0; i < 200; i++) {
      const key = randomBytes(32);
      const hex = Array.from({ length: 32 }, () => '0123456789abcdef'[Math.floor(Math.random() * 16)]).join('');
      const id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
      const index = i % 50;
      expect(parseVerp(verpAddress(id, index, HOST, key), HOST, key)).toEqual({ emailId: id, recipientIndex: index, signed: true });
    }
  });

  it('reads an address whose case a remote server changed', () => {
    expect(parseVerp(verpAddress(ID, 3, HOST, KEY).toUpperCase(), HOST, KEY)).toEqual({ emailId: ID, recipientIndex: 3, signed: true });
  });

  it('refuses another recipient’s address written from one’s own: the index changed, the tag kept', () => {
    const mine = verpAddress(ID, 0, HOST, KEY);
    expect(parseVerp(mine.replace('.0.', '.1.'), HOST, KEY)).toBeNull();
    expect(parseVerp(mine.replace('.0.', '.1.'), HOST, null)).toBeNull();
  });

  it.each([
    ['a tag of another key', verpAddress(ID, 0, HOST, OTHER_KEY)],
    ['a short tag', verpAddress(ID, 0, HOST, KEY).replace(/\.([0-9a-f]{10})@/, (_m, t: string) => `.${t.slice(0, 9)}@`)],
    ['a long tag', verpAddress(ID, 0, HOST, KEY).replace('@', '0@')],
    ['another host', verpAddress(ID, 0, 'mx.other.test', KEY)],
    ['no index', `bounce+0195f3c27a107cde8f001234567890ab.${tag(KEY, '0195f3c27a107cde8f001234567890ab.0')}@${HOST}`],
    ['a short id', `bounce+0195f3c27a107cde.0@${HOST}`],
    ['not hex', `bounce+0195f3c27a107cde8f001234567890zz.0@${HOST}`],
    ['another local part', `postmaster@${HOST}`],
    ['no plus', `bounce0195f3c27a107cde8f001234567890ab.0@${HOST}`],
    ['empty', ''],
  ])('refuses %s', (_, address) => {
    expect(parseVerp(address, HOST, KEY)).toBeNull();
  });

  it("an address without a tag (an earlier version's) is read as unsigned, trusted only for an email to one recipient or without a key", () => {
    const legacy = parseVerp(`bounce+0195f3c27a107cde8f001234567890ab.1@${HOST}`, HOST, KEY)!;
    expect(legacy).toEqual({ emailId: ID, recipientIndex: 1, signed: false });
    expect(verpTrusted(legacy, 1, KEY)).toBe(true);
    expect(verpTrusted(legacy, 2, KEY)).toBe(false);
    expect(verpTrusted(legacy, 2, null)).toBe(true);
    expect(verpTrusted(parseVerp(verpAddress(ID, 1, HOST, KEY), HOST, KEY)!, 2, KEY)).toBe(true);
  });

  it('a server without a key refuses a tagged address', () => {
    expect(parseVerp(verpAddress(ID, 0, HOST, KEY), HOST, null)).toBeNull();
  });
});
