import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../scripts/lib/free-port.js';
import { newWebhookSecret, signedHeaders as signedHeadersOnTheWire } from '../server/core/webhook-signing.js';

/**
 * The snippets of docs/api/webhook-signatures.md ("Verifying webhook signatures"), run as written: the Node one as a real receiver process, the
 * Python one as functions, against posts signed by the service's own signedHeaders.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const README = readFileSync(join(ROOT, 'docs/api/webhook-signatures.md'), 'utf8');

/** The first fenced block of `lang` after `heading`. */
function snippet(heading: string, lang: string): string {
  const at = README.indexOf(`\n${heading}\n`);
  expect(at, `docs/api/webhook-signatures.md has no "${heading}"`).toBeGreaterThan(0);
  const open = README.indexOf(`\n\`\`\`${lang}\n`, at);
  const close = README.indexOf('\n```\n', open + 1);
  expect(open).toBeGreaterThan(at);
  return README.slice(open + lang.length + 5, close + 1);
}

/**
 * The headers of a post as a receiver's framework hands them to the snippet: Node's `req.headers` and Flask's
 * `request.headers` look names up case-insensitively, and the drivers below index them lower-case.
 */
const signedHeaders = (...args: Parameters<typeof signedHeadersOnTheWire>): Record<string, string> =>
  Object.fromEntries(Object.entries(signedHeadersOnTheWire(...args)).map(([name, value]) => [name.toLowerCase(), value]));

const secret = newWebhookSecret();
const otherSecret = newWebhookSecret();
const now = () => Math.floor(Date.now() / 1000);

/** A post as the dispatcher sends it; non-ASCII in the data, so the bytes matter. */
const delivery = { id: '01950000-0000-7000-8000-00000000abcd', type: 'email.bounced' };
const body = JSON.stringify({
  id: delivery.id,
  type: delivery.type,
  createdAt: '2026-03-10T12:00:00.000Z',
  data: {
    messageId: '01950000-0000-7000-8000-000000000001',
    recipient: 'zoë@example.net',
    status: 'bounced',
    dsn: '5.1.1',
    detail: '550 5.1.1 Adresse inconnue ✗',
    occurredAt: '2026-03-10T12:00:00.000Z',
    from: 'billing@example.com',
  },
});

describe('the Node snippet, as a receiver process', () => {
  let dir: string;
  let child: ChildProcess;
  let url: string;
  let stderr = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mailstead-readme-'));
    const file = join(dir, 'receiver.mjs');
    writeFileSync(file, snippet('## Node (node:crypto)', 'js'));
    const port = await freePort();
    url = `http://127.0.0.1:${port}/hook`;
    child = spawn(process.execPath, [file], {
      env: { PATH: process.env.PATH ?? '', PORT: String(port), WEBHOOK_SECRET: secret },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    for (let i = 0; ; i++) {
      try {
        await fetch(url, { method: 'POST', body: '{}' });
        return;
      } catch {
        if (i > 200 || child.exitCode !== null) throw new Error(`the receiver did not start: ${stderr}`);
        await new Promise((r) => setTimeout(r, 25));
      }
    }
  });
  afterAll(() => {
    child?.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  const post = async (headers: Record<string, string>, raw: string | Buffer = body) => (await fetch(url, { method: 'POST', headers, body: raw })).status;

  it('accepts a post signed by the service (both headers verified on the raw bytes)', async () => {
    expect(await post(signedHeaders(secret, delivery, now(), body)), stderr).toBe(204);
  });

  it('refuses a changed body, a body parsed and serialised again, and a body whose bytes were re-encoded', async () => {
    const headers = signedHeaders(secret, delivery, now(), body);
    expect(await post(headers, body.replace('5.1.1', '5.1.2'))).toBe(400);
    expect(await post(headers, JSON.stringify(JSON.parse(body), null, 1))).toBe(400);
    expect(await post(headers, JSON.stringify(JSON.parse(body)).replace('ë', '\\u00eb'))).toBe(400);
  });

  it('refuses when either signature is wrong or missing, or the timestamp is outside its tolerance', async () => {
    const good = signedHeaders(secret, delivery, now(), body);
    const forged = signedHeaders(otherSecret, delivery, now(), body);
    expect(await post({ ...good, 'x-service-signature': forged['x-service-signature']! })).toBe(400);
    expect(await post({ ...good, 'webhook-signature': forged['webhook-signature']! })).toBe(400);
    const { 'x-service-signature': _s, ...noService } = good;
    expect(await post(noService)).toBe(400);
    const { 'webhook-signature': _w, ...noStandard } = good;
    expect(await post(noStandard)).toBe(400);
    expect(await post({ ...good, 'webhook-id': 'another-id' })).toBe(400);
    expect(await post(signedHeaders(secret, delivery, now() - 600, body))).toBe(400);
    // Several Standard Webhooks signatures (a rotated secret): one that matches is enough.
    expect(await post({ ...good, 'webhook-signature': `${forged['webhook-signature']!} ${good['webhook-signature']!}` })).toBe(204);
  });
});

describe('the Node snippet, each function on its own', () => {
  it("verifyServiceSignature and verifyStandardSignature each accept the service's post and refuse a changed or re-serialised body, a wrong secret, an old timestamp", () => {
    const dir = mkdtempSync(join(tmpdir(), 'mailstead-readme-'));
    try {
      writeFileSync(join(dir, 'receiver.mjs'), snippet('## Node (node:crypto)', 'js'));
      const good = signedHeaders(secret, delivery, now(), body);
      const cases = [
        { headers: good, body },
        { headers: good, body: body.replace('5.1.1', '5.1.2') },
        { headers: good, body: JSON.stringify(JSON.parse(body), null, 1) },
        { headers: signedHeaders(otherSecret, delivery, now(), body), body },
        { headers: signedHeaders(secret, delivery, now() - 600, body), body },
      ].map((c) => ({ headers: c.headers, body: Buffer.from(c.body).toString('base64') }));
      // Importing the module starts its server (on a random port): the driver exits once it has its answers.
      const driver = `
        import { verifyServiceSignature, verifyStandardSignature } from './receiver.mjs';
        const cases = JSON.parse(process.env.CASES);
        const out = cases.map((c) => { const raw = Buffer.from(c.body, 'base64'); return [verifyServiceSignature(process.env.WEBHOOK_SECRET, c.headers['x-service-signature'], raw), verifyStandardSignature(process.env.WEBHOOK_SECRET, c.headers, raw)]; });
        process.stdout.write(JSON.stringify(out));
        process.exit(0);`;
      const run = spawnSync(process.execPath, ['--input-type=module', '-e', driver], {
        cwd: dir,
        encoding: 'utf8',
        env: { PATH: process.env.PATH ?? '', PORT: '0', WEBHOOK_SECRET: secret, CASES: JSON.stringify(cases) },
      });
      expect(run.status, run.stderr).toBe(0);
      expect(JSON.parse(run.stdout)).toEqual([
        [true, true],
        [false, false],
        [false, false],
        [false, false],
        [false, false],
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// python3 is on every machine that can install this project (node-gyp needs it to build better-sqlite3), so the
// Python snippet is always run, never skipped.

describe('the Python snippet', () => {
  it('verifies both headers of a post signed by the service and refuses changed ones', () => {
    const good = signedHeaders(secret, delivery, now(), body);
    const forged = signedHeaders(otherSecret, delivery, now(), body);
    const old = signedHeaders(secret, delivery, now() - 600, body);
    // Headers reach Flask and Django as latin-1 text: a forger's non-ASCII signature must be refused, not raise.
    const t = good['webhook-timestamp'];
    const nonAscii = { ...good, 'x-service-signature': `t=${t},v1=\u00e9`, 'webhook-signature': 'v1,\u00e9' };
    // A timestamp longer than Python's int() takes (4,300 digits) must be refused, not raise.
    const longTimestamp = { ...good, 'x-service-signature': `t=${'1'.repeat(5000)},v1=00`, 'webhook-timestamp': '1'.repeat(5000) };
    const cases = [
      { headers: good, body },
      { headers: good, body: body.replace('5.1.1', '5.1.2') },
      { headers: forged, body },
      { headers: old, body },
      { headers: nonAscii, body },
      { headers: longTimestamp, body },
    ].map((c) => ({ headers: c.headers, body: Buffer.from(c.body).toString('base64') }));
    const driver = `
import base64, json, sys
results = []
for case in json.load(sys.stdin):
    raw = base64.b64decode(case["body"])
    h = case["headers"]
    results.append([verify_service_signature(${JSON.stringify(secret)}, h["x-service-signature"], raw), verify_standard_signature(${JSON.stringify(secret)}, h, raw)])
print(json.dumps(results))
`;
    const run = spawnSync('python3', ['-c', snippet('## Python (hmac, hashlib)', 'python') + driver], { input: JSON.stringify(cases), encoding: 'utf8' });
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual([
      [true, true],
      [false, false],
      [false, false],
      [false, false],
      [false, false],
      [false, false],
    ]);
  });
});
