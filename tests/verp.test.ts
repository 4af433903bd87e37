import { describe, expect, it } from 'vitest';
import { parseVerp, verpAddress } from '../mta/verp.js';

/**
 * The envelope sender of decisions.md section 3: `bounce+<email id hex>.<index in to>@<MAIL_HOSTNAME>`, from which the
 * email and the recipient can be recovered when an asynchronous bounce or complaint comes back.
 */

const HOST = 'mx.mailstead.test';
const ID = '0195f3c2-7a10-7cde-8f00-1234567890ab';

describe('VERP addresses', () => {
  it('names the email (its id as 32 hex digits) and the recipient index on MAIL_HOSTNAME', () => {
    expect(verpAddress(ID, 0, HOST)).toBe('bounce+0195f3c27a107cde8f001234567890ab.0@mx.mailstead.test');
    expect(verpAddress(ID, 49, HOST)).toBe('bounce+0195f3c27a107cde8f001234567890ab.49@mx.mailstead.test');
  });

  it.each([0, 1, 7, 10, 25, 49])('round-trips recipient index %i', (index) => {
    const address = verpAddress(ID, index, HOST);
    expect(parseVerp(address, HOST)).toEqual({ emailId: ID, recipientIndex: index });
  });

  it('round-trips many generated ids', () => {
    for (let i = 0; i < 200; i++) {
      const hex = Array.from({ length: 32 }, () => '0123456789abcdef'[Math.floor(Math.random() * 16)]).join('');
      const id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
      const index = i % 50;
      expect(parseVerp(verpAddress(id, index, HOST), HOST)).toEqual({ emailId: id, recipientIndex: index });
    }
  });

  it('reads an address whose case a remote server changed', () => {
    expect(parseVerp(verpAddress(ID, 3, HOST).toUpperCase(), HOST)).toEqual({ emailId: ID, recipientIndex: 3 });
  });

  it.each([
    ['another host', `bounce+0195f3c27a107cde8f001234567890ab.0@mx.other.test`],
    ['no index', `bounce+0195f3c27a107cde8f001234567890ab@${HOST}`],
    ['a short id', `bounce+0195f3c27a107cde.0@${HOST}`],
    ['not hex', `bounce+0195f3c27a107cde8f001234567890zz.0@${HOST}`],
    ['another local part', `postmaster@${HOST}`],
    ['no plus', `bounce0195f3c27a107cde8f001234567890ab.0@${HOST}`],
    ['empty', ''],
  ])('refuses %s', (_, address) => {
    expect(parseVerp(address, HOST)).toBeNull();
  });
});
