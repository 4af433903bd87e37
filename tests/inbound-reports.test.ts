import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LIMITS, parseReport, type InboundReport } from '../mta/inbound/reports.js';
import { parseVerp, verpAddress } from '../mta/verp.js';

/**
 * Asynchronous bounces and complaints (docs/api/decisions.md section 3) as they arrive at inbound SMTP: RFC 3464 delivery
 * status notifications, Exim and Exchange notices that only set X-Failed-Recipients, and RFC 5965 feedback reports.
 * The messages are built here from the examples of RFC 3464 appendix D and RFC 5965 appendix B, with the layouts
 * Postfix, Exim, Gmail and Yahoo use, and with Mailstead's VERP envelope sender where the original comes back.
 */

const HOST = 'mx.mailstead.test';
const EMAIL_ID = '0195f3c2-7a10-7cde-8f00-1234567890ab';
const VERP = verpAddress(EMAIL_ID, 0, HOST, null);
const ORIGINAL_ID = '<0195f3c2-7a10-7cde-8f00-1234567890ab@shop.example>';

/** Messages arrive over SMTP with CRLF line ends; the fixtures are written with LF and sent as CRLF. */
const crlf = (text: string): Buffer => Buffer.from(text.replace(/\r?\n/g, '\r\n'), 'utf8');
const lf = (text: string): Buffer => Buffer.from(text.replace(/\r\n/g, '\n'), 'utf8');
const parse = (text: string): InboundReport => parseReport(crlf(text));

/** A fixture with one piece replaced; a piece that is not there fails the test instead of testing the fixture unchanged. */
function edit(text: string, from: string | RegExp, to: string): string {
  const edited = text.replace(from, to);
  if (edited === text) throw new Error(`fixture edit found nothing to replace: ${String(from)}`);
  return edited;
}

/** A multipart body from parts given as header lines and a body. */
function multipart(boundary: string, parts: string[], close = true): string {
  return `This is a MIME-encapsulated message.\n\n${parts.map((p) => `--${boundary}\n${p}\n`).join('')}${close ? `--${boundary}--\n` : ''}`;
}

const RETURNED_HEADERS = `Return-Path: <${VERP}>
Received: from mx.mailstead.test (mx.mailstead.test [198.51.100.7])
\tby mx.example.net (Postfix) with ESMTPS id 4F1A2B3C4D
\tfor <gone@example.net>; Wed,  1 Oct 2025 10:00:01 +0000 (UTC)
From: Shop <receipts@shop.example>
To: gone@example.net
Subject: Your receipt
Message-ID: ${ORIGINAL_ID}
Date: Wed, 01 Oct 2025 10:00:00 +0000
MIME-Version: 1.0
`;

const POSTFIX_STATUS = `Reporting-MTA: dns; mx.example.net
X-Postfix-Queue-ID: 4F1A2B3C4D
X-Postfix-Sender: rfc822; ${VERP}
Arrival-Date: Wed,  1 Oct 2025 10:00:01 +0000 (UTC)

Final-Recipient: rfc822; gone@example.net
Original-Recipient: rfc822;Gone@Example.net
Action: failed
Status: 5.1.1
Remote-MTA: dns; mail.example.net
Diagnostic-Code: smtp; 550 5.1.1 <gone@example.net>: Recipient address rejected: User unknown in local recipient table
`;

const POSTFIX_NOTICE = `Content-Description: Notification
Content-Type: text/plain; charset=utf-8

This is the mail system at host mx.example.net.

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients.

<gone@example.net>: host mail.example.net[192.0.2.25] said: 550 5.1.1
    <gone@example.net>: Recipient address rejected: User unknown in local
    recipient table (in reply to RCPT TO command)
`;

const POSTFIX_BOUNDARY = '4F1A2B3C4D.1759312805/mx.example.net';
const POSTFIX_CONTENT_TYPE = `Content-Type: multipart/report; report-type=delivery-status;\n\tboundary="${POSTFIX_BOUNDARY}"`;

/** The multipart/report body of a Postfix bounce: notice, delivery report, returned headers. */
function postfixReport(
  statusPart = `Content-Description: Delivery report\nContent-Type: message/delivery-status\n\n${POSTFIX_STATUS}`,
  returned = RETURNED_HEADERS,
): string {
  return multipart(POSTFIX_BOUNDARY, [
    POSTFIX_NOTICE,
    statusPart,
    `Content-Description: Undelivered Message Headers\nContent-Type: text/rfc822-headers\n\n${returned}`,
  ]);
}

function postfixBounce(statusPart?: string, returned?: string): string {
  return `Return-Path: <>
Date: Wed,  1 Oct 2025 10:00:05 +0000 (UTC)
From: MAILER-DAEMON@mx.example.net (Mail Delivery System)
Subject: Undelivered Mail Returned to Sender
To: ${VERP}
Auto-Submitted: auto-replied
MIME-Version: 1.0
${POSTFIX_CONTENT_TYPE}
Content-Transfer-Encoding: 8bit
Message-Id: <20251001100005.5E6F7A8B9C@mx.example.net>

${postfixReport(statusPart, returned)}`;
}

const POSTFIX_RECIPIENTS = [
  {
    recipient: 'gone@example.net',
    action: 'failed',
    status: '5.1.1',
    diagnostic: '550 5.1.1 <gone@example.net>: Recipient address rejected: User unknown in local recipient table',
  },
];

const POSTFIX_EXPECTED: InboundReport = { kind: 'dsn', recipients: POSTFIX_RECIPIENTS, originalMessageId: ORIGINAL_ID, originalReturnPath: VERP };

/** Postfix's delay warning: the recipient is still being retried. */
const DELAYED = `From: MAILER-DAEMON@mx.example.org (Mail Delivery System)
Subject: Delayed Mail (still being retried)
To: ${VERP}
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="D9C8.1759316401/mx.example.org"

${multipart('D9C8.1759316401/mx.example.org', [
  'Content-Type: text/plain\n\nThis is the mail system at host mx.example.org.\n\n####################################################################\n# THIS IS A WARNING ONLY.  YOU DO NOT NEED TO RESEND YOUR MESSAGE. #\n####################################################################\n',
  `Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.org
Arrival-Date: Wed,  1 Oct 2025 10:00:01 +0000 (UTC)

Final-Recipient: rfc822; slow@example.org
Original-Recipient: rfc822;slow@example.org
Action: delayed
Status: 4.4.1
Diagnostic-Code: X-Postfix; connect to mail.example.org[192.0.2.80]:25: Connection
    timed out
Will-Retry-Until: Sun,  5 Oct 2025 10:00:01 +0000 (UTC)
`,
  `Content-Type: text/rfc822-headers\n\n${edit(RETURNED_HEADERS, 'gone@example.net', 'slow@example.org')}`,
])}`;

/** RFC 3464 appendix D.1, "simple DSN": a recipient that failed after five days of timeouts, hence 4.0.0. */
const RFC3464_D1 = `Date: Thu, 7 Jul 1994 17:16:05 -0400
From: Mail Delivery Subsystem <MAILER-DAEMON@CS.UTK.EDU>
Message-Id: <199407072116.RAA14128@CS.UTK.EDU>
Subject: Returned mail: Cannot send message for 5 days
To: <owner-info-mime@cs.utk.edu>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
    boundary="RAA14128.773615765/CS.UTK.EDU"

--RAA14128.773615765/CS.UTK.EDU

The original message was received at Sat, 2 Jul 1994 17:10:28 -0400
from root@localhost

    ----- The following addresses had delivery problems -----
<louisl@larry.slip.umd.edu>  (unrecoverable error)

    ----- Transcript of session follows -----
<louisl@larry.slip.umd.edu>... Deferred: Connection timed out
    with larry.slip.umd.edu.
Message could not be delivered for 5 days
Message will be deleted from queue

--RAA14128.773615765/CS.UTK.EDU
content-type: message/delivery-status

Reporting-MTA: dns; cs.utk.edu

Original-Recipient: rfc822;louisl@larry.slip.umd.edu
Final-Recipient: rfc822;louisl@larry.slip.umd.edu
Action: failed
Status: 4.0.0
Diagnostic-Code: smtp; 426 connection timed out
Last-Attempt-Date: Thu, 7 Jul 1994 17:15:49 -0400

--RAA14128.773615765/CS.UTK.EDU
content-type: message/rfc822

From: owner-info-mime@cs.utk.edu
To: louisl@larry.slip.umd.edu
Subject: mime
Message-ID: <199407021710.RAA0001@CS.UTK.EDU>

[original message goes here]

--RAA14128.773615765/CS.UTK.EDU--
`;

/** RFC 3464 appendix D.3, "multi-recipient DSN": two failed recipients and a delayed one, a folded Diagnostic-Code. */
const RFC3464_D3 = `Date: Fri, 8 Jul 1994 09:21:47 -0400
From: Mail Delivery Subsystem <MAILER-DAEMON@CS.UTK.EDU>
Subject: Returned mail: User unknown
To: <owner-ups-mib@CS.UTK.EDU>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
    boundary="JAA13167.773673707/CS.UTK.EDU"

--JAA13167.773673707/CS.UTK.EDU
content-type: text/plain; charset=us-ascii

    ----- The following addresses had delivery problems -----
<arathib@vnet.IBM.COM>  (unrecoverable error)
<wsnell@sdcc13.ucsd.edu>  (unrecoverable error)

--JAA13167.773673707/CS.UTK.EDU
content-type: message/delivery-status

Reporting-MTA: dns; cs.utk.edu

Original-Recipient: rfc822;arathib@vnet.IBM.COM
Final-Recipient: rfc822;arathib@vnet.ibm.com
Action: failed
Status: 5.0.0 (permanent failure)
Diagnostic-Code: smtp;  550 'arathib@vnet.IBM.COM' is not a
    registered gateway user
Remote-MTA: dns; vnet.ibm.com

Original-Recipient: rfc822;johnh@hpnjld.njd.hp.com
Final-Recipient: rfc822;johnh@hpnjld.njd.hp.com
Action: delayed
Status: 4.0.0 (hpnjld.njd.jp.com: host name lookup failure)

Original-Recipient: rfc822;wsnell@sdcc13.ucsd.edu
Final-Recipient: rfc822;wsnell@sdcc13.ucsd.edu
Action: failed
Status: 5.0.0
Diagnostic-Code: smtp; 550 user unknown
Remote-MTA: dns; sdcc13.ucsd.edu

--JAA13167.773673707/CS.UTK.EDU
content-type: message/rfc822

[original message goes here]

--JAA13167.773673707/CS.UTK.EDU--
`;

/** Two recipients of one Mailstead message at one provider: one failed with Gmail's diagnostic folded over three lines, one delayed. */
const TWO_RECIPIENTS = `From: Mail Delivery Subsystem <mailer-daemon@mx.example.com>
To: ${VERP}
Subject: Delivery Status Notification (Failure)
MIME-Version: 1.0
Content-Type: multipart/report; boundary="000000000000cf33c605eaa776f8"; report-type=delivery-status

${multipart('000000000000cf33c605eaa776f8', [
  'Content-Type: text/plain; charset="UTF-8"\n\nAddress not found. Your message wasn\'t delivered to ada@example.com.\n',
  `Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.com
Arrival-Date: Wed, 01 Oct 2025 03:00:04 -0700 (PDT)

Final-Recipient: rfc822; <Ada@Example.com>
Action: failed
Status: 5.1.1
Remote-MTA: dns; mail.example.com. (192.0.2.40, the server for the domain example.com.)
Diagnostic-Code: smtp; 550-5.1.1 The email account that you tried to reach does
\t not exist. Please try 550-5.1.1 double-checking the recipient's email
 address for typos or unnecessary spaces. 550 5.1.1
Last-Attempt-Date: Wed, 01 Oct 2025 03:00:05 -0700 (PDT)

Final-Recipient: rfc822; grace@example.com
Action: delayed
Status: 4.2.2
Diagnostic-Code: smtp; 452 4.2.2 The email account that you tried to reach is over quota.
Will-Retry-Until: Sun, 05 Oct 2025 03:00:04 -0700 (PDT)
`,
  `Content-Type: message/rfc822\n\n${RETURNED_HEADERS}\nHello.\n`,
])}`;

/** Exim's notice: no report part, only X-Failed-Recipients and prose with the remote reply. */
const EXIM_NOTICE = `Return-path: <>
From: Mail Delivery System <Mailer-Daemon@mx.example.com>
To: ${VERP}
Subject: Mail delivery failed: returning message to sender
X-Failed-Recipients: alice@example.com, Bob@Example.org
Auto-Submitted: auto-replied
Content-Type: text/plain; charset=us-ascii

This message was created automatically by mail delivery software.

A message that you sent could not be delivered to one or more of its
recipients. This is a permanent error. The following address(es) failed:

  alice@example.com
    host mx.example.com [10.4.2.2]
    SMTP error from remote mail server after RCPT TO:<alice@example.com>:
    550 5.1.1 RESOLVER.ADR.RecipNotFound; not found
  bob@example.org
    host mx.example.org [192.0.2.7]
    SMTP error from remote mail server after RCPT TO:<bob@example.org>:
    550 5.1.1 RESOLVER.ADR.RecipNotFound; not found

------ This is a copy of the message, including all the headers. ------

${RETURNED_HEADERS}
Hello.
`;

/** RFC 5965 appendix B.2, the complete example. */
const RFC5965_B2 = `From: <abusedesk@example.com>
Date: Thu, 8 Mar 2005 17:40:36 EDT
Subject: FW: Earn money
To: <abuse@example.net>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
     boundary="part1_13d.2e68ed54_boundary"

--part1_13d.2e68ed54_boundary
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP
192.0.2.1 on Thu, 8 Mar 2005 14:00:00 EDT.  For more information
about this format please see http://www.mipassoc.org/arf/.

--part1_13d.2e68ed54_boundary
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: SomeGenerator/1.0
Version: 1
Original-Mail-From: <somespammer@example.net>
Original-Rcpt-To: <user@example.com>
Arrival-Date: Thu, 8 Mar 2005 14:00:00 EDT
Reporting-MTA: dns; mail.example.com
Source-IP: 192.0.2.1
Authentication-Results: mail.example.com;
               spf=fail smtp.mail=somespammer@example.com
Reported-Domain: example.net
Reported-Uri: http://example.net/earn_money.html
Reported-Uri: mailto:user@example.com
Removal-Recipient: user@example.com

--part1_13d.2e68ed54_boundary
Content-Type: message/rfc822
Content-Disposition: inline

From: <somespammer@example.net>
Received: from mailserver.example.net (mailserver.example.net
        [192.0.2.1]) by example.com with ESMTP id M63d4137594e46;
        Thu, 08 Mar 2005 14:00:00 -0400
To: <Undisclosed Recipients>
Subject: Earn money
MIME-Version: 1.0
Content-type: text/plain
Message-ID: 8787KJKJ3K4J3K4J3K4J3.mail@example.net
Date: Thu, 02 Sep 2004 12:31:03 -0500

Spam Spam Spam
Spam Spam Spam
Spam Spam Spam
Spam Spam Spam
--part1_13d.2e68ed54_boundary--
`;

/** The same report about a Mailstead message: the original comes back with the VERP Return-Path its final hop added. */
function mailsteadComplaint(opts: { feedbackType?: string; rcptTo?: string | null; returned?: string } = {}): string {
  const rcptTo = opts.rcptTo === undefined ? 'Original-Rcpt-To: <User@Example.com>\n' : opts.rcptTo === null ? '' : `Original-Rcpt-To: ${opts.rcptTo}\n`;
  let text = edit(RFC5965_B2, 'Original-Mail-From: <somespammer@example.net>', `Original-Mail-From: <${VERP}>`);
  text = edit(text, 'Original-Rcpt-To: <user@example.com>\n', rcptTo);
  const returned = opts.returned ?? edit(RETURNED_HEADERS, 'To: gone@example.net', 'To: "Some User" <user@example.com>');
  text = edit(text, /Content-Disposition: inline\n\n[^]*Spam Spam Spam\n--part1/, `Content-Disposition: inline\n\n${returned}\nHello.\n--part1`);
  return opts.feedbackType === undefined ? text : text.replace('Feedback-Type: abuse', `Feedback-Type: ${opts.feedbackType}`);
}

const ORDINARY = `From: Ada <ada@example.com>
To: ${VERP}
Subject: Re: Your receipt
Message-ID: <reply-1@example.com>
Content-Type: text/plain; charset=utf-8

Thanks! By the way, status 5.1.1 means nothing here.
`;

describe('RFC 3464 delivery status notifications', () => {
  it('reads a Postfix bounce: the failed recipient, its status and diagnostic, and the original Message-ID and VERP Return-Path', () => {
    const report = parse(postfixBounce());
    expect(report).toEqual(POSTFIX_EXPECTED);
    // The Return-Path is what the caller hands to parseVerp.
    expect(parseVerp(report!.originalReturnPath!, HOST, null)).toEqual({ emailId: EMAIL_ID, recipientIndex: 0, signed: false });
  });

  it('reads a delay warning: action delayed, its 4.x.x status, the X-Postfix diagnostic unfolded', () => {
    expect(parse(DELAYED)).toEqual({
      kind: 'dsn',
      recipients: [
        { recipient: 'slow@example.org', action: 'delayed', status: '4.4.1', diagnostic: 'connect to mail.example.org[192.0.2.80]:25: Connection timed out' },
      ],
      originalMessageId: ORIGINAL_ID,
      originalReturnPath: VERP,
    });
  });

  it('reads RFC 3464 D.1: a failure with a 4.0.0 status stays as the report says, the Message-ID comes from the returned message/rfc822', () => {
    expect(parse(RFC3464_D1)).toEqual({
      kind: 'dsn',
      recipients: [{ recipient: 'louisl@larry.slip.umd.edu', action: 'failed', status: '4.0.0', diagnostic: '426 connection timed out' }],
      originalMessageId: '<199407021710.RAA0001@CS.UTK.EDU>',
      originalReturnPath: null,
    });
  });

  it('reads RFC 3464 D.3: every recipient block in order, a folded Diagnostic-Code joined, comments after the Status code dropped', () => {
    expect(parse(RFC3464_D3)).toEqual({
      kind: 'dsn',
      recipients: [
        { recipient: 'arathib@vnet.ibm.com', action: 'failed', status: '5.0.0', diagnostic: "550 'arathib@vnet.IBM.COM' is not a registered gateway user" },
        // No Diagnostic-Code: the Status comment is the best text there is.
        { recipient: 'johnh@hpnjld.njd.hp.com', action: 'delayed', status: '4.0.0', diagnostic: 'hpnjld.njd.jp.com: host name lookup failure' },
        { recipient: 'wsnell@sdcc13.ucsd.edu', action: 'failed', status: '5.0.0', diagnostic: '550 user unknown' },
      ],
      originalMessageId: null,
      originalReturnPath: null,
    });
  });

  it('reads two recipients, one failed with a diagnostic folded over three lines (tab and space), one delayed; the original as message/rfc822', () => {
    expect(parse(TWO_RECIPIENTS)).toEqual({
      kind: 'dsn',
      recipients: [
        {
          recipient: 'ada@example.com',
          action: 'failed',
          status: '5.1.1',
          diagnostic:
            "550-5.1.1 The email account that you tried to reach does not exist. Please try 550-5.1.1 double-checking the recipient's email address for typos or unnecessary spaces. 550 5.1.1",
        },
        {
          recipient: 'grace@example.com',
          action: 'delayed',
          status: '4.2.2',
          diagnostic: '452 4.2.2 The email account that you tried to reach is over quota.',
        },
      ],
      originalMessageId: ORIGINAL_ID,
      originalReturnPath: VERP,
    });
  });

  it('reads a message/global-delivery-status (RFC 6533) with a UTF-8 address, written plain or as \\x{HEX}', () => {
    const status = `Content-Type: message/global-delivery-status\n\nReporting-MTA: dns; mx.example.jp\n\nFinal-Recipient: utf-8; 用户@例子.example\nAction: failed\nStatus: 5.1.1\n\nFinal-Recipient: utf-8; J\\x{F6}rg@example.de\nAction: failed\nStatus: 5.1.1\n`;
    const report = parse(postfixBounce(status));
    expect(report?.kind === 'dsn' && report.recipients.map((r) => r.recipient)).toEqual(['用户@例子.example', 'jörg@example.de']);
  });

  describe('the recipient address', () => {
    const cases: { field: string; recipient: string }[] = [
      { field: 'Final-Recipient: rfc822; user@example.com', recipient: 'user@example.com' },
      { field: 'Final-Recipient: rfc822;user@example.com', recipient: 'user@example.com' },
      { field: 'Final-Recipient: RFC822; <User@Example.COM>', recipient: 'user@example.com' },
      { field: 'Final-Recipient: rfc822 ; user@example.com (was: alias@example.com)', recipient: 'user@example.com' },
      { field: 'Final-Recipient: user@example.com', recipient: 'user@example.com' },
      { field: 'Original-Recipient: rfc822; alias@example.com\nFinal-Recipient: rfc822; mailbox@example.com', recipient: 'mailbox@example.com' },
      { field: 'Final-Recipient: rfc822;\n user@example.com', recipient: 'user@example.com' },
      // An empty or non-address Final-Recipient gives way to Original-Recipient.
      { field: 'Final-Recipient: rfc822; \nOriginal-Recipient: rfc822; orig@example.com', recipient: 'orig@example.com' },
      { field: 'Final-Recipient: x400; /G=user/S=x/O=example/\nOriginal-Recipient: rfc822;<orig@example.com>', recipient: 'orig@example.com' },
      { field: 'Original-Recipient: rfc822; only-original@example.com', recipient: 'only-original@example.com' },
    ];
    it.each(cases)('$field → $recipient', ({ field, recipient }) => {
      const report = parse(
        postfixBounce(`Content-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n\n${field}\nAction: failed\nStatus: 5.1.1\n`),
      );
      expect(report?.kind === 'dsn' && report.recipients).toEqual([
        { recipient, action: 'failed', status: '5.1.1', diagnostic: 'no Diagnostic-Code in the report' },
      ]);
    });
  });

  describe('action, status and diagnostic of a recipient block', () => {
    const cases: { name: string; fields: string; action: string; status: string; diagnostic: string }[] = [
      {
        name: 'Status wins over the code in the diagnostic',
        fields: 'Action: failed\nStatus: 5.2.2\nDiagnostic-Code: smtp; 550 5.1.1 no such user',
        action: 'failed',
        status: '5.2.2',
        diagnostic: '550 5.1.1 no such user',
      },
      {
        name: 'no Status: the first code of the diagnostic',
        fields: 'Action: failed\nDiagnostic-Code: smtp; 550-5.7.26 Unauthenticated email is not accepted',
        action: 'failed',
        status: '5.7.26',
        diagnostic: '550-5.7.26 Unauthenticated email is not accepted',
      },
      {
        name: 'an IP address in the diagnostic is no code',
        fields: 'Action: failed\nDiagnostic-Code: smtp; 554 rejected by 10.5.1.1 (#5.7.1)',
        action: 'failed',
        status: '5.7.1',
        diagnostic: '554 rejected by 10.5.1.1 (#5.7.1)',
      },
      {
        name: 'a malformed Status is ignored',
        fields: 'Action: failed\nStatus: 550\nDiagnostic-Code: smtp; 550 5.1.1 no such user',
        action: 'failed',
        status: '5.1.1',
        diagnostic: '550 5.1.1 no such user',
      },
      {
        name: 'no code anywhere, failed: 5.0.0',
        fields: 'Action: failed\nDiagnostic-Code: smtp; 550 no such user',
        action: 'failed',
        status: '5.0.0',
        diagnostic: '550 no such user',
      },
      {
        name: 'no code anywhere, delayed: 4.0.0',
        fields: 'Action: delayed',
        action: 'delayed',
        status: '4.0.0',
        diagnostic: 'no Diagnostic-Code in the report',
      },
      {
        name: 'Action and names in capitals, a comment after the action',
        fields: 'ACTION: Failed (bad mailbox)\nSTATUS: 5.1.1\nDIAGNOSTIC-CODE: SMTP; 550 5.1.1 unknown',
        action: 'failed',
        status: '5.1.1',
        diagnostic: '550 5.1.1 unknown',
      },
      {
        name: 'no Action: inferred from a 5.x.x status',
        fields: 'Status: 5.1.1',
        action: 'failed',
        status: '5.1.1',
        diagnostic: 'no Diagnostic-Code in the report',
      },
      {
        name: 'no Action: inferred from a 4.x.x code in the diagnostic',
        fields: 'Diagnostic-Code: smtp; 452 4.2.2 over quota',
        action: 'delayed',
        status: '4.2.2',
        diagnostic: '452 4.2.2 over quota',
      },
      {
        name: 'an action we do not know is returned as written, with 4.0.0 (not taken from a prototype)',
        fields: 'Action: constructor',
        action: 'constructor',
        status: '4.0.0',
        diagnostic: 'no Diagnostic-Code in the report',
      },
      {
        name: 'a delivered recipient is returned too',
        fields: 'Action: delivered\nStatus: 2.0.0',
        action: 'delivered',
        status: '2.0.0',
        diagnostic: 'no Diagnostic-Code in the report',
      },
      {
        name: 'a diagnostic without a type prefix',
        fields: 'Action: failed\nStatus: 5.1.1\nDiagnostic-Code: 550 5.1.1 RESOLVER.ADR.RecipNotFound; not found',
        action: 'failed',
        status: '5.1.1',
        diagnostic: '550 5.1.1 RESOLVER.ADR.RecipNotFound; not found',
      },
    ];
    it.each(cases)('$name', ({ fields, action, status, diagnostic }) => {
      const report = parse(
        postfixBounce(`Content-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n\nFinal-Recipient: rfc822; user@example.com\n${fields}\n`),
      );
      expect(report?.kind === 'dsn' && report.recipients).toEqual([{ recipient: 'user@example.com', action, status, diagnostic }]);
    });

    it('a block with neither Action nor any code says nothing about a delivery and is left out', () => {
      const report = parse(
        postfixBounce(
          `Content-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n\nFinal-Recipient: rfc822; quiet@example.com\nRemote-MTA: dns; mx.example.com\n\n${POSTFIX_STATUS.split('\n\n')[1]}`,
        ),
      );
      expect(report?.kind === 'dsn' && report.recipients.map((r) => r.recipient)).toEqual(['gone@example.net']);
    });

    it('cuts a long diagnostic at 1000 characters', () => {
      const long = 'x'.repeat(1500);
      const report = parse(
        postfixBounce(
          `Content-Type: message/delivery-status\n\nFinal-Recipient: rfc822; user@example.com\nAction: failed\nStatus: 5.0.0\nDiagnostic-Code: smtp; 550 ${long}\n`,
        ),
      );
      expect(report?.kind === 'dsn' && report.recipients[0]!.diagnostic).toBe(`550 ${long}`.slice(0, 1000));
    });
  });

  it('splits recipient blocks whose separating blank line is missing, at the repeated address field', () => {
    const status = `Content-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n\nOriginal-Recipient: rfc822;a@example.com\nFinal-Recipient: rfc822;a@example.com\nAction: failed\nStatus: 5.1.1\nOriginal-Recipient: rfc822;b@example.com\nFinal-Recipient: rfc822;b@example.com\nAction: delayed\nStatus: 4.4.1\n`;
    const report = parse(postfixBounce(status));
    expect(report?.kind === 'dsn' && report.recipients.map((r) => [r.recipient, r.action, r.status])).toEqual([
      ['a@example.com', 'failed', '5.1.1'],
      ['b@example.com', 'delayed', '4.4.1'],
    ]);
  });

  it('reads at most 100 recipient blocks', () => {
    const blocks = Array.from({ length: 150 }, (_, i) => `Final-Recipient: rfc822; r${i}@example.com\nAction: failed\nStatus: 5.1.1\n`).join('\n');
    const report = parse(postfixBounce(`Content-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n\n${blocks}`));
    expect(LIMITS.recipients).toBe(100);
    expect(report?.kind === 'dsn' && report.recipients.length).toBe(100);
    expect(report?.kind === 'dsn' && report.recipients[99]!.recipient).toBe('r99@example.com');
  });

  it('takes the envelope sender from X-Postfix-Sender when the returned headers have no Return-Path (bounced before final delivery)', () => {
    const report = parse(postfixBounce(undefined, edit(RETURNED_HEADERS, /^Return-Path: .*\n/, '')));
    expect(report).toEqual({ ...POSTFIX_EXPECTED, originalReturnPath: VERP });
    const neither = parse(
      postfixBounce(
        `Content-Type: message/delivery-status\n\n${edit(POSTFIX_STATUS, /^X-Postfix-Sender: .*\n/m, '')}`,
        edit(RETURNED_HEADERS, /^Return-Path: .*\n/, ''),
      ),
    );
    expect(neither).toEqual({ ...POSTFIX_EXPECTED, originalReturnPath: null });
  });

  it("takes the original's Message-ID from X-Original-Message-ID when no headers come back (Gmail), and a Return-Path of <> as none", () => {
    const status = `Content-Type: message/delivery-status\n\nReporting-MTA: dns; googlemail.com\nX-Original-Message-ID: ${ORIGINAL_ID}\n\n${POSTFIX_STATUS.split('\n\n')[1]}`;
    const report = parse(postfixBounce(status, 'Return-Path: <>\nSubject: no id here\n'));
    expect(report).toEqual({ ...POSTFIX_EXPECTED, originalReturnPath: null });
  });
});

describe('X-Failed-Recipients without a report (Exim, Exchange)', () => {
  it('reports every listed address as failed, with the first failure code of the body and that line as the diagnostic', () => {
    expect(parse(EXIM_NOTICE)).toEqual({
      kind: 'dsn',
      recipients: [
        { recipient: 'alice@example.com', action: 'failed', status: '5.1.1', diagnostic: '550 5.1.1 RESOLVER.ADR.RecipNotFound; not found' },
        { recipient: 'bob@example.org', action: 'failed', status: '5.1.1', diagnostic: '550 5.1.1 RESOLVER.ADR.RecipNotFound; not found' },
      ],
      // The returned headers are prose in this body, not a part: not read.
      originalMessageId: null,
      originalReturnPath: null,
    });
  });

  it('without a code in the body: 5.0.0 and the header named as the diagnostic', () => {
    const report = parse(edit(EXIM_NOTICE, /550 5\.1\.1 /g, '550 '));
    expect(report?.kind === 'dsn' && report.recipients[0]).toEqual({
      recipient: 'alice@example.com',
      action: 'failed',
      status: '5.0.0',
      diagnostic: 'X-Failed-Recipients',
    });
  });

  it('skips the 2.x.x replies a transcript quotes', () => {
    const report = parse(edit(EXIM_NOTICE, '    SMTP error', '    MAIL FROM:<x@example.com> 250 2.1.0 Sender OK\n    SMTP error'));
    expect(report?.kind === 'dsn' && report.recipients[0]!.status).toBe('5.1.1');
  });

  it("reads Exchange's quoted-printable text part of a multipart/alternative, one address per repeated header", () => {
    const message = `From: postmaster@outlook.example
To: ${VERP}
Subject: Undeliverable: Your receipt
X-Failed-Recipients: gone@contoso.example
X-Failed-Recipients: <Also@Contoso.example>
Content-Type: multipart/alternative; boundary="_000_alt_"

${multipart('_000_alt_', [
  'Content-Type: text/plain; charset="us-ascii"\nContent-Transfer-Encoding: quoted-printable\n\nDelivery has failed to these recipients or groups:\n\nDiagnostic information for administrators:\n\nRemote Server returned \'550 5.1.1 RESOLVER.ADR.RecipNotFound; n=\not found\'\n',
  'Content-Type: text/html; charset="us-ascii"\n\n<p>Remote Server returned 550 4.4.7 expired</p>\n',
])}`;
    expect(parse(message)).toEqual({
      kind: 'dsn',
      recipients: ['gone@contoso.example', 'also@contoso.example'].map((recipient) => ({
        recipient,
        action: 'failed',
        status: '5.1.1',
        diagnostic: "Remote Server returned '550 5.1.1 RESOLVER.ADR.RecipNotFound; not found'",
      })),
      originalMessageId: null,
      originalReturnPath: null,
    });
  });

  it('a report part, when there is one, wins over X-Failed-Recipients (Exim sends both); a block without an address takes the listed one', () => {
    const withHeader = edit(postfixBounce(), 'Auto-Submitted: auto-replied\n', 'Auto-Submitted: auto-replied\nX-Failed-Recipients: other@example.net\n');
    expect(parse(withHeader)).toEqual(POSTFIX_EXPECTED);
    const unnamed = edit(
      postfixBounce(`Content-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n\nAction: failed\nStatus: 5.0.0\n`),
      'Auto-Submitted: auto-replied\n',
      'Auto-Submitted: auto-replied\nX-Failed-Recipients: Listed@example.net\n',
    );
    expect(parse(unnamed)).toEqual({
      ...POSTFIX_EXPECTED,
      recipients: [{ recipient: 'listed@example.net', action: 'failed', status: '5.0.0', diagnostic: 'no Diagnostic-Code in the report' }],
    });
  });
});

describe('a delivery-status multipart/report without the status part (Yahoo, qmail)', () => {
  it('reads `<address>:` lines of the text and the reply under them; each is failed, even with a 4.x.x code', () => {
    const message = `From: MAILER-DAEMON@yahoo.example
To: ${VERP}
Subject: Failure Notice
Content-Type: multipart/report; report-type=delivery-status;
 boundary="-=Part.4863e=-"

${multipart('-=Part.4863e=-', [
  "Content-Type: text/plain; charset=UTF-8\n\nSorry, we were unable to deliver your message to the following address.\n\n<Gone@hot.example>:\n550: 5.1.1 <gone@hot.example>: Recipient address rejected: User unknown in relay recipient table\n\n<late@example.org>:\nConnected to 192.0.2.3 but connection died. (#4.4.2)\nI'm not going to try again; this message has been in the queue too long.\n\n--- Below this line is a copy of the message.\n",
  `Content-Type: message/rfc822\n\n${RETURNED_HEADERS}\nHello.\n`,
])}`;
    const expected: InboundReport = {
      kind: 'dsn',
      recipients: [
        {
          recipient: 'gone@hot.example',
          action: 'failed',
          status: '5.1.1',
          diagnostic: '550: 5.1.1 <gone@hot.example>: Recipient address rejected: User unknown in relay recipient table',
        },
        {
          recipient: 'late@example.org',
          action: 'failed',
          status: '4.4.2',
          diagnostic: "Connected to 192.0.2.3 but connection died. (#4.4.2) I'm not going to try again; this message has been in the queue too long.",
        },
      ],
      originalMessageId: ORIGINAL_ID,
      originalReturnPath: VERP,
    };
    expect(parse(message)).toEqual(expected);
    expect(parse(edit(message, 'report-type=delivery-status;', 'Report-Type="Delivery-Status";'))).toEqual(expected);
  });

  it('the same text in ordinary mail is not a report', () => {
    expect(parse(edit(ORDINARY, 'Thanks!', 'Thanks!\n\n<gone@hot.example>:\n550 5.1.1 unknown\n'))).toBeNull();
  });
});

describe('RFC 5965 feedback reports', () => {
  it('reads RFC 5965 B.2 as written: the feedback type, Original-Rcpt-To, Original-Mail-From, and a Message-ID without angle brackets', () => {
    expect(parse(RFC5965_B2)).toEqual({
      kind: 'arf',
      feedbackType: 'abuse',
      recipient: 'user@example.com',
      originalMailFrom: 'somespammer@example.net',
      originalMessageId: '8787KJKJ3K4J3K4J3K4J3.mail@example.net',
      originalReturnPath: null,
    });
  });

  it('reads a complaint about a Mailstead message: the VERP Return-Path and Message-ID of the returned message', () => {
    const report = parse(mailsteadComplaint());
    expect(report).toEqual({
      kind: 'arf',
      feedbackType: 'abuse',
      recipient: 'user@example.com',
      originalMailFrom: VERP,
      originalMessageId: ORIGINAL_ID,
      originalReturnPath: VERP,
    });
    expect(parseVerp(report!.originalReturnPath!, HOST, null)).toEqual({ emailId: EMAIL_ID, recipientIndex: 0, signed: false });
  });

  it('without Original-Rcpt-To: the To of the returned message; RFC 5965 B.1 "<Undisclosed Recipients>" is none', () => {
    expect(parse(mailsteadComplaint({ rcptTo: null }))).toMatchObject({ kind: 'arf', recipient: 'user@example.com' });
    expect(parse(edit(RFC5965_B2, 'Original-Rcpt-To: <user@example.com>\n', ''))).toMatchObject({ kind: 'arf', recipient: null });
  });

  it("takes Hotmail's X-HmXmrOriginalRecipient before the To of the returned message", () => {
    const returned = `X-HmXmrOriginalRecipient: <Reporter@Hotmail.example>\n${RETURNED_HEADERS}`;
    expect(parse(mailsteadComplaint({ rcptTo: null, returned }))).toMatchObject({
      kind: 'arf',
      recipient: 'reporter@hotmail.example',
      originalReturnPath: VERP,
    });
  });

  it('reads the returned message given as text/rfc822-headers', () => {
    const message = edit(mailsteadComplaint(), 'Content-Type: message/rfc822\nContent-Disposition: inline', 'Content-Type: text/rfc822-headers');
    expect(parse(message)).toMatchObject({ kind: 'arf', originalMessageId: ORIGINAL_ID, originalReturnPath: VERP });
  });

  const types: { field: string | null; feedbackType: string }[] = [
    { field: 'abuse', feedbackType: 'abuse' },
    { field: 'fraud', feedbackType: 'fraud' },
    { field: 'virus', feedbackType: 'virus' },
    { field: 'other', feedbackType: 'other' },
    { field: 'not-spam', feedbackType: 'not-spam' },
    { field: 'Abuse', feedbackType: 'abuse' },
    { field: 'auth-failure', feedbackType: 'auth-failure' },
  ];
  it.each(types)('Feedback-Type: $field → $feedbackType', ({ field, feedbackType }) => {
    expect(parse(mailsteadComplaint({ feedbackType: field ?? '' }))).toMatchObject({ kind: 'arf', feedbackType });
  });

  it('a feedback-report part without Feedback-Type is still a complaint: abuse', () => {
    expect(parse(edit(RFC5965_B2, 'Feedback-Type: abuse\n', ''))).toMatchObject({ kind: 'arf', feedbackType: 'abuse' });
  });
});

describe('MIME as it arrives', () => {
  const fixtures: [string, string][] = [
    ['Postfix bounce', postfixBounce()],
    ['delay warning', DELAYED],
    ['RFC 3464 D.1', RFC3464_D1],
    ['RFC 3464 D.3', RFC3464_D3],
    ['two recipients', TWO_RECIPIENTS],
    ['Exim notice', EXIM_NOTICE],
    ['RFC 5965 B.2', RFC5965_B2],
    ['Mailstead complaint', mailsteadComplaint()],
  ];

  it.each(fixtures)('%s: LF-only line ends read the same as CRLF', (_name, text) => {
    const report = parseReport(crlf(text));
    expect(report).not.toBeNull();
    expect(parseReport(lf(text))).toEqual(report);
  });

  it.each(fixtures)('%s: without the final line end, still read', (_name, text) => {
    expect(parseReport(crlf(edit(text, /\n+$/, '')))).toEqual(parseReport(crlf(text)));
  });

  it.each(fixtures.filter(([name]) => name !== 'Exim notice'))('%s: without the closing boundary, still read', (_name, text) => {
    expect(parseReport(crlf(edit(text, /\n--[^\n]*--\n*$/, '\n')))).toEqual(parseReport(crlf(text)));
  });

  it('reads a base64 delivery-status part', () => {
    const encoded = Buffer.from(POSTFIX_STATUS.replace(/\n/g, '\r\n')).toString('base64').replace(/.{76}/g, '$&\n');
    expect(parse(postfixBounce(`Content-Type: message/delivery-status\nContent-Transfer-Encoding: BASE64\n\n${encoded}\n`))).toEqual(POSTFIX_EXPECTED);
  });

  it('reads a quoted-printable delivery-status part, soft line breaks and all', () => {
    const encoded = edit(edit(POSTFIX_STATUS.replace(/=/g, '=3D'), 'Recipient address rejected: ', 'Recipient address=\n rejected: '), '<gone', '=3Cgone');
    expect(parse(postfixBounce(`Content-Type: message/delivery-status\nContent-Transfer-Encoding: quoted-printable\n\n${encoded}`))).toEqual(POSTFIX_EXPECTED);
  });

  it('reads a base64 returned-headers part and a 7bit status part', () => {
    const headers = Buffer.from(RETURNED_HEADERS).toString('base64').replace(/.{76}/g, '$&\n');
    const message = edit(
      postfixBounce(),
      `Content-Type: text/rfc822-headers\n\n${RETURNED_HEADERS}`,
      `Content-Type: text/rfc822-headers\nContent-Transfer-Encoding: base64\n\n${headers}`,
    );
    expect(parse(edit(message, 'Content-Type: message/delivery-status\n', 'Content-Type: message/delivery-status\nContent-Transfer-Encoding: 7bit\n'))).toEqual(
      POSTFIX_EXPECTED,
    );
  });

  it('reads a report nested in multipart/mixed, as some providers forward it; a message next to the report is not the original', () => {
    const message = `From: fbl@provider.example\nTo: ${VERP}\nSubject: Fwd: bounce\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=outer\n\n${multipart(
      'outer',
      [
        'Content-Type: text/plain\n\nA report for you.\n',
        'Content-Type: message/rfc822\n\nReturn-Path: <someone@provider.example>\nMessage-ID: <cover-note@provider.example>\n\nSee the next part.\n',
        `${POSTFIX_CONTENT_TYPE}\n\n${postfixReport()}`,
      ],
    )}`;
    expect(parse(message)).toEqual(POSTFIX_EXPECTED);
  });

  it('reads odd casing and quoting of the content types, parameters and boundary', () => {
    const upper = edit(
      postfixBounce(),
      POSTFIX_CONTENT_TYPE,
      `CONTENT-TYPE: Multipart/Report; Report-Type="Delivery-Status"; BOUNDARY = "${POSTFIX_BOUNDARY}" ; charset=us-ascii`,
    );
    const message = edit(upper, 'Content-Type: message/delivery-status', 'content-type:MESSAGE/Delivery-Status; charset="us-ascii"');
    expect(parse(message)).toEqual(POSTFIX_EXPECTED);
    const unquoted = `From: x@example.net\nContent-Type: multipart/report; boundary=simple; report-type=delivery-status\n\n${multipart('simple', [`Content-Type: message/delivery-status\n\n${POSTFIX_STATUS}`])}`;
    expect(parse(unquoted)).toMatchObject({ kind: 'dsn', recipients: POSTFIX_RECIPIENTS });
  });

  it('does not take a longer boundary that starts with this one for a delimiter', () => {
    const inner = multipart('b1_inner', ['Content-Type: text/plain\n\nnotice\n', `Content-Type: message/delivery-status\n\n${POSTFIX_STATUS}`]);
    const message = `From: x@example.net\nContent-Type: multipart/mixed; boundary=b1\n\n${multipart('b1', [`Content-Type: multipart/report; report-type=delivery-status; boundary=b1_inner\n\n${inner}`])}`;
    expect(parse(message)).toMatchObject({ kind: 'dsn', recipients: [{ recipient: 'gone@example.net' }] });
  });

  it('a report with a broken boundary gives null, not a throw', () => {
    expect(parse(edit(postfixBounce(), 'boundary="4F1A2B3C4D.1759312805/mx.example.net"', 'boundary="not-the-one"'))).toBeNull();
    expect(parse(edit(postfixBounce(), 'boundary="4F1A2B3C4D.1759312805/mx.example.net"', 'boundary=""'))).toBeNull();
    expect(parse(edit(postfixBounce(), '\tboundary="4F1A2B3C4D.1759312805/mx.example.net"', '\tboundary="4F1A2B3C4D'))).toBeNull();
  });
});

describe('not a report', () => {
  it('ordinary mail is null', () => {
    expect(parse(ORDINARY)).toBeNull();
    const alternative = `From: a@example.com\nTo: ${VERP}\nContent-Type: multipart/alternative; boundary=x\n\n${multipart('x', ['Content-Type: text/plain\n\nhi 5.1.1\n', 'Content-Type: text/html\n\n<p>hi</p>\n'])}`;
    expect(parse(alternative)).toBeNull();
  });

  it('a bounce forwarded by a person as an attachment is their mail, not a report', () => {
    const forwarded = `From: a@example.com\nTo: ${VERP}\nSubject: Fwd: Undelivered Mail\nContent-Type: multipart/mixed; boundary=fwd\n\n${multipart('fwd', ['Content-Type: text/plain\n\nlook at this\n', `Content-Type: message/rfc822\n\n${postfixBounce()}`])}`;
    expect(parse(forwarded)).toBeNull();
  });

  it('a read receipt (multipart/report; report-type=disposition-notification) is null', () => {
    const mdn = `From: a@example.com\nTo: ${VERP}\nContent-Type: multipart/report; report-type=disposition-notification; boundary=mdn\n\n${multipart('mdn', [
      'Content-Type: text/plain\n\nYour message was displayed.\n',
      'Content-Type: message/disposition-notification\n\nReporting-UA: mail.example.com\nFinal-Recipient: rfc822; a@example.com\nDisposition: manual-action/MDN-sent-manually; displayed\n',
    ])}`;
    expect(parse(mdn)).toBeNull();
  });

  it('empty input, headers only, and garbage bytes are null', () => {
    expect(parseReport(Buffer.alloc(0))).toBeNull();
    expect(parse('Subject: hi\n')).toBeNull();
    let seed = 7;
    const bytes = Buffer.from(Array.from({ length: 64 * 1024 }, () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) & 0xff));
    expect(parseReport(bytes)).toBeNull();
  });

  it('never throws, on any bytes or any cut of a report', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 4096 }), (bytes) => {
        parseReport(Buffer.from(bytes));
      }),
      { numRuns: 500, seed: 3464 },
    );
    const words = fc.constantFrom(
      '\r\n',
      '\n',
      '--',
      'Content-Type: multipart/report; boundary=b',
      'Content-Type: message/delivery-status',
      'Content-Transfer-Encoding: base64',
      'Content-Transfer-Encoding: quoted-printable',
      '--b',
      '--b--',
      'Final-Recipient: rfc822;',
      'Action: failed',
      'Status: 5.',
      ' ',
      '=',
      '<',
      '>',
      '\t',
      'X-Failed-Recipients: ',
      'a@b',
      '\u0000',
      '\uFFFD',
    );
    fc.assert(
      fc.property(fc.array(words, { maxLength: 200 }), (pieces) => {
        parseReport(Buffer.from(pieces.join('')));
      }),
      { numRuns: 500, seed: 5965 },
    );
    const whole = crlf(postfixBounce());
    for (let cut = 0; cut <= whole.length; cut++) parseReport(whole.subarray(0, cut));
  });
});

describe('bounded work', () => {
  const quickly = (raw: Buffer): { report: InboundReport; ms: number } => {
    const started = performance.now();
    const report = parseReport(raw);
    return { report, ms: performance.now() - started };
  };
  const MB3 = 3 * 1024 * 1024;

  it('a 3 MB bounce (the whole original returned) is read quickly, from its first 2 MB', () => {
    const big = edit(
      postfixBounce(),
      `Content-Type: text/rfc822-headers\n\n${RETURNED_HEADERS}`,
      `Content-Type: message/rfc822\n\n${RETURNED_HEADERS}\n${'A line of the returned message body, repeated.\n'.repeat(MB3 / 46)}`,
    );
    expect(big.length).toBeGreaterThan(MB3);
    const { report, ms } = quickly(crlf(big));
    expect(report).toEqual(POSTFIX_EXPECTED);
    expect(ms).toBeLessThan(1000);
  });

  it('a report part that starts after the first 2 MB is not looked at', () => {
    const filler = `Content-Type: text/plain\n\n${'x'.repeat(LIMITS.bytes)}\n`;
    const message = `From: x@example.net\nContent-Type: multipart/report; report-type=delivery-status; boundary=b\n\n${multipart('b', [filler, `Content-Type: message/delivery-status\n\n${POSTFIX_STATUS}`])}`;
    const { report, ms } = quickly(crlf(message));
    expect(report).toBeNull();
    expect(ms).toBeLessThan(1000);
  });

  it('reads fields only from the first 256 KB of a header section', () => {
    const padded = edit(
      postfixBounce(),
      'Content-Type: multipart/report',
      `${'X-Padding: 0123456789abcdef\n'.repeat(LIMITS.fieldText / 28 + 1)}Content-Type: multipart/report`,
    );
    expect(parse(padded)).toBeNull();
    expect(
      parse(edit(postfixBounce(), 'Content-Type: multipart/report', `${'X-Padding: 0123456789abcdef\n'.repeat(1000)}Content-Type: multipart/report`)),
    ).toEqual(POSTFIX_EXPECTED);
  });

  const hostile: [string, string][] = [
    ['one 3 MB header line', `Subject: ${'a'.repeat(MB3)}`],
    ['3 MB of header fields', 'a:\n'.repeat(MB3 / 3)],
    ['3 MB of folded header lines', `Content-Type: multipart/report; boundary=b\n${' x;\n'.repeat(MB3 / 4)}`],
    ['3 MB of delimiters', `Content-Type: multipart/report; boundary=b\n\n${'--b\n'.repeat(MB3 / 4)}`],
    [
      '3 MB of nested multipart headers',
      `Content-Type: multipart/mixed; boundary=b\n\n${'--b\nContent-Type: multipart/mixed; boundary=b\n\n'.repeat(MB3 / 48)}`,
    ],
    [
      '3 MB of spaces in a quoted-printable status part',
      `Content-Type: multipart/report; boundary=b\n\n--b\nContent-Type: message/delivery-status\nContent-Transfer-Encoding: quoted-printable\n\n${' '.repeat(MB3)}=`,
    ],
    [
      '3 MB of blank lines in a status part',
      `Content-Type: multipart/report; boundary=b\n\n--b\nContent-Type: message/delivery-status\n\n${'\n \t'.repeat(MB3 / 3)}`,
    ],
    [
      '3 MB of recipient blocks',
      `Content-Type: multipart/report; boundary=b\n\n--b\nContent-Type: message/delivery-status\n\n${'Final-Recipient: rfc822; a@b\nAction: failed\n\n'.repeat(MB3 / 44)}`,
    ],
    ['3 MB of X-Failed-Recipients', `X-Failed-Recipients: ${'a@b, '.repeat(MB3 / 5)}\n\n${'5'.repeat(MB3)}`],
    ['3 MB of parameters', `Content-Type: multipart/report; ${'a="\\'.repeat(MB3 / 4)}`],
    [
      '3 MB of at signs after a bracket in a text-only report',
      `Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n--b\n\n<${'@'.repeat(MB3)}`,
    ],
    [
      '3 MB of spaces in a Status field',
      `Content-Type: multipart/report; boundary=b\n\n--b\nContent-Type: message/delivery-status\n\nFinal-Recipient: rfc822; a@b\nStatus: 5.0.0 (a${' '.repeat(MB3)}b\n`,
    ],
    ['3 MB of codes and brackets in a notice', `X-Failed-Recipients: a@b\n\n${'(#2.0.0 <'.repeat(MB3 / 9)}`],
  ];
  it.each(hostile)('%s: returns quickly without throwing', (_name, text) => {
    const { ms } = quickly(Buffer.from(text));
    expect(ms).toBeLessThan(1500);
  });
});
