import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { DeliveryEngine } from '../mta/delivery-engine.js';
import { parseVerp } from '../mta/verp.js';
import { resetDeliveryRig, startDeliveryRig, stopDeliveryRig } from './helpers/delivery-rig.js';
import { publishSigningRecord, verifyDkim } from './helpers/dkim-check.js';
import type { TestDnsServer } from './helpers/dns-server.js';
import { newSender, type Sender } from './helpers/sending.js';
import type { TestService } from './helpers/service.js';
import type { SmtpSink } from './helpers/smtp-sink.js';
import { startSubmission } from './helpers/submission.js';

/**
 * The runnable recipes of docs/sending/smtp/nodemailer.md and python.md, run as written: the first fenced block of
 * each "Port 587" and "Port 465" section, with only the documented placeholders replaced (the host
 * `smtp.example.com`, the port, the key `ms_your_api_key`, the domain `yourdomain.com`; the recipient
 * `customer@example.net` is the delivery rig's), in a child process (node, python3) against the in-process submission
 * server. Each message must reach the sink DKIM-signed with a VERP sender, and show in the log with `source: "smtp"`.
 *
 * The test server's certificate is self-signed. The recipes verify certificates, as they should against a real one;
 * the test turns verification off from outside the recipe, as the docs' "A self-signed certificate" sections say a
 * user would for such a server: NODE_TLS_REJECT_UNAUTHORIZED=0 for node, and for python a prelude that makes
 * ssl.create_default_context() return an unverified context.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RECIPIENT = 'customer@example.net';
const HOST = 'mx.mailstead.test';

/** The first fenced block of `lang` after the line `heading` in docs/sending/smtp/<page>. */
function recipe(page: string, heading: string, lang: string): string {
  const doc = readFileSync(join(ROOT, 'docs/sending/smtp', page), 'utf8');
  const at = doc.indexOf(`\n${heading}\n`);
  expect(at, `docs/sending/smtp/${page} has no "${heading}"`).toBeGreaterThan(0);
  const open = doc.indexOf(`\n\`\`\`${lang}\n`, at);
  const close = doc.indexOf('\n```\n', open + 1);
  expect(open, `no \`\`\`${lang} block after "${heading}"`).toBeGreaterThan(at);
  // The block belongs to this section: no other heading between the two.
  expect(doc.slice(at + 1, open).includes('\n## ')).toBe(false);
  return doc.slice(open + lang.length + 5, close + 1);
}

/**
 * Replaces each documented placeholder in order (the port first, before a key or domain that might hold its digits),
 * each of which must be in the block: a renamed placeholder fails here, not later.
 */
function substitute(block: string, values: readonly (readonly [string, string])[]): string {
  let out = block;
  for (const [placeholder, value] of values) {
    expect(out, `the recipe has no ${placeholder}`).toContain(placeholder);
    out = out.split(placeholder).join(value);
  }
  return out;
}

/** Runs a child to its end without blocking this process (the submission server runs in it). */
function run(command: string, args: string[], env: Record<string, string>, cwd: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** For python: ssl.create_default_context() gives an unverified context, for the test's self-signed pair only. */
const PY_SELF_SIGNED = 'import ssl\nssl.create_default_context = lambda *a, **k: ssl._create_unverified_context()\n';

let dns: TestDnsServer;
let sink: SmtpSink;
let service: TestService;
let engine: DeliveryEngine;
let submission: Awaited<ReturnType<typeof startSubmission>>;
let dir: string;

beforeAll(async () => {
  ({ dns, sink, service, engine } = await startDeliveryRig());
  submission = await startSubmission(service);
  // The node recipe imports 'nodemailer': it runs from a directory whose node_modules is the project's.
  dir = mkdtempSync(join(tmpdir(), 'mailstead-smtp-recipes-'));
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
});

afterAll(async () => {
  await submission?.close();
  await stopDeliveryRig({ dns, sink, service });
  if (dir) rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  resetDeliveryRig({ dns, sink });
});

/** An account with a verified domain and its Signing record published, and a key holding only `emails:send`. */
async function sender(): Promise<Sender & { smtpKey: string }> {
  const s = await newSender(service);
  await publishSigningRecord(service, dns, s);
  return { ...s, smtpKey: await service.newKey(s.account.id, ['emails:send'], 'smtp') };
}

const placeholders = (s: Sender & { smtpKey: string }, port: number, documentedPort: '587' | '465') =>
  [
    [documentedPort, String(port)],
    ['smtp.example.com', '127.0.0.1'],
    ['ms_your_api_key', s.smtpKey],
    ['yourdomain.com', s.domain],
    [RECIPIENT, RECIPIENT],
  ] as const;

/** The one message the sink received, checked as delivered mail; and the Email the log shows for it. */
async function expectDelivered(s: Sender, emailId: string | null): Promise<void> {
  await engine.runOnce();
  expect(sink.received).toHaveLength(1);
  const received = sink.received[0]!;
  expect(received.to).toEqual([RECIPIENT]);

  const dkim = await verifyDkim(service, received.raw);
  expect(dkim.results.map((r: { status: { result: string } }) => r.status.result)).toEqual(['pass']);
  const mail = await simpleParser(received.raw);
  expect(mail.subject).toBe('Your order has shipped');
  expect(mail.from?.value).toEqual([{ address: `hello@${s.domain}`, name: 'Acme' }]);
  expect(mail.text).toContain('your order is on its way.');
  expect(mail.messageId).toMatch(/^<.+@.+>$/);

  const list = await service.api('GET', '/emails?source=smtp', { key: s.key });
  expect(list.status, JSON.stringify(list.body)).toBe(200);
  expect(list.body.data).toHaveLength(1);
  const id = emailId ?? (list.body.data[0].id as string);
  expect(list.body.data[0].id).toBe(id);
  expect(parseVerp(received.from, HOST, service.deps.secretKey)).toEqual({ emailId: id, recipientIndex: 0, signed: true });

  const email = await service.api('GET', `/emails/${id}`, { key: s.key });
  expect(email.status).toBe(200);
  expect(email.body).toMatchObject({
    id,
    source: 'smtp',
    template: null,
    templateVersion: null,
    subject: 'Your order has shipped',
    from: `hello@${s.domain}`,
    to: [RECIPIENT],
  });
  expect(email.body.events.map((e: { recipient: string; status: string }) => [e.recipient, e.status])).toEqual([[RECIPIENT, 'delivered']]);
  // Nothing of it shows as API mail.
  expect((await service.api('GET', '/emails?source=api', { key: s.key })).body.data).toEqual([]);
}

describe('docs/sending/smtp/nodemailer.md, run as written', () => {
  for (const [heading, documentedPort] of [
    ['## Port 587 (STARTTLS)', '587'],
    ['## Port 465 (TLS)', '465'],
  ] as const) {
    it(`${heading.slice(3)}: delivered, signed, logged with source "smtp"`, async () => {
      const s = await sender();
      const port = documentedPort === '587' ? submission.port : submission.securePort;
      const file = join(dir, `recipe-${documentedPort}.mjs`);
      writeFileSync(file, substitute(recipe('nodemailer.md', heading, 'js'), placeholders(s, port, documentedPort)));
      const out = await run(process.execPath, [file], { NODE_TLS_REJECT_UNAUTHORIZED: '0' }, dir);
      expect(out.code, out.stderr).toBe(0);
      // The recipe prints the server's reply, which names the Email.
      const queued = /^250 2\.0\.0 Ok: queued as (\S+)$/m.exec(out.stdout);
      expect(queued, out.stdout).not.toBeNull();
      await expectDelivered(s, queued![1]!);
    });
  }
});

describe('docs/sending/smtp/python.md, run as written', () => {
  for (const [heading, documentedPort] of [
    ['## smtplib, port 587 (STARTTLS)', '587'],
    ['## smtplib, port 465 (TLS)', '465'],
  ] as const) {
    it(`${heading.slice(3)}: delivered, signed, logged with source "smtp"`, async () => {
      const s = await sender();
      const port = documentedPort === '587' ? submission.port : submission.securePort;
      const code = substitute(recipe('python.md', heading, 'python'), placeholders(s, port, documentedPort));
      const out = await run('python3', ['-c', PY_SELF_SIGNED + code], {}, dir);
      expect(out.code, out.stderr).toBe(0);
      expect(out.stdout.trim()).toBe('refused: {}');
      await expectDelivered(s, null);
    });
  }
});

describe('the recipes verify certificates as written', () => {
  // Without the test's relaxation, each recipe refuses the self-signed pair: the docs' blocks do not turn checks off.
  it('nodemailer on 587 refuses the self-signed certificate, and nothing is sent', async () => {
    const s = await sender();
    const file = join(dir, 'recipe-verify.mjs');
    writeFileSync(file, substitute(recipe('nodemailer.md', '## Port 587 (STARTTLS)', 'js'), placeholders(s, submission.port, '587')));
    const out = await run(process.execPath, [file], { NODE_TLS_REJECT_UNAUTHORIZED: '' }, dir);
    expect(out.code).not.toBe(0);
    expect(out.stderr).toMatch(/self[- ]signed certificate/i);
    expect((await service.api('GET', '/emails', { key: s.key })).body.data).toEqual([]);
  });

  it('smtplib on 465 refuses the self-signed certificate, and nothing is sent', async () => {
    const s = await sender();
    const code = substitute(recipe('python.md', '## smtplib, port 465 (TLS)', 'python'), placeholders(s, submission.securePort, '465'));
    const out = await run('python3', ['-c', code], {}, dir);
    expect(out.code).not.toBe(0);
    expect(out.stderr).toMatch(/CERTIFICATE_VERIFY_FAILED/);
    expect((await service.api('GET', '/emails', { key: s.key })).body.data).toEqual([]);
  });
});
