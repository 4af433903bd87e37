import { describe, expect, it } from 'vitest';
import { BASIC_CODE_CLASSES, FAILURES, classifyFailure, classifyReply } from '../server/core/dsn.js';

/**
 * DSN classification (docs/api/decisions.md section 3) as a table: the outcome follows the basic reply code's class, the DSN is
 * the reply's enhanced code when it has one of the same class, else derived from the basic code (2.0.0, 4.0.0,
 * 5.0.0), and the detail is the server's own reply text. A failure with no reply at all is always deferred.
 */

describe('classifyReply', () => {
  const cases: { code: number; text: string; status: string; dsn: string }[] = [
    { code: 250, text: 'OK', status: 'delivered', dsn: '2.0.0' },
    { code: 250, text: '250 2.0.0 Ok: queued as 4F1A2B', status: 'delivered', dsn: '2.0.0' },
    { code: 250, text: '250 2.6.0 <id@example.com> [InternalId=1] Queued mail for delivery', status: 'delivered', dsn: '2.6.0' },
    { code: 251, text: '251 2.1.5 User not local; will forward', status: 'delivered', dsn: '2.1.5' },
    { code: 250, text: '250 Message accepted', status: 'delivered', dsn: '2.0.0' },
    { code: 550, text: '550 5.1.1 user unknown', status: 'bounced', dsn: '5.1.1' },
    { code: 550, text: '550 user unknown', status: 'bounced', dsn: '5.0.0' },
    { code: 550, text: '550 5.7.26 Unauthenticated email is not accepted', status: 'bounced', dsn: '5.7.26' },
    { code: 550, text: '550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup', status: 'bounced', dsn: '5.1.10' },
    { code: 552, text: '552 5.2.2 Mailbox full', status: 'bounced', dsn: '5.2.2' },
    { code: 554, text: '554 Transaction failed', status: 'bounced', dsn: '5.0.0' },
    {
      code: 550,
      text: '550-5.1.1 The email account that you tried to reach does not exist.\n550 5.1.1 https://support.google.com/mail/?p=NoSuchUser',
      status: 'bounced',
      dsn: '5.1.1',
    },
    // An enhanced code of another class than the reply's is not believed: the basic code decides.
    { code: 550, text: '550 4.2.2 mailbox over quota', status: 'bounced', dsn: '5.0.0' },
    { code: 554, text: '554 2.0.0 odd but final', status: 'bounced', dsn: '5.0.0' },
    { code: 451, text: '451 4.7.1 greylisted', status: 'deferred', dsn: '4.7.1' },
    { code: 450, text: '450 4.2.1 Mailbox busy, try later', status: 'deferred', dsn: '4.2.1' },
    { code: 421, text: '421 4.7.0 Try again later, closing connection', status: 'deferred', dsn: '4.7.0' },
    { code: 452, text: '452 Too many recipients', status: 'deferred', dsn: '4.0.0' },
    { code: 450, text: '450 5.1.1 temporarily unknown', status: 'deferred', dsn: '4.0.0' },
    { code: 250, text: '250 5.0.0 accepted anyway', status: 'delivered', dsn: '2.0.0' },
  ];

  it.each(cases)('$code "$text" → $status $dsn', ({ code, text, status, dsn }) => {
    const got = classifyReply(code, text);
    expect(got.status).toBe(status);
    expect(got.dsn).toBe(dsn);
    // The detail is the server's own reply text.
    expect(got.detail).toContain(text.split('\n')[0]!.replace(/^\d{3}[ -]/, ''));
  });

  it('every basic class of the table classifies its own codes, with its derived DSN when the reply has no enhanced code', () => {
    for (const row of BASIC_CODE_CLASSES) {
      const first = Number(row.dsn[0]);
      for (const code of [first * 100, first * 100 + 50, first * 100 + 99]) {
        expect(classifyReply(code, `${code} no enhanced code here`)).toMatchObject({ status: row.status, dsn: row.dsn });
      }
    }
    expect(new Map(BASIC_CODE_CLASSES.map((r) => [r.dsn, r.status]))).toEqual(
      new Map([
        ['2.0.0', 'delivered'],
        ['4.0.0', 'deferred'],
        ['5.0.0', 'bounced'],
      ]),
    );
  });

  it('keeps the reply text as the detail', () => {
    expect(classifyReply(550, '550 5.1.1 <gone@example.net>: Recipient address rejected: User unknown').detail).toContain(
      'Recipient address rejected: User unknown',
    );
    expect(classifyReply(250, 'OK').detail).toBe('OK');
  });
});

describe('classifyFailure', () => {
  const cases: { code: string | undefined; dsn: string }[] = [
    { code: 'ECONNREFUSED', dsn: '4.4.1' },
    { code: 'EHOSTUNREACH', dsn: '4.4.1' },
    { code: 'ENETUNREACH', dsn: '4.4.1' },
    { code: 'ETIMEDOUT', dsn: '4.4.1' },
    { code: 'EGREETING', dsn: '4.4.1' },
    { code: 'ECONNRESET', dsn: '4.4.2' },
    { code: 'EPIPE', dsn: '4.4.2' },
    { code: 'ECONNECTION', dsn: '4.4.2' },
    { code: 'ESOCKET', dsn: '4.4.2' },
    { code: 'ENOTFOUND', dsn: '4.4.3' },
    { code: 'ESERVFAIL', dsn: '4.4.3' },
    { code: 'EDNS', dsn: '4.4.3' },
    { code: 'ETLS', dsn: '4.7.5' },
    { code: 'ERR_TLS_CERT_ALTNAME_INVALID', dsn: '4.7.5' },
    { code: 'ESOMETHINGELSE', dsn: '4.4.0' },
    { code: undefined, dsn: '4.4.0' },
  ];

  it.each(cases)('$code → deferred $dsn', ({ code, dsn }) => {
    const got = classifyFailure(code, 'what happened on the socket');
    expect(got).toMatchObject({ status: 'deferred', dsn });
    expect(got.detail).toContain('what happened on the socket');
  });

  it('every row of the failure table is temporary: a 4.x.x DSN, never a bounce', () => {
    for (const row of FAILURES) {
      expect(row.dsn).toMatch(/^4\.\d{1,3}\.\d{1,3}$/);
    }
  });
});
