import { loadOrCreateSmtpTls } from '../../mta/inbound/tls.js';
import { type SubmissionOptions, createSubmissionServer } from '../../mta/submission/server.js';
import type { Deps } from '../../server/core/deps.js';
import { newSubmissionId, type Submission } from '../../server/core/submission.js';
import { createAuthLockout } from '../../server/core/submission-auth.js';
import { readSubmittedHeader } from '../../server/core/submitted-message.js';
import type { TestService } from './service.js';

export interface SubmissionRig {
  /** The STARTTLS port (587's role). */
  port: number;
  /** The implicit-TLS port (465's role). */
  securePort: number;
  /** The self-signed pair both present (clients skip verification, or trust `cert`). */
  tls: { key: string; cert: string };
  close(): Promise<void>;
}

/**
 * Both submission servers as the composition root builds them (server/app/listeners.ts listenSubmission), on
 * 127.0.0.1 port 0, over the service's deps (its FakeClock drives the AUTH lock-out), sharing one lock-out.
 */
export async function startSubmission(service: TestService, opts: Partial<SubmissionOptions> = {}): Promise<SubmissionRig> {
  const tls = loadOrCreateSmtpTls(service.deps.config);
  const lockout = createAuthLockout(service.deps.clock);
  const starttls = createSubmissionServer(service.deps, tls, { ...opts, secure: false, lockout });
  const implicit = createSubmissionServer(service.deps, tls, { ...opts, secure: true, lockout });
  const port = await starttls.listen('127.0.0.1', 0);
  const securePort = await implicit.listen('127.0.0.1', 0);
  return {
    port,
    securePort,
    tls: { key: tls.key, cert: tls.cert },
    async close() {
      await Promise.all([starttls.close(), implicit.close()]);
    },
  };
}

/**
 * A one-recipient message with the client's own Message-ID, as the submission server hands it to commitSubmission
 * once DATA has ended: for tests that put submissions' commits in one batch of the group commit.
 */
export function plainSubmission(deps: Pick<Deps, 'clock' | 'config'>, from: string, messageId: string, to: string): Submission {
  const id = newSubmissionId(deps);
  const body = Buffer.from('Hello.\r\n');
  const text = `From: ${from}\r\nTo: ${to}\r\nSubject: One batch\r\nMessage-ID: ${messageId}\r\n\r\n`;
  const header = readSubmittedHeader(Buffer.from(text), { id, mailHostname: deps.config.mailHostname, now: deps.clock.now() });
  return { header, raw: Buffer.concat([header.header, body]), recipients: [{ address: to, domain: to.slice(to.indexOf('@') + 1) }], id };
}
