import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openPostgres } from '../../db/pg/state.js';
import { GENERATED_CERT_FILE, GENERATED_KEY_FILE, loadOrCreateSmtpTls } from '../../mta/inbound/tls.js';
import { startPostgres, type TestPostgres } from './postgres.js';

/**
 * The global setup of `npm run test:postgres` (tests/vitest.postgres.config.ts): one embedded Postgres with TLS for
 * the whole run, and a template database holding the state's migrated schema, so each service a test starts gets a
 * fresh database of its own in one `CREATE DATABASE ... TEMPLATE` (tests/helpers/test-state.ts). The workers vitest
 * forks find the server in MAILSTEAD_TEST_POSTGRES (they inherit process.env, as NODE_EXTRA_CA_CERTS). With the
 * server, a STARTTLS pair made once for the run (as a SQLite start generates into DATA_DIR, for mx.mailstead.test):
 * STATE_URL requires SMTP_TLS_CERT and SMTP_TLS_KEY when SMTP listens.
 */

export const TEMPLATE_DATABASE = 'mailstead_state_template';

let server: TestPostgres | null = null;

export default async function setup(): Promise<() => Promise<void>> {
  server = await startPostgres({ certificate: 'trusted' });
  await server.admin(`create database ${TEMPLATE_DATABASE}`);
  const template = await openPostgres({
    host: '127.0.0.1',
    port: server.port,
    database: TEMPLATE_DATABASE,
    user: server.user,
    password: server.password,
    ssl: false,
  });
  await template.close();
  const tlsDir = mkdtempSync(join(tmpdir(), 'mailstead-smtp-tls-'));
  loadOrCreateSmtpTls({ dataDir: tlsDir, mailHostname: 'mx.mailstead.test', smtpTlsCert: null, smtpTlsKey: null });
  process.env.MAILSTEAD_TEST_POSTGRES = JSON.stringify({
    port: server.port,
    user: server.user,
    password: server.password,
    smtpTlsCert: join(tlsDir, GENERATED_CERT_FILE),
    smtpTlsKey: join(tlsDir, GENERATED_KEY_FILE),
  });
  return async () => {
    rmSync(tlsDir, { recursive: true, force: true });
    await server?.stop();
    server = null;
  };
}
