import type { Classified } from './dsn.js';

/**
 * The mailbox simulator (as SES's, Resend's `delivered@resend.dev`): recipients at SIMULATOR_DOMAIN never touch the
 * network, in every DELIVERY_MODE, yet take the whole pipeline (signing, events, webhooks, the customer database,
 * quota and credits). What each address does is data: SIMULATOR_ADDRESSES. They never count toward the account's
 * reputation (totalSent, totalBounced, totalComplained, the tiers and the breaker), so testing with them is free of
 * consequences there.
 */

/** Under `.test` (RFC 2606), so no one can own it and no DNS answers for it. */
export const SIMULATOR_DOMAIN = 'simulator.mailstead.test';

export interface SimulatedAddress {
  /** What one line of the simulator's table in docs/getting-started.md says. */
  summary: string;
  /** The reply to the 1st, 2nd, ... attempt; the last one answers every later attempt. Empty: never queued. */
  replies: readonly Classified[];
  /** After a delivery, the recipient reports the message as spam (an `email.complained` event, a suppression). */
  complains?: true;
  /** Always refused at check 7 of a send, as an address on the suppression list is (`422 recipient_suppressed`). */
  alwaysSuppressed?: true;
}

const DELIVERED: Classified = { status: 'delivered', dsn: '2.0.0', detail: '250 2.0.0 OK: accepted by the mailbox simulator' };
const DEFERRED: Classified = { status: 'deferred', dsn: '4.2.1', detail: '451 4.2.1 Mailbox simulator: mailbox busy, try again later' };
const NO_SUCH_USER: Classified = { status: 'bounced', dsn: '5.1.1', detail: '550 5.1.1 Mailbox simulator: no such user here' };

/** The simulator's addresses by local part (a `+label` after it is ignored: `bounce+1@` bounces like `bounce@`). */
export const SIMULATOR_ADDRESSES: Readonly<Record<string, SimulatedAddress>> = {
  delivered: { summary: 'delivered (2.0.0)', replies: [DELIVERED] },
  bounce: { summary: 'bounced (5.1.1) and put on the suppression list', replies: [NO_SUCH_USER] },
  defer: { summary: 'deferred (4.2.1) twice, then delivered at the third attempt, on the retry schedule', replies: [DEFERRED, DEFERRED, DELIVERED] },
  complaint: { summary: 'delivered, then a complaint (`email.complained`) and put on the suppression list', replies: [DELIVERED], complains: true },
  suppressed: { summary: 'always on the suppression list: the send is refused with `422 recipient_suppressed`', replies: [], alwaysSuppressed: true },
};

/** complaint@'s report, recorded as an inbound ARF `abuse` report is (server/core/outcomes.ts writeOutcome). */
export const SIMULATED_COMPLAINT = { dsn: '5.7.1', detail: 'Complaint (mailbox simulator: the recipient reported the message as spam)' } as const;

/** Any other local part at the simulator: no such mailbox, as a real domain answers. */
const UNKNOWN: SimulatedAddress = { summary: 'bounced (5.1.1): no such simulator address', replies: [NO_SUCH_USER] };

const domainOf = (address: string) => address.slice(address.lastIndexOf('@') + 1).toLowerCase();

export function isSimulatorDomain(domain: string): boolean {
  return domain.toLowerCase() === SIMULATOR_DOMAIN;
}

export function isSimulatorAddress(address: string): boolean {
  return isSimulatorDomain(domainOf(address));
}

/** The behaviour of a simulator address, or null for an address elsewhere. */
export function simulatedAddress(address: string): SimulatedAddress | null {
  if (!isSimulatorAddress(address)) return null;
  const local = address.slice(0, address.lastIndexOf('@')).toLowerCase().replace(/\+.*$/, '');
  return Object.hasOwn(SIMULATOR_ADDRESSES, local) ? SIMULATOR_ADDRESSES[local]! : UNKNOWN;
}

/** Whether a send to `address` is refused as suppressed whatever the account's list holds. */
export function isAlwaysSuppressed(address: string): boolean {
  return simulatedAddress(address)?.alwaysSuppressed === true;
}

/**
 * The simulator's answer to the attempt after `attempts` earlier ones, and whether a complaint follows it. An address
 * that is never queued (suppressed@, if it got there) answers like an unknown one.
 */
export function simulateAttempt(address: string, attempts: number): { outcome: Classified; complains: boolean } {
  const sim = simulatedAddress(address) ?? UNKNOWN;
  const replies = sim.replies.length > 0 ? sim.replies : UNKNOWN.replies;
  const outcome = replies[Math.min(attempts, replies.length - 1)]!;
  return { outcome, complains: sim.complains === true && outcome.status === 'delivered' };
}
