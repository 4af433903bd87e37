import { openPostgres } from '../../db/pg/state.js';
import { startPostgres, type TestPostgres } from './postgres.js';

/**
 * The global setup of `npm run test:postgres` (tests/vitest.postgres.config.ts): one embedded Postgres with TLS for
 * the whole run, and a template database holding the state's migrated schema, so each service a test starts gets a
 * fresh database of its own in one `CREATE DATABASE ... TEMPLATE` (tests/helpers/test-state.ts). The workers vitest
 * forks find the server in MAILSTEAD_TEST_POSTGRES (they inherit process.env, as NODE_EXTRA_CA_CERTS).
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
  process.env.MAILSTEAD_TEST_POSTGRES = JSON.stringify({ port: server.port, user: server.user, password: server.password });
  return async () => {
    await server?.stop();
    server = null;
  };
}
