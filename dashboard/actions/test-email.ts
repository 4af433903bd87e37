import type { AccountRow } from '../../db/schema/index.js';
import { readSendRequest } from '../../server/api/routes/emails.js';
import type { Deps } from '../../server/core/deps.js';
import type { DomainView } from '../../server/core/domains.js';
import { sendEmail } from '../../server/core/sending.js';
import { SIMULATOR_DOMAIN, isSimulatorAddress } from '../../server/core/simulator.js';
import type { Config } from '../../server/shared/config.js';
import { ApiError } from '../../server/shared/errors.js';
import { operatorContext } from '../on-behalf.js';
import type { Outcome } from '../render.js';

/**
 * The domain page's "send a test email": the built-in `notification` template from the domain, sent through
 * POST /emails's own path (readSendRequest, then sendEmail: the same checks in the same order, the same log entry,
 * quota and credit), acting as the domain's account. How it goes depends on the domain and the server, as data:
 * TEST_SEND_MODES.
 */

export type TestSendMode = 'send' | 'capture' | 'sandbox';

export const TEST_SEND_MODES: Record<TestSendMode, { label: string; explains: (domain: string) => string }> = {
  send: {
    label: 'will be delivered',
    explains: (d) =>
      `The built-in notification template, sent from ${TEST_LOCAL_PART}@${d} through the checks of POST /emails and delivered like any send: it counts toward the account's daily quota and costs a credit.`,
  },
  capture: {
    label: 'will be captured, not delivered',
    explains: (d) =>
      `This server runs DELIVERY_MODE=capture: the built-in notification template, sent from ${TEST_LOCAL_PART}@${d} through the checks of POST /emails, is signed and kept here (Captured mail), never delivered.`,
  },
  sandbox: {
    label: 'will be a sandbox send',
    explains: (d) =>
      `${d} cannot send yet, so the test is a sandbox send: every check of POST /emails runs and nothing is sent or charged. The from-domain check is one of them, so until the domain is verified the answer is the refusal your application would get.`,
  },
};

/** The test email's sender: `test@` the domain. */
export const TEST_LOCAL_PART = 'test';

/** How a test send from this domain goes: a sandbox send while the domain cannot send, else captured or delivered as the server does. */
export function testSendMode(view: Pick<DomainView, 'sending'>, config: Pick<Config, 'deliveryMode'>): TestSendMode {
  if (!view.sending) return 'sandbox';
  return config.deliveryMode === 'capture' ? 'capture' : 'send';
}

/**
 * The address the form offers: in capture mode any address is kept, so one whose captured message can be opened; else
 * the mailbox simulator's `delivered@`, which is accepted without leaving this server and counts toward no reputation.
 */
export function defaultTestRecipient(config: Pick<Config, 'deliveryMode'>): string {
  return config.deliveryMode === 'capture' ? 'you@example.com' : `delivered@${SIMULATOR_DOMAIN}`;
}

/** The send request of a test email, as a client would post it to POST /emails. */
export function testEmailRequest(domain: string, to: string, sandbox: boolean) {
  return {
    from: `Mailstead test <${TEST_LOCAL_PART}@${domain}>`,
    to,
    template: {
      name: 'notification',
      subject: `Test email from ${domain}`,
      body: `This is a test email from ${domain}, sent from the Mailstead dashboard.\nIf you can read it, ${domain} sends.`,
    },
    tags: { source: 'dashboard-test' },
    ...(sandbox ? { sandbox: true } : {}),
  };
}

export async function sendTestEmail(deps: Deps, account: AccountRow, view: DomainView, to: string): Promise<Outcome> {
  const mode = testSendMode(view, deps.config);
  const rawBody = Buffer.from(JSON.stringify(testEmailRequest(view.name, to, mode === 'sandbox')));
  let id: string;
  try {
    ({ id } = (await sendEmail({ deps, ctx: operatorContext(account), rawBody, body: readSendRequest(rawBody), idempotencyKey: null })).result);
  } catch (err) {
    if (!(err instanceof ApiError) || err.code === 'internal_error') throw err;
    const as = mode === 'sandbox' ? `The sandbox send (${view.name} cannot send yet)` : 'The test email';
    return { kind: 'error', message: `${as} was refused as POST /emails refuses it: ${err.status} ${err.code}: ${err.message}` };
  }
  const email = { href: `/dashboard/emails/${id}`, label: 'Open the email in the send log' };
  if (mode === 'sandbox') {
    return { kind: 'ok', message: `Sandboxed: every check of POST /emails passed for a test email to ${to}; nothing was sent.`, links: [email] };
  }
  if (mode === 'capture') {
    // Its one recipient's message (the captured page opens an email's first one).
    const captured = { href: `/dashboard/captured/${id}`, label: 'Open the captured message' };
    return {
      kind: 'ok',
      message: `Captured: the test email to ${to} was signed and kept on this server (capture mode), not delivered.`,
      // The simulator's addresses are answered by the simulator, in every mode: nothing is captured for them.
      links: isSimulatorAddress(to) ? [email] : [captured, email],
    };
  }
  return { kind: 'ok', message: `Sent: the test email to ${to} is queued; the send log shows each delivery attempt.`, links: [email] };
}
