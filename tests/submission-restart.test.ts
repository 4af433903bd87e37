import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import MailComposer from 'nodemailer/lib/mail-composer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../scripts/lib/free-port.js';
import { TestDnsServer } from './helpers/dns-server.js';
import {
  connectSendingDomain,
  createAccountWithCli,
  processApi,
  processEnv,
  runningProcesses,
  type ServiceProcess,
  startServiceProcess,
  stateRows,
} from './helpers/service-process.js';
import type { SinkAnswer } from './helpers/smtp-sink.js';
import { SmtpSink } from './helpers/smtp-sink.js';
import { nodemailerSubmit, queuedId } from './helpers/submit-clients.js';

/**
 * decisions.md section 10: the `250` after DATA comes only once the message is durable. The real process
 * (`node dist/server/app/main.js`) with its submission port on takes a message, answers `250 ... queued as <id>`, and is
 * killed with SIGKILL while its delivery of that message is still held at the sink's RCPT; started again on the same
 * DATA_DIR it delivers the message exactly once, and a client retrying the same Message-ID afterwards (its reply lost
 * in the crash) gets the same id and sends nothing again.
 */

let dns: TestDnsServer;
let sink: SmtpSink;
const dataDirs: string[] = [];

beforeAll(async () => {
  dns = await TestDnsServer.start();
  sink = await SmtpSink.start();
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
});

afterAll(async () => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  await sink?.stop();
  await dns?.stop();
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

async function waitFor(what: string, deadlineMs: number, check: () => boolean | Promise<boolean>): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The `server.started` log entry of a process. */
function started(proc: ServiceProcess): Record<string, unknown> | undefined {
  for (const line of proc.logs) {
    try {
      const entry = JSON.parse(line) as Record<string, unknown>;
      if (entry.event === 'server.started') return entry;
    } catch {
      // not JSON
    }
  }
  return undefined;
}

describe('kill -9 between the 250 and delivery', () => {
  it.each([
    ['the moment the 250 arrives', 'at-250'],
    ['while its delivery is held at the RCPT', 'at-rcpt'],
  ] as const)('killed %s: the message is delivered exactly once after a restart on the same DATA_DIR', { timeout: 90_000 }, async (_, when) => {
    sink.received = [];
    sink.attempts.clear();
    const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-submission-kill-'));
    dataDirs.push(dataDir);
    const port = await freePort();
    const env = processEnv(dataDir, {
      DNS_SERVERS: dns.address,
      SMTP_DELIVERY_PORT: String(sink.port),
      SMTP_HOST: '127.0.0.1',
      SUBMISSION_PORT: String(port),
    });

    // Every delivery attempt of the first process is held at RCPT until the process is gone; the second's are accepted.
    const held: ((a: SinkAnswer) => void)[] = [];
    let firstAlive = true;
    sink.rcpt = () => (firstAlive ? new Promise<SinkAnswer>((resolve) => held.push(resolve)) : 'accept');

    const first = await startServiceProcess(env);
    await waitFor('server.started', 10_000, () => started(first) !== undefined);
    // The real bound ports: the STARTTLS one on, the implicit-TLS one off.
    expect(started(first)).toMatchObject({ submissionPort: port, submissionsPort: null });
    const { accountId, key } = await createAccountWithCli(env, 'Kill');
    const domain = 'kill-shop.example.com';
    await connectSendingDomain(first, dataDir, key, domain);

    const from = `billing@${domain}`;
    const to = `kim-${when}@example.net`;
    const raw = await new MailComposer({
      from,
      to,
      subject: 'Your sign-in link',
      text: 'Sign in: https://app.example.org/l/abc',
      messageId: `<kill-${when}@app.example.org>`,
      newline: 'windows',
    })
      .compile()
      .build();
    const ports = { port, securePort: 0 };
    const id = queuedId(await nodemailerSubmit(ports, 'starttls', { user: 'app', pass: key }, { from, to: [to] }, raw));

    // Killed at once (the 250 promised the message is durable), or once the process is delivering it, before the
    // sink ever answers.
    if (when === 'at-rcpt') await waitFor('the first delivery attempt to reach RCPT', 20_000, () => held.length === 1);
    first.child.kill('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');
    firstAlive = false;
    for (const release of held.splice(0)) release({ code: 421, message: '4.4.2 Gone' });
    expect(sink.received).toHaveLength(0);

    // What the dead process left: the email logged and its recipient still queued.
    expect(await stateRows(dataDir, 'SELECT id, account_id AS "accountId" FROM emails WHERE id = ?', [id])).toEqual([{ id, accountId }]);
    expect(await stateRows(dataDir, "SELECT count(*) AS n FROM outbound_recipients WHERE message_id = ? AND status = 'queued'", [id])).toEqual([{ n: 1 }]);

    const second = await startServiceProcess(env);
    try {
      await waitFor('the delivery after the restart', 40_000, () => sink.received.length >= 1);
      await waitFor('the delivered event', 20_000, async () => {
        const res = await processApi(second, key, 'GET', `/emails/${id}`);
        return (res.body?.events ?? []).some((e: { status: string }) => e.status === 'delivered');
      });

      // A client whose reply the crash lost sends the same message again: the same id, nothing sent again.
      const retried = queuedId(await nodemailerSubmit(ports, 'starttls', { user: 'app', pass: key }, { from, to: [to] }, raw));
      expect(retried).toBe(id);

      const email = await processApi(second, key, 'GET', `/emails/${id}`);
      expect(email.body).toMatchObject({ id, source: 'smtp', template: null, to: [to], status: 'sent' });
      expect(email.body.events.filter((e: { status: string }) => e.status === 'delivered').map((e: { recipient: string }) => e.recipient)).toEqual([to]);
      const listed = await processApi(second, key, 'GET', '/emails?source=smtp');
      expect(listed.body.data.map((e: { id: string }) => e.id)).toEqual([id]);

      // Exactly once: one email on the account, and nothing of it left in the queue to be sent again.
      expect(await stateRows(dataDir, 'SELECT id FROM emails WHERE account_id = ?', [accountId])).toEqual([{ id }]);
      expect(await stateRows(dataDir, "SELECT count(*) AS n FROM outbound_recipients WHERE message_id = ? AND status = 'queued'", [id])).toEqual([{ n: 0 }]);
      expect(sink.received.map((r) => [r.to, r.from.startsWith(`bounce+${id.replace(/-/g, '')}.0`)])).toEqual([[[to], true]]);
      // Held (and never answered) before the kill when it got that far, then accepted once.
      if (when === 'at-rcpt') expect(sink.attempts.get(to)).toBe(2);
      // Nothing of the key in either process's log.
      const logs = [...first.logs, ...second.logs].join('\n');
      for (const secret of [key, Buffer.from(`\0app\0${key}`).toString('base64'), Buffer.from(key).toString('base64')])
        expect(logs.includes(secret)).toBe(false);
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
  });
});
