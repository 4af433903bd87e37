import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { loadOrCreateSmtpTls } from '../../mta/inbound/tls.js';

/**
 * The floor under `bench:submission`: smtp-server as the submission server configures it (STARTTLS with a self-signed
 * pair, AUTH PLAIN after TLS, SIZE), taking any password and draining each message before its 250, with no check, no
 * header read and nothing stored. What SMTP with TLS costs at the least for a message, in the same run as the service.
 */
const dir = mkdtempSync(join(tmpdir(), 'mailstead-bare-submission-'));
const tls = loadOrCreateSmtpTls({ dataDir: dir, mailHostname: 'mx.bench.test', smtpTlsCert: null, smtpTlsKey: null });
let n = 0;
const server = new SMTPServer({
  name: 'mx.bench.test',
  key: tls.key,
  cert: tls.cert,
  size: 10 * 1024 * 1024,
  authMethods: ['PLAIN', 'LOGIN'],
  allowInsecureAuth: false,
  disableReverseLookup: true,
  hideDSN: true,
  logger: false,
  onAuth(_auth, _session, callback) {
    callback(null, { user: 'bench' });
  },
  onData(stream, _session, callback) {
    stream.on('data', () => undefined);
    stream.on('end', () => callback(null, `2.0.0 Ok: queued as bare-${++n}`));
  },
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ event: 'http.listening', port: (server.server.address() as AddressInfo).port })}\n`);
});
process.on('SIGTERM', () => {
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
});
