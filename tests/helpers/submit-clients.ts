import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { expect } from 'vitest';

/**
 * Real SMTP submission clients for the end-to-end tests of issue 35: nodemailer in this process, and Python's smtplib
 * in a child process (tests/fixtures/smtplib-submit.py, standard library only). Both take the server's self-signed
 * certificate without checking it, as a test against a loopback server must; the user name is anything, the password
 * the API key.
 */

/** `submission` on the STARTTLS port (the 587 role), `submissions` on the implicit-TLS one (465). */
export type SubmissionMode = 'starttls' | 'tls';

export interface Envelope {
  from: string;
  to: string[];
}

/** The email id in a `250 2.0.0 Ok: queued as <id>` reply (the whole reply line, code included), or a failed check. */
export function queuedId(reply: string): string {
  const m = /^250 2\.0\.0 Ok: queued as ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/.exec(reply.trim());
  expect(m, `the 250 reply carries the email id: ${JSON.stringify(reply)}`).not.toBeNull();
  return m![1]!;
}

/**
 * nodemailer submits `raw` (the exact bytes, as its own MailComposer builds them or written by hand) with this
 * envelope; resolves with its `info.response`, the server's reply to the end of DATA.
 */
export async function nodemailerSubmit(
  ports: { port: number; securePort: number },
  mode: SubmissionMode,
  auth: { user: string; pass: string },
  envelope: Envelope,
  raw: Buffer,
): Promise<string> {
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port: mode === 'tls' ? ports.securePort : ports.port,
    secure: mode === 'tls',
    requireTLS: mode === 'starttls',
    auth,
    tls: { rejectUnauthorized: false },
  });
  try {
    const info = await transport.sendMail({ envelope: { from: envelope.from, to: envelope.to }, raw });
    return info.response;
  } finally {
    transport.close();
  }
}

/** What the Python script builds and submits (see tests/fixtures/smtplib-submit.py). */
export interface PythonMessage {
  from: string;
  to: string;
  subject: string;
  text: string;
  html?: string;
  attachment?: { filename: string; content_b64: string; type: string };
  message_id?: string;
  date?: string;
}

export interface PythonResult {
  /** The exact message bytes smtplib was given for DATA (it adds the dot-stuffing only). */
  sent: Buffer;
  /** The reply to the end of DATA, code and text as smtplib returns them (0 and '' when the reply was dropped). */
  code: number;
  reply: string;
}

const SCRIPT = fileURLToPath(new URL('../fixtures/smtplib-submit.py', import.meta.url));

/** `python3 tests/fixtures/smtplib-submit.py`: smtplib.SMTP + starttls(), or SMTP_SSL, then login, MAIL, RCPT, DATA. */
export function pythonSubmit(
  ports: { port: number; securePort: number },
  mode: SubmissionMode,
  auth: { user: string; pass: string },
  envelope: Envelope,
  message: PythonMessage,
  opts: { dropReply?: boolean } = {},
): Promise<PythonResult> {
  const request = {
    host: '127.0.0.1',
    port: mode === 'tls' ? ports.securePort : ports.port,
    mode: mode === 'tls' ? 'ssl' : 'starttls',
    user: auth.user,
    password: auth.pass,
    envelope_from: envelope.from,
    rcpts: envelope.to,
    message,
    drop_reply: opts.dropReply ?? false,
  };
  return new Promise((resolve, reject) => {
    const child = spawn('python3', [SCRIPT], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`smtplib-submit.py exited ${code}: ${stderr}${stdout}`));
      const out = JSON.parse(stdout) as { sent: string; code: number; reply: string };
      resolve({ sent: Buffer.from(out.sent, 'base64'), code: out.code, reply: out.reply });
    });
    child.stdin.end(JSON.stringify(request));
  });
}

/** A message split where its header ends (the first empty line): the header's fields, folding kept, and the body. */
export function splitMessage(raw: Buffer): { fields: string[]; body: Buffer } {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) throw new Error('no end of header');
  const header = raw.subarray(0, end).toString('latin1');
  const fields = header.split(/\r\n(?![ \t])/);
  return { fields, body: raw.subarray(end + 4) };
}

/** A header field's name, lower-cased. */
export const fieldName = (field: string): string => field.slice(0, field.indexOf(':')).trim().toLowerCase();

/** A header field's value, unfolded and trimmed. */
export const fieldValue = (field: string): string =>
  field
    .slice(field.indexOf(':') + 1)
    .replace(/\r\n[ \t]/g, ' ')
    .trim();
